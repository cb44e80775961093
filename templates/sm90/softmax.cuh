// fagen sm90: the online softmax of the wgmma forwards, on a warpgroup's (64, kBlockN) tile of
// S (float[kBlockN / 8][4] per thread, the layout of wgmma.cuh; common/softmax.cuh's
// OnlineSoftmax<1> holds a thread's two rows): the exponentials (ex2.approx or exp2_poly),
// FlashAttention-4's conditional rescaling and its kept-max fast path, and the O rescale.
#ifndef FAGEN_TEMPLATES_SM90_SOFTMAX_CUH
#define FAGEN_TEMPLATES_SM90_SOFTMAX_CUH

#include "common/exp2_poly.h"
#include "common/softmax.cuh"

namespace fagen {
namespace sm90 {

/// Row half h of 8-column tile j of a softmax step: its two logits become exp2(scale_log2 * s +
/// bias) in place, added to `sum`; the first kEmuColumns of a row's values in this thread go to
/// exp2_poly (FMA pipe), the rest to ex2.approx (MUFU).
template <int kEmuColumns, int kPolyDegree>
__device__ __forceinline__ void exp_pair(float (&t)[4], int j, int h, float scale_log2, float bias,
                                         float &sum) {
#pragma unroll
  for (int e = 2 * h; e < 2 * h + 2; ++e) {
    const float x = fmaf(t[e], scale_log2, bias);
    t[e] = 2 * j + e % 2 < kEmuColumns ? exp2_poly<kPolyDegree>(x) : exp2_approx(x);
    sum += t[e];
  }
}

/// The first half of an online-softmax step, split from the O rescale so that it can run while
/// the previous P V is still in flight: turns logits s into exp2(scale_log2 * (s - max)),
/// updates the running max and sum of softmax (its 2 rows of this thread) and returns each row's
/// rescale factor for O. Rows with no visible key so far keep max -inf and get P = 0.
/// The first kEmuColumns of each row's 2 * kColTiles values in this thread go through
/// exp2_poly<kPolyDegree> on the FMA pipe instead of MUFU (FlashAttention-4, section 3.1.3).
/// Returns whether O needs the rescale: false when no row of the warp raised a finite max
/// (every factor is then exactly 1, or O is still 0).
/// kTau > 0 (FlashAttention-4's conditional rescaling): a row keeps its stale max unless the
/// tile's exceeds it by more than kTau in log2 units, so P may reach 2^kTau and O is rescaled
/// far less often; the result differs from kTau = 0 only by rounding (finalize divides by the
/// same sum).
template <int kEmuColumns, int kPolyDegree, int kTau = 0, int kColTiles>
__device__ __forceinline__ bool softmax_exp(float (&rescale)[2], OnlineSoftmax<1> &softmax,
                                            float (&s)[kColTiles][4], float scale_log2) {
  const float kNegInf = -__int_as_float(0x7f800000);
  bool grew = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float m = softmax.row_max[h];
#pragma unroll
    for (int j = 0; j < kColTiles; ++j)
      m = fmaxf(m, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
    m = thresholded_max<kTau>(quad_max(m), softmax.row_max[h], scale_log2);
    const float m_used = m == kNegInf ? 0.f : m;
    grew |= m != softmax.row_max[h] && softmax.row_max[h] != kNegInf;
    rescale[h] = exp2_approx((softmax.row_max[h] - m_used) * scale_log2);
    const float bias = -m_used * scale_log2;
    softmax.row_max[h] = m;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kColTiles; ++j)
      exp_pair<kEmuColumns, kPolyDegree>(s[j], j, h, scale_log2, bias, sum);
    softmax.row_sum[h] = softmax.row_sum[h] * rescale[h] + sum;
  }
  return __any_sync(0xffffffffu, grew);
}

/// softmax_exp's fast path for a step whose rows (this warp's) all have a finite running max,
/// in the common case that the kTau rule keeps every one (kTau > 0): the exponentials start at
/// once from the running max, without waiting for the tile's max; without kBoundBySum (below)
/// that max is computed beside them and decides afterwards whether they stand. Returns true
/// where they do: P and the row sums are then exactly softmax_exp's (the same bias, and O's
/// rescale factor 1). Returns false,
/// with the softmax state untouched and s no longer the logits, where some row of the warp
/// would move its max: the caller recomputes its S (gemm_qk_warp) and takes softmax_exp. (The
/// max's reduction, a chain of FMNMX and two shuffles a row, sat in front of every
/// exponential; off that path the hd 128 main loop ran 3-5 % faster on the H200,
/// docs/perf/sm90-fwd.md.)
/// kBoundBySum (every exponential from ex2.approx, which gives +inf from 2^128 on, and kTau >=
/// 6): no tile max in the common case. A thread's partial row sum bounds each of its P (all
/// >= 0), so sums <= 2^(kTau - 1) in every lane of the warp bound every P of its rows by
/// 2^(kTau - 1): no max moved past the kTau rule (a factor 2 to spare for rounding while
/// |row max * scale_log2| < 2^24; beyond, the P computed are still bounded). Where some
/// sum is larger (+inf, NaN), the warp applies the rule to P itself: its rows' largest P is
/// 2^((tile max - running max) * scale_log2), so the max moved iff that exceeds 2^kTau (NaN P
/// are skipped by the max, as the tile max skipped NaN logits). A row whose max creeps up
/// within kTau thus keeps the fast path instead of recomputing S in every step
/// (H200, docs/perf/sm90-fwd.md). Not with exp2_poly columns: past 2^128 they wrap instead of
/// saturating.
template <int kEmuColumns, int kPolyDegree, int kTau, int kColTiles>
__device__ __forceinline__ bool softmax_exp_kept_max(OnlineSoftmax<1> &softmax,
                                                     float (&s)[kColTiles][4], float scale_log2) {
  constexpr bool kBoundBySum = kEmuColumns == 0 && kTau >= 6;
  float m_tile[2], sum[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float bias = -softmax.row_max[h] * scale_log2;
    float m = softmax.row_max[h], acc = 0.f;
#pragma unroll
    for (int j = 0; j < kColTiles; ++j) {
      if constexpr (!kBoundBySum)
        m = fmaxf(m, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
      exp_pair<kEmuColumns, kPolyDegree>(s[j], j, h, scale_log2, bias, acc);
    }
    m_tile[h] = m;
    sum[h] = acc;
  }
  if constexpr (kBoundBySum) {
    constexpr float kBound = float(1 << (kTau - 1));
    if (!__all_sync(0xffffffffu, sum[0] <= kBound && sum[1] <= kBound)) {
      bool moved = false;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float p_max = 0.f;
#pragma unroll
        for (int j = 0; j < kColTiles; ++j)
          p_max = fmaxf(p_max, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
        moved |= p_max > float(1 << kTau);
      }
      if (__any_sync(0xffffffffu, moved))
        return false;
    }
  } else {
    // Per lane, without the quad's max: the rule is monotone in the tile max, and the vote
    // spans every lane of each row's quad.
    bool moved = false;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      moved |= thresholded_max<kTau>(m_tile[h], softmax.row_max[h], scale_log2) !=
               softmax.row_max[h];
    if (__any_sync(0xffffffffu, moved))
      return false;
  }
  // softmax_exp's update with its factor exp2(0) = 1: row_sum * 1 + sum.
#pragma unroll
  for (int h = 0; h < 2; ++h)
    softmax.row_sum[h] = softmax.row_sum[h] + sum[h];
  return true;
}

/// Ends the basic block after the softmax of a step. ptxas places a wgmma wait at the start of
/// its basic block: in one block with the softmax, the wait for the previous P V went above
/// the exponentials, and the softmax no longer overlapped P V (SASS of the sm90ws kernels,
/// nvcc 13.0). The branch reads the row sums, so it comes after every
/// exponential; it is never taken (sums of exponentials are >= 0, or NaN).
__device__ __forceinline__ void end_block_after(const float (&row_sum)[2]) {
  if (row_sum[0] + row_sum[1] < -1.f)
    __trap();
}

template <int kDimTiles>
__device__ __forceinline__ void rescale_o(float (&o)[kDimTiles][4], const float (&rescale)[2]) {
#pragma unroll
  for (int d = 0; d < kDimTiles; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      o[d][e] *= rescale[e / 2];
}

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_SOFTMAX_CUH
