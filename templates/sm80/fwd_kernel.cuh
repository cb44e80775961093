// fagen sm80: attention forward in FlashAttention-2 order, mma.sync + ldmatrix + cp.async.
//
// Portable: valid and verified source for sm_80, sm_90 and sm_100 (the faster sm_90a/sm_100a
// templates live beside this one). One CTA = one kBlockM-row query tile of one (batch, head);
// it walks the visible key/value tiles once, keeping S, P and O in registers. The variant's
// hooks (common/variants.cuh) choose the tiles (mask, block sparsity), transform the scores
// (score mod) and drop probabilities (dropout); dense NoScoreMod kernels compile to the plain
// FlashAttention-2 loop.
#ifndef FAGEN_TEMPLATES_SM80_FWD_KERNEL_CUH
#define FAGEN_TEMPLATES_SM80_FWD_KERNEL_CUH

#include "abi/fwd_params.h"
#include "common/softmax.cuh"
#include "sm80/fwd_config.cuh"
#include "sm80/fwd_kv_cache.cuh"
#include "sm80/tile_ops.cuh"

namespace fagen {
namespace sm80 {

/// The forward over keys and values in KvCache (sm80/fwd_kv_cache.cuh), built from
/// cache_params (the forward's params, or a paged call's fagen_decode_params around them).
/// Launch: grid (ceil(seqlen_q / kBlockM), heads_q, batch), block kThreads, kSmemBytes of
/// dynamic shared memory. Pointers 16-byte aligned and strides multiples of 8 elements.
template <class Config, class KvCache, class CacheParams>
__device__ __forceinline__ void fwd_attention(const fagen_fwd_params &params,
                                              const CacheParams &cache_params) {
  using Element = typename Config::Element;
  using Mask = typename Config::Mask;
  using ScoreMod = typename Config::ScoreMod;
  using Dropout = typename Config::Dropout;
  using Sparsity = typename Config::Sparsity;
  constexpr bool kVarlen = Config::kVarlen;
  constexpr int kHeadDimQK = Config::kHeadDimQK, kHeadDimV = Config::kHeadDimV;
  constexpr int kDimQK = Config::kHeadDimQKPad, kDimV = Config::kHeadDimVPad; // as the MMAs see
  constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN;
  constexpr int kStages = Config::kStages, kThreads = Config::kThreads;
  constexpr int kRowTiles = Config::kRowTiles, kColTiles = kBlockN / 8;

  extern __shared__ __align__(128) unsigned char smem[];
  const u32 q_smem = smem_addr(smem);                            // (kBlockM, kDimQK)
  const u32 k_smem = q_smem + Config::kSmemQBytes;               // (kStages, kBlockN, kDimQK)
  const u32 v_smem = k_smem + kStages * Config::kSmemKTileBytes; // (kStages, kBlockN, kDimV)

  // Heavy query tiles first when later rows see more keys (causal): the tail of the grid then
  // holds the short tiles.
  auto m_block_of = [](uint3 block) {
    return Mask::kWorkGrowsWithRow ? int(gridDim.x - 1 - block.x) : int(block.x);
  };
  const int m_block = m_block_of(blockIdx);
  const int head = blockIdx.y, batch = blockIdx.z;
  const int kv_head = head / params.group_size;
  const SequenceSpan span = KvCache::sequence_span(cache_params, batch);
  const AttentionShape shape = span.shape;
  const int row_begin = m_block * kBlockM;
  if (kVarlen && row_begin >= shape.seqlen_q)
    return; // past the end of a shorter sequence of the batch
  const int rows_q = min(kBlockM, shape.seqlen_q - row_begin);
  // Keys and values: their tiles' loads (sm80/fwd_kv_cache.cuh). Made before any key tile is
  // known visible, so that a paged cache checks (and reports) its length in every sequence
  // that has queries.
  const KvCache kv(cache_params, batch, kv_head, shape.seqlen_k);

  // Offset of this (batch entry, row 0) in a tensor: dense, its batch stride; varlen, its first
  // row in the packed tensor (batch strides unused).
  auto sequence_offset = [](int b, int64_t batch_stride, int64_t row0, int64_t row_stride) {
    return kVarlen ? row0 * row_stride : b * batch_stride;
  };
  const Element *q = static_cast<const Element *>(params.q) +
                     sequence_offset(batch, params.q_batch_stride, span.q_row0,
                                     params.q_row_stride) +
                     head * params.q_head_stride + row_begin * params.q_row_stride;
  // Output addresses are formed where they are used, from a fresh read of blockIdx (and of
  // cu_seqlens): kept live through the main loop they would cost registers that the
  // accumulators need.
  auto o_rows = [&]() {
    const uint3 block = block_index_rematerialized();
    const int64_t row0 = kVarlen ? KvCache::sequence_span(cache_params, block.z).q_row0 : 0;
    return static_cast<Element *>(params.o) +
           sequence_offset(block.z, params.o_batch_stride, row0, params.o_row_stride) +
           block.y * params.o_head_stride + m_block_of(block) * kBlockM * params.o_row_stride;
  };
  auto lse_rows = [&]() {
    const uint3 block = block_index_rematerialized();
    const int64_t row0 = kVarlen ? KvCache::sequence_span(cache_params, block.z).q_row0 : 0;
    return params.lse + sequence_offset(block.z, params.lse_batch_stride, row0, 1) +
           block.y * params.lse_head_stride + m_block_of(block) * kBlockM;
  };

  // Key tiles: the mask's range, less the blocks the sparsity layout skips (no loads, no MMA).
  const int n_end = Mask::template n_block_end<kBlockM, kBlockN>(m_block, shape);
  auto next = [&](int n) { // the first visible key tile >= n (dense: n)
    if constexpr (!Sparsity::kSparse) {
      return n;
    } else {
      const uint3 block = block_index_rematerialized(); // keeps no block-mask pointer live
      return next_visible_tile<kBlockM, kBlockN>(Sparsity(params, block.z, block.y), m_block, n,
                                                 n_end);
    }
  };
  const int n_first = next(Mask::template n_block_begin<kBlockM, kBlockN>(m_block, shape));
  if (n_first >= n_end) {
    store_empty_rows<kBlockM, kHeadDimV, kThreads>(o_rows(), params.o_row_stride, lse_rows(),
                                                   rows_q);
    return;
  }

  auto load_k = [&](int n_block, int stage) {
    kv.load_k(k_smem + stage * Config::kSmemKTileBytes, n_block);
  };
  auto load_v = [&](int n_block, int stage) {
    kv.load_v(v_smem + stage * Config::kSmemVTileBytes, n_block);
  };

  // Commit groups, in order: Q, K0, V0, K1, V1, ..., K_{S-1}; then each iteration n commits
  // V_{n+S-1} and K_{n+S}, empty past the last tile, so that waiting for K_n or V_n always
  // leaves exactly 2 * (S - 1) younger groups in flight. Tile indices count visible tiles;
  // n_v: the key tile of the next V prefetch (dense: n_block + S - 1), K's is the one after.
  load_tile_padded_async<kBlockM, kHeadDimQK, kDimQK, kThreads>(q_smem, q, params.q_row_stride,
                                                                rows_q);
  cp_async_commit();
  int n_v = n_first;
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    if (n_v < n_end)
      load_k(n_v, s);
    cp_async_commit();
    if (s == kStages - 1)
      break;
    if (n_v < n_end)
      load_v(n_v, s);
    cp_async_commit();
    n_v = next(n_v + 1);
  }

  const int warp = threadIdx.x / 32;
  const int warp_row = warp * Config::kRowsPerWarp;
  const u32 q_warp = q_smem + warp_row * SmemRow<kDimQK>::kBytes;
  float acc_o[kRowTiles][kDimV / 8][4] = {};
  OnlineSoftmax<kRowTiles, Config::kRescaleTau, Config::kExp2EmuPercent, Config::kExp2PolyDegree>
      softmax;
  softmax.init();
  const ScoreMod score_mod(params, batch, head, shape);
  // Score mods give natural-log logits: the softmax's exp2 then needs log2(e), not the scale.
  const float kLog2e = 1.4426950408889634f;
  const float softmax_scale_log2 = ScoreMod::kIdentity ? params.scale_log2 : kLog2e;

  // Dropout's keep flags of a key tile: drawn during the P @ V of the tile before it (the first
  // tile's before the loop) when O is small (at most 64 registers a thread: hd <= 64), where
  // the Philox rounds fill issue slots between mma.sync with S dead (hd64 causal 128x128, 16k:
  // +36 % -> +27 % dropout cost); otherwise before the QK^T MMAs, while S is not live (drawn
  // during P @ V, hd128 128x64 spilled 32 B and gained nothing; H200, 2026-11-30).
  constexpr bool kDrawDuringPv = Dropout::kEnabled && kRowTiles * kDimV / 2 <= 64;
  const int row0 = row_begin + warp_row;
  u32 keep_bits[ceil_div(kRowTiles * kColTiles, 8)];
  auto draw_keep_bits = [&](int n_block) {
    if constexpr (Dropout::kEnabled) {
      Dropout dropout(params, batch, head);
      dropout.seed = value_rematerialized(dropout.seed); // round keys: recomputed per tile
      dropout_keep_bits<kRowTiles, kColTiles>(keep_bits, dropout, row0, n_block * kBlockN);
    }
  };
  if constexpr (kDrawDuringPv)
    draw_keep_bits(n_first);

  int stage = 0;
  for (int n_block = n_first, n_next; n_block < n_end; n_block = n_next) {
    const int prev_stage = stage == 0 ? kStages - 1 : stage - 1;
    const int v_prefetch = Sparsity::kSparse ? n_v : n_block + kStages - 1;

    // K_n has landed and every warp is done with V_{n-1}: refill that buffer with V_{n+S-1}.
    cp_async_wait<2 * kStages - 2>();
    __syncthreads();
    if (v_prefetch < n_end)
      load_v(v_prefetch, prev_stage);
    cp_async_commit();

    if constexpr (Dropout::kEnabled && !kDrawDuringPv)
      draw_keep_bits(n_block);
    const int col0 = n_block * kBlockN;
    float acc_s[kRowTiles][kColTiles][4];
    gemm_qk<Element, kDimQK>(acc_s, q_warp, k_smem + stage * Config::kSmemKTileBytes);
    // The variant's hooks as apply_logit_hooks applies them, spelled out: through the helper
    // nvcc 13.0 moved the SASS of the window top-left kernels.
    if constexpr (!ScoreMod::kIdentity)
      apply_score_mod(acc_s, score_mod, row0, col0);
    if ((n_block + 1) * kBlockN > shape.seqlen_k ||
        Mask::template needs_mask<kBlockM, kBlockN>(m_block, n_block, shape))
      apply_mask<Mask>(acc_s, row0, col0, shape);
    // V_n has landed and every warp is done with K_n: refill that buffer with K_{n+S}. One
    // stage and one 16-row tile per warp (hd256 64x64): before the softmax, FlashAttention-2's
    // order, so that K_{n+1} also loads during the softmax (+1-3 %, H200, 2026-11-30);
    // otherwise after it (the earlier barrier spilled 8-64 B at 32 rows a warp).
    constexpr bool kRefillBeforeSoftmax = kStages == 1 && kRowTiles == 1;
    auto refill_k = [&](int k_prefetch) {
      cp_async_wait<2 * kStages - 2>();
      __syncthreads();
      if (k_prefetch < n_end)
        load_k(k_prefetch, stage);
      cp_async_commit();
    };
    int k_prefetch; // the key tile of this K refill
    if constexpr (kRefillBeforeSoftmax) {
      k_prefetch = Sparsity::kSparse ? next(n_v + 1) : n_block + kStages;
      refill_k(k_prefetch);
    }
    softmax.update(acc_s, acc_o, softmax_scale_log2);
    u32 p[kRowTiles][kColTiles / 2][4];
    convert_p<Element>(p, acc_s);
    if constexpr (Dropout::kEnabled)
      apply_dropout_packed(p, keep_bits);
    if constexpr (!kRefillBeforeSoftmax) {
      k_prefetch = Sparsity::kSparse ? next(n_v + 1) : n_block + kStages;
      refill_k(k_prefetch);
    }

    n_next = next(n_block + 1);
    gemm_pv<Element, kDimV>(acc_o, p, v_smem + stage * Config::kSmemVTileBytes);
    if (kDrawDuringPv && n_next < n_end)
      draw_keep_bits(n_next);
    stage = stage == kStages - 1 ? 0 : stage + 1;
    n_v = k_prefetch;
  }
  cp_async_wait<0>();

  float row_lse[2 * kRowTiles];
  softmax.finalize(acc_o, softmax_scale_log2, row_lse,
                   Dropout::kEnabled ? params.dropout_rescale : 1.f);

  // Epilogue: this warp's rows of the Q tile are free once its own last gemm_qk is done. O rows
  // wider than Q rows (kHeadDimV > kHeadDimQK) overlap other warps' Q rows: wait for them.
  const int lane = threadIdx.x % 32;
  if (lane % 4 == 0) {
    float *lse = lse_rows();
#pragma unroll
    for (int r = 0; r < 2 * kRowTiles; ++r) {
      const int row = warp_row + 16 * (r / 2) + 8 * (r % 2) + lane / 4;
      if (row < rows_q)
        lse[row] = row_lse[r];
    }
  }
  if constexpr (SmemRow<kDimV>::kBytes > SmemRow<kDimQK>::kBytes)
    __syncthreads();
  store_o_cols<Element, kHeadDimV, kDimV>(o_rows() + warp_row * params.o_row_stride,
                                          params.o_row_stride, rows_q - warp_row,
                                          q_smem + warp_row * Config::kSmemQRowBytes, acc_o);
}

/// The forward over contiguous K and V (dense or varlen).
template <class Config> __device__ __forceinline__ void fwd_kernel(const fagen_fwd_params &params) {
  static_assert(!Config::kPaged, "a paged forward's entry point is fwd_paged_kernel");
  fwd_attention<Config, FwdContiguousKv<Config>>(params, params);
}

/// Chunked prefill: varlen queries (cu_seqlens_q) over a paged KV cache, sequence b's keys its
/// seqused_k[b] cached tokens (abi/decode_params.h; num_splits 1, no partials). Launch as
/// fwd_kernel, grid (ceil(seqlen_q / kBlockM), heads_q, batch).
template <class Config>
__device__ __forceinline__ void fwd_paged_kernel(const fagen_decode_params &params) {
  static_assert(Config::kPaged, "fwd_paged_kernel reads a paged KV cache: set kPageSize");
  fwd_attention<Config, FwdPagedKv<Config>>(params.fwd, params);
}

} // namespace sm80
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM80_FWD_KERNEL_CUH
