// fagen sm80: attention backward in FlashAttention-2 order, mma.sync + ldmatrix + cp.async.
//
// Portable: valid source for sm_80, sm_90 and sm_100. Three kernels per plan (bwd_params.h):
//   bwd_preprocess   D = rowsum(dO o O) in fp32; zeroes this call's dq_accum rows (unless the
//                    first key tile stores, BwdConfig::kDqStoreFirst) and the dQ semaphores.
//   bwd_kernel       one CTA per (key tile, kv head, batch): dK, dV of the tile in registers
//                    over every visible query tile of every query head of the group; dQ
//                    accumulated in fp32 into dq_accum (deterministic kernels without a mask
//                    or block sparsity: into BwdConfig::kDqSlots copies of it).
//   bwd_postprocess  dQ = dq_accum (summed over its copies; times the softmax scale) in the
//                    input dtype.
// dq_accum is this file's own: the rows of a full query tile hold its dQ in the order of the
// reductions (DqAccumOrder, kDqAccumFragmentOrder), other rows are row-major.
// Semantics: docs/design/variants-and-backward.md. With the identity score mod, dS is kept
// unscaled and the softmax scale is applied to dK in the epilogue and to dQ in _post.
#ifndef FAGEN_TEMPLATES_SM80_BWD_KERNEL_CUH
#define FAGEN_TEMPLATES_SM80_BWD_KERNEL_CUH

#include "abi/bwd_params.h"
#include "common/softmax.cuh"
#include "common/tile_order.h"
#include "sm80/bwd_config.cuh"
#include "sm80/bwd_tile_ops.cuh"

namespace fagen {
namespace sm80 {

constexpr float kLog2e = 1.4426950408889634f;

/// Offset of batch entry b in a tensor with batch stride `stride`: varlen tensors are packed
/// (rows start at cu_seqlens), so their batch strides are ignored.
template <bool kVarlen> __device__ __forceinline__ int64_t batch_offset(int b, int64_t stride) {
  return kVarlen ? 0 : b * stride;
}

/// The (query head, query tile) pairs one key tile visits, in order: heads of the group, then
/// the query tiles the mask and the sparsity layout let see the key tile.
template <class Config> struct QueryTileCursor {
  using Mask = typename Config::Mask;
  using Sparsity = typename Config::Sparsity;
  static constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN;
  const fagen_fwd_params &params;
  int batch, n_block, head_end, m_begin, m_end;
  int head, m_block; // the current pair; head == head_end: done

  __device__ __forceinline__ QueryTileCursor(const fagen_fwd_params &p, int batch_, int kv_head,
                                             int n_block_, AttentionShape shape)
      : params(p), batch(batch_), n_block(n_block_), head_end((kv_head + 1) * p.group_size),
        m_begin(Mask::template m_block_begin<kBlockM, kBlockN>(n_block_, shape)),
        m_end(Mask::template m_block_end<kBlockM, kBlockN>(n_block_, shape)),
        head(kv_head * p.group_size), m_block(kDescending ? m_end : m_begin - 1) {
    if (m_begin >= m_end)
      head = head_end;
    advance();
  }
  /// Query tiles last first (Config::kDqAscending), else first first; heads in order.
  static constexpr bool kDescending = Config::kDqAscending;
  __device__ __forceinline__ bool valid() const { return head < head_end; }
  /// Moves to the next visible pair (from (head, m_block), exclusive).
  __device__ __forceinline__ void advance() {
    while (head < head_end) {
      if (kDescending ? --m_block < m_begin : ++m_block >= m_end) {
        m_block = kDescending ? m_end : m_begin - 1;
        ++head;
        continue;
      }
      if (Sparsity(params, batch, head).template visible<kBlockM, kBlockN>(m_block, n_block))
        return;
    }
  }
};

/// Shared-memory addresses of the tiles (BwdConfig's layout).
template <class Config> struct BwdSmem {
  u32 k, v, q, dout, p, ds; // q, dout: stage 0
  __device__ __forceinline__ explicit BwdSmem(u32 base)
      : k(base), v(k + Config::kSmemKBytes), q(v + Config::kSmemVBytes),
        dout(q + Config::kStages * Config::kSmemQBytes),
        p(dout + Config::kStages * Config::kSmemDoBytes), ds(p + Config::kSmemPBytes) {}
  __device__ __forceinline__ u32 q_stage(int s) const { return q + s * Config::kSmemQBytes; }
  __device__ __forceinline__ u32 dout_stage(int s) const { return dout + s * Config::kSmemDoBytes; }
};

/// Where one (batch, query head, query tile, key tile) step lives.
struct BwdStep {
  int batch, head, m_block, n_block;
  int64_t q_row0; // the sequence's first row in the packed per-row tensors (dense: 0)
  AttentionShape shape;
};

/// Issues the loads of one query tile's Q and dO rows into buffer `stage`.
template <class Config>
__device__ __forceinline__ void load_query_tile(const fagen_bwd_params &params, const BwdStep &st,
                                                const BwdSmem<Config> &sm, int stage) {
  using Element = typename Config::Element;
  constexpr bool kVarlen = Config::Variant::kVarlen;
  const int64_t row = st.q_row0 + int64_t(st.m_block) * Config::kBlockM;
  const int rows = st.shape.seqlen_q - st.m_block * Config::kBlockM;
  const fagen_fwd_params &f = params.fwd;
  load_rows_async<Config::kBlockM, Config::kHeadDimQK, Config::kHeadDimQKPad, Config::kRowQK,
                  Config::kThreads, Config::kSwizzleQK>(
      sm.q_stage(stage),
      static_cast<const Element *>(f.q) + batch_offset<kVarlen>(st.batch, f.q_batch_stride) +
          st.head * f.q_head_stride + row * f.q_row_stride,
      f.q_row_stride, rows);
  load_rows_async<Config::kBlockM, Config::kHeadDimV, Config::kHeadDimVPad, Config::kRowV,
                  Config::kThreads, Config::kSwizzleV>(
      sm.dout_stage(stage),
      static_cast<const Element *>(params.dout) +
          batch_offset<kVarlen>(st.batch, params.do_batch_stride) +
          st.head * params.do_head_stride + row * params.do_row_stride,
      params.do_row_stride, rows);
}

/// LSE and D of the query rows a thread holds in the GridSdP accumulator layout (rows
/// 16 (r / 2) + 8 (r % 2) + lane / 4 of the warp tile). With kPrefetchRowStats they are loaded
/// one query tile ahead (as FA2 prefetches its LSE), so that their global-load latency hides
/// behind a whole tile of MMAs. Rows past seqlen_q get LSE = +inf (P = 0) and D = 0.
template <class Config> struct RowStats {
  static constexpr int kRows = 2 * (Config::GridSdP::kTileRows / 16);
  float lse[kRows], d[kRows];
  __device__ __forceinline__ void load(const fagen_bwd_params &params, int batch, int head,
                                       int m_block, int64_t q_row0, int seqlen_q) {
    using G = typename Config::GridSdP;
    constexpr bool kVarlen = Config::Variant::kVarlen;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row0 = m_block * Config::kBlockM + (warp / G::kWarpsCols) * G::kTileRows + lane / 4;
    const float *lse_p = params.fwd.lse +
                         batch_offset<kVarlen>(batch, params.fwd.lse_batch_stride) +
                         head * params.fwd.lse_head_stride + q_row0;
    const float *d_p = params.d + batch_offset<kVarlen>(batch, params.d_batch_stride) +
                       head * params.d_head_stride + q_row0;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int row = row0 + 16 * (r / 2) + 8 * (r % 2);
      lse[r] = __int_as_float(0x7f800000);
      d[r] = 0.f;
      if (row < seqlen_q)
        lse[r] = lse_p[row], d[r] = d_p[row];
    }
  }
};

/// S = Q K^T and dP = dO V^T on GridSdP, then P (with dropout: P o keep / (1 - p)) and
/// dS = P o (dP o keep / (1 - p) - D) (times dlogit for non-identity score mods) into shared
/// memory in the input dtype.
template <class Config>
__device__ __forceinline__ void compute_p_ds(const fagen_bwd_params &params, const BwdStep &st,
                                             const BwdSmem<Config> &sm, int stage,
                                             const RowStats<Config> &stats) {
  using Element = typename Config::Element;
  using Mask = typename Config::Mask;
  using ScoreMod = typename Config::ScoreMod;
  using Dropout = typename Config::Dropout;
  using G = typename Config::GridSdP;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN;
  constexpr int kRowTiles = G::kTileRows / 16, kColTiles = G::kTileCols / 8;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / G::kWarpsCols, wn = warp % G::kWarpsCols;
  const int row0 = st.m_block * kBlockM + wm * G::kTileRows; // within the sequence
  const int col0 = st.n_block * kBlockN + wn * G::kTileCols;
  const float kInf = __int_as_float(0x7f800000);

  // LSE in log2 units (+inf for rows past seqlen_q or without a visible key: P = 0 there) and D.
  float lse2[2 * kRowTiles], d_row[2 * kRowTiles];
#pragma unroll
  for (int r = 0; r < 2 * kRowTiles; ++r) {
    const float l = stats.lse[r];
    lse2[r] = l == -kInf ? kInf : l * kLog2e;
    d_row[r] = stats.d[r];
  }

  float s[kRowTiles][kColTiles][4] = {}; // (tile rows, tile cols): S, then P
  gemm_smem<Element, kRowTiles, kColTiles, Config::kHeadDimQKPad / 16, false, false,
            Config::kRowQK, Config::kRowQK, Config::kSwizzleQK, Config::kSwizzleQK>(
      s, sm.q_stage(stage) + wm * G::kTileRows * Config::kRowQK,
      sm.k + wn * G::kTileCols * Config::kRowQK);

  const ScoreMod mod(params.fwd, st.batch, st.head, st.shape);
  const bool masked = (st.n_block + 1) * kBlockN > st.shape.seqlen_k ||
                      Mask::template needs_mask<kBlockM, kBlockN>(st.m_block, st.n_block, st.shape);
  float dlogit[kRowTiles][kColTiles][4]; // unused (and removed) for the identity score mod
  float dp[kRowTiles][kColTiles][4] = {}; // (tile rows, tile cols): dP, then dS
  if constexpr (ScoreMod::kIdentity) {
    // The mask goes on S in its own short branch, so that the exponentials share one basic
    // block with the dP MMAs and the scheduler can interleave the two (MUFU beside HMMA).
    // S = -inf gives x = -inf whatever the LSE (+inf included), hence P = 0, as before.
    if (masked)
      apply_mask<Mask>(s, row0, col0, st.shape);
    gemm_smem<Element, kRowTiles, kColTiles, Config::kHeadDimVPad / 16, false, false,
              Config::kRowV, Config::kRowV, Config::kSwizzleV, Config::kSwizzleV>(
        dp, sm.dout_stage(stage) + wm * G::kTileRows * Config::kRowV,
        sm.v + wn * G::kTileCols * Config::kRowV);
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
      for (int j = 0; j < kColTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[t][j][e] = exp2_approx(fmaf(s[t][j][e], params.fwd.scale_log2, -lse2[2 * t + e / 2]));
  } else {
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
      for (int j = 0; j < kColTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = 2 * t + e / 2;
          const int row = row0 + 16 * t + lane / 4 + 8 * (e / 2);
          const int col = col0 + 8 * j + 2 * (lane % 4) + e % 2;
          dlogit[t][j][e] = mod.dlogit(s[t][j][e], row, col);
          float x = fmaf(mod.logit(s[t][j][e], row, col), kLog2e, -lse2[r]);
          if (masked && (col >= st.shape.seqlen_k || !Mask::is_visible(row, col, st.shape)))
            x = -kInf;
          s[t][j][e] = exp2_approx(x);
        }
    gemm_smem<Element, kRowTiles, kColTiles, Config::kHeadDimVPad / 16, false, false,
              Config::kRowV, Config::kRowV, Config::kSwizzleV, Config::kSwizzleV>(
        dp, sm.dout_stage(stage) + wm * G::kTileRows * Config::kRowV,
        sm.v + wn * G::kTileCols * Config::kRowV);
  }

  const Dropout drop(params.fwd, st.batch, st.head);
  ByteThreshold threshold(0);
  if constexpr (Dropout::kEnabled)
    threshold = ByteThreshold(drop.threshold);
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t) {
    // One Philox draw per four 8-column tiles (philox.h's patch): bit 7 of each byte of its
    // words x, y, z, w is that element's keep flag (byte >= threshold). Element e of tile
    // j % 4 = u is byte 2 (u % 2) + e % 2 of word 2 (e / 2) + u / 2 (PhiloxDropout::keep16's
    // order; prmt turns the flag into a 32-bit mask).
    u32 flags[4] = {};
#pragma unroll
    for (int j = 0; j < kColTiles; ++j) {
      unsigned keep = 0xfu;
      if constexpr (Dropout::kEnabled) {
        const int row = row0 + 16 * t + lane / 4, col = col0 + 8 * j + 2 * (lane % 4);
        if constexpr (kColTiles % 4 == 0) { // col0 is then a multiple of 32
          if (j % 4 == 0)
            patch_keep_flags(flags, drop, threshold, row, col);
        } else {
          keep = drop.keep4(row, col);
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = s[t][j][e];
        const float dpv = dp[t][j][e];
        float ds;
        if constexpr (Dropout::kEnabled) {
          u32 mask; // all ones where kept
          if constexpr (kColTiles % 4 == 0)
            mask = byte_sign_mask(flags[2 * (e / 2) + (j % 4) / 2], 2 * (j % 4 % 2) + e % 2);
          else
            mask = (keep >> e) & 1u ? 0xffffffffu : 0u;
          // 1 / (1 - p) where kept, +0 where dropped: P o Z / (1 - p) for dV, and dS = P (dP o
          // Z / (1 - p) - D) in one FMA (a NaN in dO makes D, hence the row's dS, NaN anyway).
          const float keep_scale = keep_masked(drop.rescale, mask);
          s[t][j][e] = p * keep_scale;
          ds = p * fmaf(dpv, keep_scale, -d_row[2 * t + e / 2]);
        } else {
          ds = p * (dpv - d_row[2 * t + e / 2]);
        }
        if constexpr (!ScoreMod::kIdentity)
          ds *= dlogit[t][j][e];
        dp[t][j][e] = ds;
      }
    }
  }
  // The P / dS rows are padded: the warp tile's origin as one byte offset.
  const int origin = wm * G::kTileRows * Config::kRowP + wn * G::kTileCols * 2;
  store_fragments<Element, Config::kRowP>(sm.p + origin, s, 0);
  store_fragments<Element, Config::kRowP>(sm.ds + origin, dp, 0);
}

/// dV += P^T dO and dK += dS^T Q on GridKV.
template <class Config, class AccK, class AccV>
__device__ __forceinline__ void accumulate_dk_dv(AccK &acc_dk, AccV &acc_dv,
                                                 const BwdSmem<Config> &sm, int stage) {
  using Element = typename Config::Element;
  using G = typename Config::GridKV;
  constexpr int kRowTiles = G::kTileRows / 16, kKTiles = Config::kBlockM / 16;
  const int warp = threadIdx.x / 32;
  const int wn = warp / G::kWarpsCols, wd = warp % G::kWarpsCols;
  gemm_smem<Element, kRowTiles, Config::kTileDV / 8, kKTiles, true, true, Config::kRowP,
            Config::kRowV, false, Config::kSwizzleV>(acc_dv, sm.p + wn * G::kTileRows * 2,
                                                     sm.dout_stage(stage), 0,
                                                     wd * (Config::kTileDV / 8));
  gemm_smem<Element, kRowTiles, Config::kTileDK / 8, kKTiles, true, true, Config::kRowP,
            Config::kRowQK, false, Config::kSwizzleQK>(acc_dk, sm.ds + wn * G::kTileRows * 2,
                                                       sm.q_stage(stage), 0,
                                                       wd * (Config::kTileDK / 8));
}

/// Floats between two dq_accum slots (bwd_params.h): the whole of one copy.
template <class Config>
__device__ __forceinline__ int64_t dq_slot_stride(const fagen_bwd_params &params) {
  return Config::Variant::kVarlen ? int64_t(params.fwd.heads_q) * params.dq_accum_head_stride
                                  : int64_t(params.fwd.batch) * params.dq_accum_batch_stride;
}

/// int32s between two dq_semaphore slots (bwd_params.h).
__device__ __forceinline__ int64_t semaphore_slot_stride(const fagen_bwd_params &params) {
  return int64_t(params.fwd.batch) * params.semaphore_batch_stride;
}

/// How many key tiles add to dQ of (head, m_block) before st.n_block in the deterministic
/// order (BwdConfig::kDqAscending), among those of st.n_block's dq_accum slot (n_block %
/// kDqSlots). The key tiles that visit a query tile are contiguous (masks are monotone),
/// minus the sparsity layout's holes.
template <class Config>
__device__ __forceinline__ int dq_rank(const fagen_bwd_params &params, const BwdStep &st) {
  using Mask = typename Config::Mask;
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN, kSlots = Config::kDqSlots;
  static_assert(kSlots == 1 || !Config::Sparsity::kSparse,
                "dq_accum slots only without block sparsity");
  if constexpr (Config::kDqAscending) {
    // Causal: every key tile before st.n_block sees every query tile it sees (key tile n's
    // query tiles are [m_block_begin(n), end), and m_block_begin grows with n).
    static_assert(Mask::kCausal, "ascending ranks assume causal masks");
    static_assert(kSlots == 1, "dq_accum slots only without a mask");
    if constexpr (!Config::Sparsity::kSparse)
      return st.n_block;
    const typename Config::Sparsity sp(params.fwd, st.batch, st.head);
    int rank = 0;
    for (int n = 0; n < st.n_block; ++n)
      rank += sp.template visible<kBlockM, kBlockN>(st.m_block, n);
    return rank;
  }
  const int n_all = ceil_div(st.shape.seqlen_k, kBlockN);
  // The last key tile whose query range holds m_block (n_block_end is exact up to the last,
  // partial, key tile: settle with m_block_begin).
  int last = max(min(Mask::template n_block_end<kBlockM, kBlockN>(st.m_block, st.shape), n_all) - 1,
                 st.n_block);
  while (last > st.n_block &&
         Mask::template m_block_begin<kBlockM, kBlockN>(last, st.shape) > st.m_block)
    --last;
  while (last + 1 < n_all &&
         Mask::template m_block_begin<kBlockM, kBlockN>(last + 1, st.shape) <= st.m_block)
    ++last;
  if constexpr (!Config::Sparsity::kSparse)
    return (last - st.n_block) / kSlots;
  const typename Config::Sparsity sp(params.fwd, st.batch, st.head);
  int rank = 0;
  for (int n = st.n_block + 1; n <= last; ++n)
    rank += sp.template visible<kBlockM, kBlockN>(st.m_block, n);
  return rank;
}

/// Where the dQ element (row, col) of a full query tile lies in its kBlockM x head_dim_qk fp32
/// block of dq_accum under kDqAccumFragmentOrder: warp tiles of GridQ one after the other; in a
/// warp tile, one run per reduction instruction. red.v2 (kDqRedV4 false): a 64-float run per
/// (column chunk c, row tile t, half h, column tile j), lane l's two floats at 2 l, so an
/// aligned group of 8 columns of one row is 8 contiguous floats (lanes 4 g .. 4 g + 3).
/// red.v4: a 128-float run per (c, t, h, pair of column tiles jr = j / 2), lane l's four floats
/// at 4 l (its two of tile 2 jr, then its two of tile 2 jr + 1), so the 16 columns 16 jr .. of
/// one row are 16 contiguous floats, permuted.
template <class Config> struct DqAccumOrder {
  using G = typename Config::GridQ;
  static constexpr bool kV4 = Config::kDqRedV4;
  static constexpr int kChunk = Config::kDqChunkCols, kRowTiles = G::kTileRows / 16;
  static constexpr int kWarpFloats = G::kTileRows * G::kTileCols; // one warp tile's block
  static constexpr int kLaneFloats = kV4 ? 4 : 2, kRunFloats = 32 * kLaneFloats;
  static constexpr int kRunsPerChunk = kChunk / 8 / (kV4 ? 2 : 1);
  /// Offset of the reduction (c, t, h, run r of the chunk: j, or jr), lane 0, in its warp's
  /// block.
  static constexpr __host__ __device__ int run(int c, int t, int h, int r) {
    return (((c * kRowTiles + t) * 2 + h) * kRunsPerChunk + r) * kRunFloats;
  }
  /// Offset of (row, col) in the tile.
  static __device__ __forceinline__ int offset(int row, int col) {
    const int warp = (row / G::kTileRows) * G::kWarpsCols + col / G::kTileCols;
    const int r = row % G::kTileRows, cc = col % G::kTileCols, j = cc % kChunk / 8;
    const int lane = 4 * (r % 8) + (cc % 8) / 2;
    const int in_run = kV4 ? 4 * lane + 2 * (j % 2) : 2 * lane;
    return warp * kWarpFloats + run(cc / kChunk, r / 16, r % 16 / 8, kV4 ? j / 2 : j) + in_run +
           col % 2;
  }
};

/// dQ (kBlockM, head_dim_qk) = dS K on GridQ, added to dq_accum kDqChunkCols columns of the
/// warp tile at a time (bounds the registers of wide tiles).
template <class Config>
__device__ __forceinline__ void accumulate_dq(const fagen_bwd_params &params, const BwdStep &st,
                                              const BwdSmem<Config> &sm) {
  using Element = typename Config::Element;
  using G = typename Config::GridQ;
  constexpr int kRowTiles = G::kTileRows / 16, kChunk = Config::kDqChunkCols;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = warp / G::kWarpsCols, wd = warp % G::kWarpsCols;
  const int slot = st.n_block % Config::kDqSlots;
  int32_t *sem = params.dq_semaphore + slot * semaphore_slot_stride(params) +
                 st.batch * params.semaphore_batch_stride +
                 st.head * params.semaphore_head_stride + st.m_block;
  const int row0 = st.m_block * Config::kBlockM + wm * G::kTileRows + lane / 4;
  float *accum = params.dq_accum + slot * dq_slot_stride<Config>(params) +
                 batch_offset<Config::Variant::kVarlen>(st.batch, params.dq_accum_batch_stride) +
                 st.head * params.dq_accum_head_stride + (st.q_row0 + row0) * Config::kHeadDimQK;
  // kDqStoreFirst: the slot's first key tile stores (dq_accum is not zeroed). Its rank is
  // taken here; other deterministic kernels take it at the wait, as before the slots (where
  // their registers were measured).
  int rank = 0;
  if constexpr (Config::kDqStoreFirst)
    rank = dq_rank<Config>(params, st);
  const bool store = Config::kDqStoreFirst && rank == 0;
#pragma unroll
  for (int c = 0; c < G::kTileCols / kChunk; ++c) {
    const int col0 = wd * G::kTileCols + c * kChunk; // the chunk's first column
    float dq[kRowTiles][kChunk / 8][4] = {};
    gemm_smem<Element, kRowTiles, kChunk / 8, Config::kBlockN / 16, false, true, Config::kRowP,
              Config::kRowQK, false, Config::kSwizzleQK>(
        dq, sm.ds + wm * G::kTileRows * Config::kRowP, sm.k, 0, col0 / 8);
    if (Config::kDeterministic && c == 0)
      semaphore_wait(sem, Config::kDqStoreFirst ? rank : dq_rank<Config>(params, st));
    // DqAccumOrder (one 256- or 512-byte run per instruction), or row-major
    // (Config::dq_fragment_order).
    if (Config::dq_fragment_order((st.m_block + 1) * Config::kBlockM <= st.shape.seqlen_q)) {
      using Order = DqAccumOrder<Config>;
      float *mine = accum - (wm * G::kTileRows + lane / 4) * Config::kHeadDimQK +
                    warp * Order::kWarpFloats + Order::kLaneFloats * lane;
#pragma unroll
      for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int r = 0; r < Order::kRunsPerChunk; ++r) {
            if constexpr (Order::kV4)
              add_or_store_f32x4(store, mine + Order::run(c, t, h, r), dq[t][2 * r][2 * h],
                                 dq[t][2 * r][2 * h + 1], dq[t][2 * r + 1][2 * h],
                                 dq[t][2 * r + 1][2 * h + 1]);
            else
              add_or_store_f32x2(store, mine + Order::run(c, t, h, r), dq[t][r][2 * h],
                                 dq[t][r][2 * h + 1]);
          }
    } else {
#pragma unroll
      for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (row0 + 16 * t + 8 * h >= st.shape.seqlen_q)
            continue;
#pragma unroll
          for (int j = 0; j < kChunk / 8; ++j)
            if (Config::kHeadDimQK == Config::kHeadDimQKPad || col0 + 8 * j < Config::kHeadDimQK)
              add_or_store_f32x2(store,
                                 accum + (16 * t + 8 * h) * Config::kHeadDimQK + col0 + 8 * j +
                                     2 * (lane % 4),
                                 dq[t][j][2 * h], dq[t][j][2 * h + 1]);
        }
    }
  }
  if constexpr (Config::kDeterministic)
    semaphore_signal(sem);
}

/// Writes dK (times `dk_scale`) and dV of the key tile through the K and V tiles of shared
/// memory (free once every warp is past its last dQ step).
template <class Config, class AccK, class AccV>
__device__ __forceinline__ void store_dk_dv(const fagen_bwd_params &params, int batch, int kv_head,
                                            int n_block, int64_t k_row0, int rows_valid,
                                            const BwdSmem<Config> &sm, const AccK &acc_dk,
                                            const AccV &acc_dv) {
  using Element = typename Config::Element;
  using G = typename Config::GridKV;
  constexpr bool kVarlen = Config::Variant::kVarlen;
  const int warp = threadIdx.x / 32;
  const int wn = warp / G::kWarpsCols, wd = warp % G::kWarpsCols;
  const float dk_scale = Config::ScoreMod::kIdentity ? params.fwd.softmax_scale : 1.f;
  cp_async_wait<0>();
  __syncthreads();
  constexpr bool kSwQK = Config::kSwizzleQK, kSwV = Config::kSwizzleV;
  store_fragments<Element, Config::kRowQK, kSwQK>(sm.k + wn * G::kTileRows * Config::kRowQK,
                                                  acc_dk, wd * (Config::kTileDK / 8), dk_scale);
  store_fragments<Element, Config::kRowV, kSwV>(sm.v + wn * G::kTileRows * Config::kRowV, acc_dv,
                                                wd * (Config::kTileDV / 8));
  __syncthreads();
  const int64_t row = k_row0 + int64_t(n_block) * Config::kBlockN;
  store_rows<Config::kBlockN, Config::kHeadDimQK, Config::kRowQK, Config::kThreads, kSwQK>(
      static_cast<Element *>(params.dk) + batch_offset<kVarlen>(batch, params.dk_batch_stride) +
          kv_head * params.dk_head_stride + row * params.dk_row_stride,
      params.dk_row_stride, rows_valid, sm.k);
  store_rows<Config::kBlockN, Config::kHeadDimV, Config::kRowV, Config::kThreads, kSwV>(
      static_cast<Element *>(params.dv) + batch_offset<kVarlen>(batch, params.dv_batch_stride) +
          kv_head * params.dv_head_stride + row * params.dv_row_stride,
      params.dv_row_stride, rows_valid, sm.v);
}

/// The key tile (n_block, kv_head, batch) of this CTA. The hardware dispatches CTAs in linear
/// order (x fastest). Deterministic kernels dispatch key tiles in the order in which they add
/// to dQ (dq_rank), so a CTA only waits for CTAs dispatched before it and the waits cannot
/// deadlock: last key tiles first, or with BwdConfig::kDqAscending (causal) as below, which
/// puts each (kv head, batch) pair's key tiles in ascending order.
/// Causal: longest first (key tile n sees about seqlen_q - n * kBlockN query rows), within
/// groups of (kv head, batch) pairs whose Q, dO and fp32 dq_accum rows fit in kTileGroupL2Bytes
/// (32 MB; the sm90ws forward's causal groups hold 16 MB of K/V, kWsCausalGroupBytes): the
/// tail of the grid is then the short tiles of the last group rather than a mix of every
/// length. A list-scheduling model of the FA3 protocol's grids on 132 SMs puts the busy share at
/// 0.93-0.97 in block order and 0.99-1.00 in this order at 2k-8k (16k: 0.99+ either way);
/// measured +3-8 % at 2k-8k (H200, docs/perf/sm80-bwd.md).
/// Otherwise block order.
template <class Config> struct BwdTile {
  int n_block, kv_head, batch;
  __device__ __forceinline__ explicit BwdTile(const fagen_fwd_params &f) {
    if constexpr (Config::kDeterministic && !Config::kDqAscending) {
      n_block = int(gridDim.x - 1 - blockIdx.x), kv_head = blockIdx.y, batch = blockIdx.z;
    } else if constexpr (Config::Mask::kCausal) {
      const int n_tiles = gridDim.x, pairs = gridDim.y * gridDim.z;
      const int linear = blockIdx.x + n_tiles * (blockIdx.y + gridDim.y * blockIdx.z);
      const int64_t pair_bytes =
          int64_t(f.seqlen_q) * f.group_size *
          ((Config::kHeadDimQK + Config::kHeadDimV) * int(sizeof(typename Config::Element)) +
           Config::kHeadDimQK * 4);
      const int group = int(max(int64_t(1), min(int64_t(pairs), kTileGroupL2Bytes / pair_bytes)));
      int pair;
      grouped_tile_order(linear, n_tiles, pairs, group, &n_block, &pair);
      kv_head = pair % gridDim.y, batch = pair / gridDim.y;
    } else {
      n_block = blockIdx.x, kv_head = blockIdx.y, batch = blockIdx.z;
    }
  }
};

/// Launch: grid (ceil(seqlen_k / kBlockN), heads_kv, batch), block kThreads, kSmemBytes of
/// dynamic shared memory; after bwd_preprocess on the same stream. Pointers 16-byte aligned,
/// strides multiples of 8 elements.
template <class Config> __device__ __forceinline__ void bwd_kernel(const fagen_bwd_params &params) {
  using Element = typename Config::Element;
  using GKV = typename Config::GridKV;
  constexpr bool kVarlen = Config::Variant::kVarlen;
  constexpr int kBlockN = Config::kBlockN;
  extern __shared__ __align__(128) unsigned char smem[];
  const BwdSmem<Config> sm(smem_addr(smem));

  const BwdTile<Config> tile(params.fwd);
  const int n_block = tile.n_block, kv_head = tile.kv_head, batch = tile.batch;
  const SequenceSpan span = sequence_span<kVarlen>(params.fwd, batch);
  const int rows_k = span.shape.seqlen_k - n_block * kBlockN;
  if (rows_k <= 0) // varlen: past this sequence's keys
    return;

  // (tile rows, tile cols) of the key tile's dK (kBlockN, QK) and dV (kBlockN, V).
  float acc_dk[GKV::kTileRows / 16][Config::kTileDK / 8][4] = {};
  float acc_dv[GKV::kTileRows / 16][Config::kTileDV / 8][4] = {};
  QueryTileCursor<Config> cursor(params.fwd, batch, kv_head, n_block, span.shape);
  if (cursor.valid()) {
    const fagen_fwd_params &f = params.fwd;
    const int64_t row = span.k_row0 + int64_t(n_block) * kBlockN;
    load_rows_async<kBlockN, Config::kHeadDimQK, Config::kHeadDimQKPad, Config::kRowQK,
                    Config::kThreads, Config::kSwizzleQK>(
        sm.k,
        static_cast<const Element *>(f.k) + batch_offset<kVarlen>(batch, f.k_batch_stride) +
            kv_head * f.k_head_stride + row * f.k_row_stride,
        f.k_row_stride, rows_k);
    load_rows_async<kBlockN, Config::kHeadDimV, Config::kHeadDimVPad, Config::kRowV,
                    Config::kThreads, Config::kSwizzleV>(
        sm.v,
        static_cast<const Element *>(f.v) + batch_offset<kVarlen>(batch, f.v_batch_stride) +
            kv_head * f.v_head_stride + row * f.v_row_stride,
        f.v_row_stride, rows_k);
    load_query_tile<Config>(params, {batch, cursor.head, cursor.m_block, n_block, span.q_row0, span.shape},
                            sm, 0);
    cp_async_commit();
  }
  RowStats<Config> stats;
  if (Config::kPrefetchRowStats && cursor.valid())
    stats.load(params, batch, cursor.head, cursor.m_block, span.q_row0, span.shape.seqlen_q);

  int stage = 0;
  while (cursor.valid()) {
    const BwdStep st{batch, cursor.head, cursor.m_block, n_block, span.q_row0, span.shape};
    cursor.advance();
    const BwdStep next{batch, cursor.head, cursor.m_block, n_block, span.q_row0, span.shape};

    // Q and dO of this tile have landed; every warp is done with the last tile's buffers.
    cp_async_wait<0>();
    __syncthreads();
    if (Config::kStages == 2 && cursor.valid()) {
      load_query_tile<Config>(params, next, sm, stage ^ 1);
      cp_async_commit();
    }
    if (!Config::kPrefetchRowStats)
      stats.load(params, batch, st.head, st.m_block, span.q_row0, span.shape.seqlen_q);
    compute_p_ds<Config>(params, st, sm, stage, stats);
    if (Config::kPrefetchRowStats && cursor.valid()) // the next tile's LSE and D, a tile ahead
      stats.load(params, batch, next.head, next.m_block, span.q_row0, span.shape.seqlen_q);
    __syncthreads();
    accumulate_dk_dv<Config>(acc_dk, acc_dv, sm, stage);
    if (Config::kStages == 1) {
      __syncthreads(); // every warp is done with Q and dO: load the next tile during dQ
      if (cursor.valid()) {
        load_query_tile<Config>(params, next, sm, 0);
        cp_async_commit();
      }
    }
    accumulate_dq<Config>(params, st, sm);
    if (Config::kStages == 2)
      stage ^= 1;
  }
  store_dk_dv<Config>(params, batch, kv_head, n_block, span.k_row0, rows_k, sm, acc_dk, acc_dv);
}

/// D = rowsum(dO o O) of one query tile in fp32, its dq_accum rows zeroed (not with
/// BwdConfig::kDqStoreFirst) and (deterministic) its dQ semaphores reset, every slot's.
/// Launch: grid (ceil(seqlen_q / kBlockM), heads_q, batch), block kPrePostThreads.
template <class Config>
__device__ __forceinline__ void bwd_preprocess(const fagen_bwd_params &params) {
  using Element = typename Config::Element;
  constexpr bool kVarlen = Config::Variant::kVarlen;
  constexpr int kBlockM = Config::kBlockM, kThreads = Config::kPrePostThreads;
  constexpr int kLanesPerRow = 8, kRowsPerRound = kThreads / kLanesPerRow;
  static_assert(kThreads % 32 == 0, "whole warps");
  static_assert(kThreads >= Config::kDqSlots, "a thread per semaphore slot");
  const int m_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const SequenceSpan span = sequence_span<kVarlen>(params.fwd, batch);
  const int rows = min(kBlockM, span.shape.seqlen_q - m_block * kBlockM);
  if (rows <= 0)
    return;
  if (Config::kDeterministic && threadIdx.x < Config::kDqSlots)
    params.dq_semaphore[threadIdx.x * semaphore_slot_stride(params) +
                        batch * params.semaphore_batch_stride +
                        head * params.semaphore_head_stride + m_block] = 0;

  const int64_t row0 = span.q_row0 + int64_t(m_block) * kBlockM;
  const fagen_fwd_params &f = params.fwd;
  const Element *o = static_cast<const Element *>(f.o) +
                     batch_offset<kVarlen>(batch, f.o_batch_stride) + head * f.o_head_stride +
                     row0 * f.o_row_stride;
  const Element *dout = static_cast<const Element *>(params.dout) +
                        batch_offset<kVarlen>(batch, params.do_batch_stride) +
                        head * params.do_head_stride + row0 * params.do_row_stride;
  float *d = params.d + batch_offset<kVarlen>(batch, params.d_batch_stride) +
             head * params.d_head_stride + row0;
  const int lane8 = threadIdx.x % kLanesPerRow;
  for (int r0 = 0; r0 < kBlockM; r0 += kRowsPerRound) {
    const int r = r0 + threadIdx.x / kLanesPerRow;
    float sum = 0.f;
    if (r < rows)
      for (int c = lane8; c < Config::kHeadDimV / 8; c += kLanesPerRow) {
        const uint4 a = *reinterpret_cast<const uint4 *>(o + r * f.o_row_stride + c * 8);
        const uint4 b = *reinterpret_cast<const uint4 *>(dout + r * params.do_row_stride + c * 8);
        const u32 av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 x = unpack2<Element>(av[i]), y = unpack2<Element>(bv[i]);
          sum = fmaf(x.x, y.x, fmaf(x.y, y.y, sum));
        }
      }
#pragma unroll
    for (int m = 1; m < kLanesPerRow; m *= 2)
      sum += __shfl_xor_sync(0xffffffffu, sum, m);
    if (lane8 == 0 && r < rows)
      d[r] = sum;
  }

  static_assert(Config::kDqSlots == 1 || Config::kDqStoreFirst,
                "more than one dq_accum copy only where the first key tile stores (no zeroing)");
  if constexpr (Config::kDqStoreFirst)
    return; // every slot's first key tile stores
  // A fragment-order block spreads its rows over the whole tile: zero all of it. Varlen
  // kernels that add whole tiles (Config::kDqWholeTiles) keep each sequence's tiles apart
  // (bwd_params.h, fagen_bwd_dq_tile_row0).
  const int zero_rows = Config::dq_fragment_order(rows == kBlockM) ? kBlockM : rows;
  const int64_t dq_row0 =
      (kVarlen && Config::kDqWholeTiles ? fagen_bwd_dq_tile_row0(span.q_row0, batch, kBlockM)
                                        : span.q_row0) +
      int64_t(m_block) * kBlockM;
  float4 *accum = reinterpret_cast<float4 *>(
      params.dq_accum + batch_offset<kVarlen>(batch, params.dq_accum_batch_stride) +
      head * params.dq_accum_head_stride + dq_row0 * Config::kDqAccumCols);
  for (int i = threadIdx.x; i < zero_rows * Config::kDqAccumCols / 4; i += kThreads)
    accum[i] = make_float4(0.f, 0.f, 0.f, 0.f);
}

/// dQ = dq_accum (times the softmax scale for the identity score mod) in the input dtype; with
/// dq_accum slots (BwdConfig::kDqSlots), their sum in slot order.
/// Launch: like bwd_preprocess, after bwd_kernel.
template <class Config>
__device__ __forceinline__ void bwd_postprocess(const fagen_bwd_params &params) {
  using Element = typename Config::Element;
  constexpr bool kVarlen = Config::Variant::kVarlen;
  constexpr int kBlockM = Config::kBlockM, kChunksPerRow = Config::kHeadDimQK / 8;
  const int m_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const SequenceSpan span = sequence_span<kVarlen>(params.fwd, batch);
  const int rows = min(kBlockM, span.shape.seqlen_q - m_block * kBlockM);
  if (rows <= 0)
    return;
  const float scale = Config::ScoreMod::kIdentity ? params.fwd.softmax_scale : 1.f;
  const int64_t row0 = span.q_row0 + int64_t(m_block) * kBlockM;
  const float4 *accum = reinterpret_cast<const float4 *>(
      params.dq_accum + batch_offset<kVarlen>(batch, params.dq_accum_batch_stride) +
      head * params.dq_accum_head_stride + row0 * Config::kHeadDimQK);
  Element *dq = static_cast<Element *>(params.dq) +
                batch_offset<kVarlen>(batch, params.dq_batch_stride) +
                head * params.dq_head_stride + row0 * params.dq_row_stride;
  // Four floats of dQ: the sum of the slots that key tiles wrote, in slot order (slot s holds
  // key tiles n % kDqSlots == s; kDqStoreFirst: no key tile, nothing written, dQ = 0).
  const int64_t slot_stride = dq_slot_stride<Config>(params) / 4; // in float4s
  const int written = Config::kDqStoreFirst
                          ? min(Config::kDqSlots, ceil_div(span.shape.seqlen_k, Config::kBlockN))
                          : Config::kDqSlots;
  const auto load = [&](int at) {
    float4 v = written > 0 ? accum[at] : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int slot = 1; slot < Config::kDqSlots; ++slot)
      if (slot < written) {
        const float4 u = accum[slot * slot_stride + at];
        v.x += u.x, v.y += u.y, v.z += u.z, v.w += u.w;
      }
    return v;
  };
  if (DqAccumOrder<Config>::kV4 && Config::dq_fragment_order(rows == kBlockM)) {
    // 16 columns of a row at a time: 16 contiguous floats, lane q's (q = 0..3) four at 4 q,
    // the first two of columns 16 pair + 2 q + {0, 1}, the other two 8 columns further.
    static_assert(!DqAccumOrder<Config>::kV4 || kChunksPerRow % 2 == 0,
                  "red.v4 order needs head_dim_qk % 16 == 0");
    for (int c = threadIdx.x; c < rows * kChunksPerRow / 2; c += Config::kPrePostThreads) {
      const int r = c / (kChunksPerRow / 2), pair = c % (kChunksPerRow / 2);
      const int at = DqAccumOrder<Config>::offset(r, 16 * pair) / 4;
      float4 f[4];
#pragma unroll
      for (int q = 0; q < 4; ++q)
        f[q] = load(at + q);
      u32 lo[4], hi[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        lo[q] = pack2<Element>(f[q].x * scale, f[q].y * scale);
        hi[q] = pack2<Element>(f[q].z * scale, f[q].w * scale);
      }
      st_global_v4(dq + r * params.dq_row_stride + pair * 16, lo);
      st_global_v4(dq + r * params.dq_row_stride + pair * 16 + 8, hi);
    }
  } else {
    const bool fragment_order = Config::dq_fragment_order(rows == kBlockM);
    for (int c = threadIdx.x; c < rows * kChunksPerRow; c += Config::kPrePostThreads) {
      const int r = c / kChunksPerRow, chunk = c % kChunksPerRow;
      const int at = fragment_order ? DqAccumOrder<Config>::offset(r, 8 * chunk) / 4 : 2 * c;
      const float4 a = load(at), b = load(at + 1);
      const u32 v[4] = {pack2<Element>(a.x * scale, a.y * scale), pack2<Element>(a.z * scale, a.w * scale),
                        pack2<Element>(b.x * scale, b.y * scale), pack2<Element>(b.z * scale, b.w * scale)};
      st_global_v4(dq + r * params.dq_row_stride + chunk * 8, v);
    }
  }
}

} // namespace sm80
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM80_BWD_KERNEL_CUH
