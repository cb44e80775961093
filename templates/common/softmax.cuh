// fagen: masking and online softmax on accumulator fragments in registers.
//
// Fragment layout (mma.sync m16n8 C fragments; also each warp's slice of a wgmma accumulator):
// acc[t][j][e] holds row 16*t + lane/4 + 8*(e/2), column 8*j + 2*(lane%4) + e%2 of the warp's
// tile. A row's values are spread over the 4 lanes of a quad, so row reductions are two
// shuffles. Rows are indexed r = 2*t + e/2 below.
#ifndef FAGEN_TEMPLATES_COMMON_SOFTMAX_CUH
#define FAGEN_TEMPLATES_COMMON_SOFTMAX_CUH

#include "common/exp2_poly.h"
#include "common/variants.cuh"

namespace fagen {

/// 2^x, relative error ~2^-22, denormal results flushed to 0; 2^-inf = 0.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/// FlashAttention-4's conditional rescaling: the max a row's P is taken relative to, given its
/// current one `row_max` and the tile's `m` (>= row_max): `m` once it exceeds `row_max` by more
/// than kTau in log2 units, else the stale `row_max` (P then reaches at most 2^kTau). kTau <= 0
/// takes `m` always. NaN when both are -inf: keeps -inf.
template <int kTau>
__device__ __forceinline__ float thresholded_max(float m, float row_max, float scale_log2) {
  if constexpr (kTau > 0) {
    if (!((m - row_max) * scale_log2 > float(kTau)))
      return row_max;
  }
  return m;
}

/// Where element [t][j][e] of a warp's fragment tile lies in the attention matrix (the
/// mma.sync C layout: 16-row tiles t, 8-column tiles j, lane / 4 rows, 2 columns a lane), with
/// (row0, col0) the warp's fragment origin and lane = threadIdx.x % 32.
__device__ __forceinline__ int fragment_row(int row0, int lane, int t, int e) {
  return row0 + 16 * t + lane / 4 + 8 * (e / 2);
}
__device__ __forceinline__ int fragment_col(int col0, int lane, int j, int e) {
  return col0 + 8 * j + 2 * (lane % 4) + e % 2;
}

/// Sets invisible logits and key columns >= seqlen_k to -inf. (row0, col0): the tile
/// coordinates of this warp's fragment origin.
template <class Mask, int kRowTiles, int kColTiles>
__device__ __forceinline__ void apply_mask(float (&s)[kRowTiles][kColTiles][4], int row0,
                                           int col0, AttentionShape shape) {
  const int lane = threadIdx.x % 32;
  const float kNegInf = -__int_as_float(0x7f800000);
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
    for (int j = 0; j < kColTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int row = fragment_row(row0, lane, t, e);
        int col = fragment_col(col0, lane, j, e);
        if (col >= shape.seqlen_k || !Mask::is_visible(row, col, shape))
          s[t][j][e] = kNegInf;
      }
}

/// As apply_mask for fragments whose rows are not consecutive queries: row r = 2 t + e / 2 of
/// this thread's fragments (as OnlineSoftmax numbers them) is query `query[r]` (a decode tile's
/// packed rows: several heads' query tokens). col0: the fragments' first key column.
template <class Mask, int kRowTiles, int kColTiles>
__device__ __forceinline__ void apply_mask_to_queries(float (&s)[kRowTiles][kColTiles][4],
                                                      const int (&query)[2 * kRowTiles],
                                                      int col0, AttentionShape shape) {
  const int lane = threadIdx.x % 32;
  const float kNegInf = -__int_as_float(0x7f800000);
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
    for (int j = 0; j < kColTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = fragment_col(col0, lane, j, e);
        if (col >= shape.seqlen_k || !Mask::is_visible(query[2 * t + e / 2], col, shape))
          s[t][j][e] = kNegInf;
      }
}

/// Replaces raw scores s = q . k by the score mod's logits (natural-log units), element by
/// element; call before apply_mask (a masked -inf is no score). (row0, col0) as apply_mask.
template <class ScoreMod, int kRowTiles, int kColTiles>
__device__ __forceinline__ void apply_score_mod(float (&s)[kRowTiles][kColTiles][4],
                                                const ScoreMod &mod, int row0, int col0) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
    for (int j = 0; j < kColTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[t][j][e] = mod.logit(s[t][j][e], fragment_row(row0, lane, t, e),
                               fragment_col(col0, lane, j, e));
}

/// The variant's hooks on this warp's logits of key tile n_block of query tile m_block (the
/// forwards' sequence; the sm90ws forward calls it, the sm80 one spells it out, see there):
/// the score mod (natural-log logits), then the mask where the tile needs it. first_row: the warp's first row in the query tile (its fragment origin is
/// row m_block * kBlockM + first_row, as apply_mask's row0). The mask's condition and the row
/// are spelled out here, not through a helper or a row0 argument: so nvcc 13.0 emits the code
/// of the kernels that spelled them inline (through either it hoisted and reordered them).
template <class Mask, int kBlockM, int kBlockN, class ScoreMod, int kRowTiles, int kColTiles>
__device__ __forceinline__ void apply_logit_hooks(float (&s)[kRowTiles][kColTiles][4],
                                                  const ScoreMod &score_mod, int m_block,
                                                  int first_row, int n_block,
                                                  const AttentionShape &shape) {
  if constexpr (!ScoreMod::kIdentity)
    apply_score_mod(s, score_mod, m_block * kBlockM + first_row, n_block * kBlockN);
  if ((n_block + 1) * kBlockN > shape.seqlen_k ||
      Mask::template needs_mask<kBlockM, kBlockN>(m_block, n_block, shape))
    apply_mask<Mask>(s, m_block * kBlockM + first_row, n_block * kBlockN, shape);
}

/// Running max and sum per row for kRowTiles 16-row tiles. The max is kept in raw logit
/// units; logits reach exp2 through one FFMA with scale_log2 = softmax_scale * log2(e) (> 0).
/// kRescaleTau, kExp2EmuPercent, kExp2PolyDegree: see sm80::FwdConfig.
template <int kRowTiles, int kRescaleTau = 0, int kExp2EmuPercent = 0, int kExp2PolyDegree = 3>
struct OnlineSoftmax {
  static constexpr int kRows = 2 * kRowTiles;
  float row_max[kRows]; // the max the row's P is relative to; -inf until it saw a visible key
  float row_sum[kRows]; // this lane's partial sum; quad_sum() only in finalize()

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = -__int_as_float(0x7f800000);
      row_sum[r] = 0.f;
    }
  }

  /// Turns logits s into unnormalized probabilities exp2(scale_log2 * (s - max)) and rescales
  /// the output accumulator o to the new max.
  /// kRescaleTau >= 0: o is rescaled only when some row of the warp raised its finite max:
  /// otherwise every factor is exactly 1 (or o is still ~0), and the multiplies on the path
  /// from S to P@V are skipped. kRescaleTau > 0 raises a row's max only past the tau margin.
  template <int kColTiles, int kOColTiles>
  __device__ __forceinline__ void update(float (&s)[kRowTiles][kColTiles][4],
                                         float (&o)[kRowTiles][kOColTiles][4], float scale_log2) {
    const float kNegInf = -__int_as_float(0x7f800000);
    // Columns [0, kEmuColumns) of each row's 2 * kColTiles in this thread go to exp2_poly.
    constexpr int kEmuColumns = (2 * kColTiles * kExp2EmuPercent + 50) / 100;
    float rescale[kRows];
    bool grew = false;
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 2 * t + h;
        float m = row_max[r];
#pragma unroll
        for (int j = 0; j < kColTiles; ++j)
          m = fmaxf(m, fmaxf(s[t][j][2 * h], s[t][j][2 * h + 1]));
        m = thresholded_max<kRescaleTau>(quad_max(m), row_max[r], scale_log2);
        // A row with no visible key so far keeps max -inf; use 0 so that exp2 gives 0, not NaN.
        const float m_used = m == kNegInf ? 0.f : m;
        grew |= m != row_max[r] && row_max[r] != kNegInf;
        rescale[r] = exp2_approx((row_max[r] - m_used) * scale_log2);
        const float bias = -m_used * scale_log2;
        row_max[r] = m;
        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < kColTiles; ++j)
#pragma unroll
          for (int e = 2 * h; e < 2 * h + 2; ++e) {
            const float x = fmaf(s[t][j][e], scale_log2, bias);
            s[t][j][e] = 2 * j + e % 2 < kEmuColumns ? exp2_poly<kExp2PolyDegree>(x)
                                                     : exp2_approx(x);
            sum += s[t][j][e];
          }
        row_sum[r] = row_sum[r] * rescale[r] + sum;
      }
    if constexpr (kRescaleTau >= 0) {
      if (!__any_sync(0xffffffffu, grew))
        return;
    }
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
      for (int d = 0; d < kOColTiles; ++d)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          o[t][d][e] *= rescale[2 * t + e / 2];
  }

  /// Normalizes o by the row sums and returns each row's log-sum-exp in natural-log units
  /// (rows that saw no key: o = 0, lse = -inf). Such rows are told by their max: exp2_poly
  /// gives them tiny nonzero sums.
  template <int kOColTiles>
  __device__ __forceinline__ void finalize(float (&o)[kRowTiles][kOColTiles][4], float scale_log2,
                                           float (&lse)[kRows]) {
    finalize(o, scale_log2, lse, 1.f);
  }

  /// As finalize, o also multiplied by o_scale (dropout's 1 / (1 - p)).
  template <int kOColTiles>
  __device__ __forceinline__ void finalize(float (&o)[kRowTiles][kOColTiles][4], float scale_log2,
                                           float (&lse)[kRows], float o_scale) {
    const float kLn2 = 0.693147180559945309f;
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 2 * t + h;
        const float kNegInf = -__int_as_float(0x7f800000);
        const float sum = quad_sum(row_sum[r]);
        const bool empty = row_max[r] == kNegInf;
        const float inv = empty ? 0.f : o_scale / sum;
        lse[r] = empty ? kNegInf : (row_max[r] * scale_log2 + __log2f(sum)) * kLn2;
#pragma unroll
        for (int d = 0; d < kOColTiles; ++d) {
          o[t][d][2 * h] *= inv;
          o[t][d][2 * h + 1] *= inv;
        }
      }
  }
};

} // namespace fagen

#endif // FAGEN_TEMPLATES_COMMON_SOFTMAX_CUH
