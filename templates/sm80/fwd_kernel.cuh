// fagen sm80: attention forward in FlashAttention-2 order, mma.sync + ldmatrix + cp.async.
//
// Portable: valid and verified source for sm_80, sm_90 and sm_100 (the faster sm_90a/sm_100a
// templates live beside this one). One CTA = one kBlockM-row query tile of one (batch, head);
// it walks the visible key/value tiles once, keeping S, P and O in registers.
#ifndef FAGEN_TEMPLATES_SM80_FWD_KERNEL_CUH
#define FAGEN_TEMPLATES_SM80_FWD_KERNEL_CUH

#include "common/fwd_params.h"
#include "common/softmax.cuh"
#include "sm80/fwd_config.cuh"
#include "sm80/tile_ops.cuh"

namespace fagen {
namespace sm80 {

/// Launch: grid (ceil(seqlen_q / kBlockM), heads_q, batch), block kThreads, kSmemBytes of
/// dynamic shared memory. Pointers 16-byte aligned and strides multiples of 8 elements.
template <class Config> __device__ __forceinline__ void fwd_kernel(const fagen_fwd_params &params) {
  using Element = typename Config::Element;
  using Mask = typename Config::Mask;
  constexpr int kHeadDim = Config::kHeadDim, kBlockM = Config::kBlockM;
  constexpr int kBlockN = Config::kBlockN, kStages = Config::kStages;
  constexpr int kThreads = Config::kThreads, kRowTiles = Config::kRowTiles;
  constexpr int kColTiles = kBlockN / 8, kDimTiles = kHeadDim / 8;

  extern __shared__ __align__(128) unsigned char smem[];
  const u32 q_smem = smem_addr(smem);                           // (kBlockM, kHeadDim)
  const u32 k_smem = q_smem + Config::kSmemQBytes;              // (kStages, kBlockN, kHeadDim)
  const u32 v_smem = k_smem + kStages * Config::kSmemKvTileBytes; // (kStages, kBlockN, kHeadDim)

  // Heavy query tiles first when later rows see more keys (causal): the tail of the grid then
  // holds the short tiles.
  auto m_block_of = [](uint3 block) {
    return Mask::kWorkGrowsWithRow ? int(gridDim.x - 1 - block.x) : int(block.x);
  };
  const int m_block = m_block_of(blockIdx);
  const int head = blockIdx.y, batch = blockIdx.z;
  const int kv_head = head / params.group_size;
  const AttentionShape shape{params.seqlen_q, params.seqlen_k};
  const int row_begin = m_block * kBlockM;
  const int rows_q = min(kBlockM, shape.seqlen_q - row_begin);

  const Element *q = static_cast<const Element *>(params.q) + batch * params.q_batch_stride +
                     head * params.q_head_stride + row_begin * params.q_row_stride;
  // Key/value tile addresses are recomputed from the (constant-bank) params per tile rather than
  // kept as base pointers through the main loop (measured: this removed the spills of hd64
  // 128x128 on sm_90, nvcc 13.0).
  auto k_tile = [&](int n_block) {
    return static_cast<const Element *>(params.k) +
           (batch * params.k_batch_stride + kv_head * params.k_head_stride +
            n_block * kBlockN * params.k_row_stride);
  };
  auto v_tile = [&](int n_block) {
    return static_cast<const Element *>(params.v) +
           (batch * params.v_batch_stride + kv_head * params.v_head_stride +
            n_block * kBlockN * params.v_row_stride);
  };
  // Output addresses are formed where they are used, from a fresh read of blockIdx: kept live
  // through the main loop they would cost registers that the accumulators need.
  auto o_rows = [&]() {
    const uint3 block = block_index_rematerialized();
    return static_cast<Element *>(params.o) + block.z * params.o_batch_stride +
           block.y * params.o_head_stride + m_block_of(block) * kBlockM * params.o_row_stride;
  };
  auto lse_rows = [&]() {
    const uint3 block = block_index_rematerialized();
    return params.lse + (int64_t(block.z) * params.heads_q + block.y) * shape.seqlen_q +
           m_block_of(block) * kBlockM;
  };

  const int n_begin = Mask::template n_block_begin<kBlockM, kBlockN>(m_block, shape);
  const int n_end = Mask::template n_block_end<kBlockM, kBlockN>(m_block, shape);
  if (n_begin >= n_end) {
    store_empty_rows<kBlockM, kHeadDim, kThreads>(o_rows(), params.o_row_stride, lse_rows(),
                                                  rows_q);
    return;
  }

  auto load_k = [&](int n_block, int stage) {
    load_tile_async<kBlockN, kHeadDim, kThreads>(
        k_smem + stage * Config::kSmemKvTileBytes, k_tile(n_block), params.k_row_stride,
        shape.seqlen_k - n_block * kBlockN);
  };
  auto load_v = [&](int n_block, int stage) {
    load_tile_async<kBlockN, kHeadDim, kThreads>(
        v_smem + stage * Config::kSmemKvTileBytes, v_tile(n_block), params.v_row_stride,
        shape.seqlen_k - n_block * kBlockN);
  };

  // Commit groups, in order: Q, K0, V0, K1, V1, ..., K_{S-1}; then each iteration n commits
  // V_{n+S-1} and K_{n+S}, empty past the last tile, so that waiting for K_n or V_n always
  // leaves exactly 2 * (S - 1) younger groups in flight.
  load_tile_async<kBlockM, kHeadDim, kThreads>(q_smem, q, params.q_row_stride, rows_q);
  cp_async_commit();
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    if (n_begin + s < n_end)
      load_k(n_begin + s, s);
    cp_async_commit();
    if (s == kStages - 1)
      break;
    if (n_begin + s < n_end)
      load_v(n_begin + s, s);
    cp_async_commit();
  }

  const int warp = threadIdx.x / 32;
  const u32 q_warp = q_smem + warp * Config::kRowsPerWarp * SmemRow<kHeadDim>::kBytes;
  float acc_o[kRowTiles][kDimTiles][4] = {};
  OnlineSoftmax<kRowTiles, Config::kRescaleTau, Config::kExp2EmuPercent, Config::kExp2PolyDegree>
      softmax;
  softmax.init();

  int stage = 0;
  for (int n_block = n_begin; n_block < n_end; ++n_block) {
    const int prev_stage = stage == 0 ? kStages - 1 : stage - 1;

    // K_n has landed and every warp is done with V_{n-1}: refill that buffer with V_{n+S-1}.
    cp_async_wait<2 * kStages - 2>();
    __syncthreads();
    if (n_block + kStages - 1 < n_end)
      load_v(n_block + kStages - 1, prev_stage);
    cp_async_commit();

    float acc_s[kRowTiles][kColTiles][4];
    gemm_qk<Element, kHeadDim>(acc_s, q_warp, k_smem + stage * Config::kSmemKvTileBytes);
    if ((n_block + 1) * kBlockN > shape.seqlen_k ||
        Mask::template needs_mask<kBlockM, kBlockN>(m_block, n_block, shape))
      apply_mask<Mask>(acc_s, row_begin + warp * Config::kRowsPerWarp, n_block * kBlockN, shape);
    softmax.update(acc_s, acc_o, params.scale_log2);
    u32 p[kRowTiles][kColTiles / 2][4];
    convert_p<Element>(p, acc_s);

    // V_n has landed and every warp is done with K_n: refill that buffer with K_{n+S}.
    cp_async_wait<2 * kStages - 2>();
    __syncthreads();
    if (n_block + kStages < n_end)
      load_k(n_block + kStages, stage);
    cp_async_commit();

    gemm_pv<Element, kHeadDim>(acc_o, p, v_smem + stage * Config::kSmemKvTileBytes);
    stage = stage == kStages - 1 ? 0 : stage + 1;
  }
  cp_async_wait<0>();

  float row_lse[2 * kRowTiles];
  softmax.finalize(acc_o, params.scale_log2, row_lse);

  // Epilogue: this warp's rows of the Q tile are free once its own last gemm_qk is done.
  const int warp_row = warp * Config::kRowsPerWarp;
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
  store_o<Element, kHeadDim>(o_rows() + warp_row * params.o_row_stride, params.o_row_stride,
                             rows_q - warp_row, q_warp, acc_o);
}

} // namespace sm80
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM80_FWD_KERNEL_CUH
