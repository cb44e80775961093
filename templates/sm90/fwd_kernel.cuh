// fagen sm90: attention forward on Hopper tensor cores (wgmma, sm_90a), FlashAttention-3 order
// within each warpgroup: the next S = Q K^T and the current O += P V are in flight together
// while the softmax of S runs.
//
// One CTA = one kBlockM-row query tile of one (batch, head) = kBlockM / 64 warpgroups of 64
// rows each. Every thread loads (cp.async, 16 bytes, into the 128-byte-swizzled layout wgmma
// reads); one barrier per key tile hands the ring slots over.
#ifndef FAGEN_TEMPLATES_SM90_FWD_KERNEL_CUH
#define FAGEN_TEMPLATES_SM90_FWD_KERNEL_CUH

#include "abi/fwd_params.h"
#include "common/softmax.cuh"
#include "sm80/tile_ops.cuh"
#include "sm90/fwd_config.cuh"
#include "sm90/tile_ops.cuh"

namespace fagen {
namespace sm90 {

/// Launch: grid (ceil(seqlen_q / kBlockM), heads_q, batch), block kThreads, kSmemBytes of
/// dynamic shared memory. Pointers 16-byte aligned and strides multiples of 8 elements.
template <class Config> __device__ __forceinline__ void fwd_kernel(const fagen_fwd_params &params) {
  using Element = typename Config::Element;
  using Mask = typename Config::Mask;
  constexpr int kHeadDim = Config::kHeadDim, kBlockM = Config::kBlockM;
  constexpr int kBlockN = Config::kBlockN, kStages = Config::kStages;
  constexpr int kThreads = Config::kThreads;

  extern __shared__ __align__(1024) unsigned char smem[];
  const u32 smem_base = smem_addr(smem);
  const u32 q_smem = (smem_base + 1023) & ~1023u;                  // (kBlockM, kHeadDim)
  const u32 k_smem = q_smem + Config::kSmemQBytes;                   // (kStages, kBlockN, kHeadDim)
  const u32 v_smem = k_smem + kStages * Config::kSmemKvTileBytes;    // (kStages, kBlockN, kHeadDim)

  // Heavy query tiles first when later rows see more keys (causal).
  auto m_block_of = [](uint3 block) {
    return Mask::kWorkGrowsWithRow ? int(gridDim.x - 1 - block.x) : int(block.x);
  };
  const int m_block = m_block_of(blockIdx);
  const int head = blockIdx.y, batch = blockIdx.z;
  const int kv_head = head / params.group_size;
  const AttentionShape shape{params.seqlen_q, params.seqlen_k};
  const int row_begin = m_block * kBlockM;
  const int rows_q = min(kBlockM, shape.seqlen_q - row_begin);

  auto o_rows = [&]() {
    const uint3 block = block_index_rematerialized();
    return static_cast<Element *>(params.o) + block.z * params.o_batch_stride +
           block.y * params.o_head_stride + m_block_of(block) * kBlockM * params.o_row_stride;
  };
  auto lse_rows = [&]() {
    const uint3 block = block_index_rematerialized();
    return params.lse + block.z * params.lse_batch_stride + block.y * params.lse_head_stride +
           m_block_of(block) * kBlockM;
  };

  const int n_begin = Mask::template n_block_begin<kBlockM, kBlockN>(m_block, shape);
  const int n_end = Mask::template n_block_end<kBlockM, kBlockN>(m_block, shape);
  if (n_begin >= n_end) {
    store_empty_rows<kBlockM, kHeadDim, kThreads>(o_rows(), params.o_row_stride, lse_rows(),
                                                  rows_q);
    return;
  }
  const int n_tiles = n_end - n_begin;

  // Step i (0 <= i <= n_tiles) consumes K_i (S_i = Q K_i^T) and V_{i-1} (O += P_{i-1} V_{i-1});
  // its cp.async group g_i holds exactly those tiles (and Q for i = 0). K_i lives in slot
  // i % kStages, V_i likewise. Groups g_0 .. g_{kStages-2} go out first; step i issues
  // g_{i+kStages-1}, whose slots held K_{i-1} and V_{i-2}, both consumed by step i - 1.
  auto load_group = [&](int i) {
    if (i == 0) {
      const Element *q = static_cast<const Element *>(params.q) + batch * params.q_batch_stride +
                         head * params.q_head_stride + row_begin * params.q_row_stride;
      load_tile_sw128<kBlockM, kHeadDim, kThreads>(q_smem, q, params.q_row_stride, rows_q);
    }
    if (i < n_tiles) {
      const int n_block = n_begin + i;
      const Element *k = static_cast<const Element *>(params.k) +
                         (batch * params.k_batch_stride + kv_head * params.k_head_stride +
                          n_block * kBlockN * params.k_row_stride);
      load_tile_sw128<kBlockN, kHeadDim, kThreads>(k_smem + (i % kStages) * Config::kSmemKvTileBytes,
                                                   k, params.k_row_stride,
                                                   shape.seqlen_k - n_block * kBlockN);
    }
    if (i >= 1 && i <= n_tiles) {
      const int n_block = n_begin + i - 1;
      const Element *v = static_cast<const Element *>(params.v) +
                         (batch * params.v_batch_stride + kv_head * params.v_head_stride +
                          n_block * kBlockN * params.v_row_stride);
      load_tile_sw128<kBlockN, kHeadDim, kThreads>(
          v_smem + ((i - 1) % kStages) * Config::kSmemKvTileBytes, v, params.v_row_stride,
          shape.seqlen_k - n_block * kBlockN);
    }
    sm80::cp_async_commit();
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i)
    load_group(i);

  const int warpgroup = threadIdx.x / 128, warp = threadIdx.x / 32;
  const u32 q_warpgroup = q_smem + warpgroup * 64 * 128; // its 64 rows in each column block
  const int warp_row = 64 * warpgroup + 16 * (warp % 4); // the warp's first row in the tile

  float acc_o[kHeadDim / 8][4];                          // (64, kHeadDim) per warpgroup
  zero_fill(acc_o);
  u32 p[kBlockN / 16][4];                                // P_{i-1} (64, kBlockN) as A fragments
  OnlineSoftmax<1> softmax;
  softmax.init();

  // Step i: K_i and V_{i-1} have landed and every warpgroup is done with step i - 1, whose
  // slots group i + kStages - 1 refills: before the step's wgmmas are issued, or (when
  // kRefillAfterIssue) right after them, so that the tensor cores start without waiting for
  // the cp.async issue.
  auto begin_step = [&](int i) {
    sm80::cp_async_wait<kStages - 2>();
    fence_proxy_async_smem();
    __syncthreads();
    if constexpr (!Config::kRefillAfterIssue)
      load_group(i + kStages - 1);
  };
  auto refill_after_issue = [&](int i) {
    if constexpr (Config::kRefillAfterIssue)
      load_group(i + kStages - 1);
  };
  auto issue_qk = [&](float(&acc_s)[kBlockN / 8][4], int i) {
    gemm_qk_issue<Element, kHeadDim, kBlockM, kBlockN>(
        acc_s, q_warpgroup, k_smem + (i % kStages) * Config::kSmemKvTileBytes);
    wgmma_commit();
  };
  auto issue_pv = [&](int i) {
    gemm_pv_issue<Element, kHeadDim, kBlockN>(
        acc_o, p, v_smem + ((i - 1) % kStages) * Config::kSmemKvTileBytes);
    wgmma_commit();
  };
  // Returns whether O needs the rescale (see softmax_exp).
  auto mask_and_exp = [&](float(&rescale)[2], float(&acc_s)[kBlockN / 8][4], int i) {
    const int n_block = n_begin + i;
    if ((n_block + 1) * kBlockN > shape.seqlen_k ||
        Mask::template needs_mask<kBlockM, kBlockN>(m_block, n_block, shape)) {
      float(&s3)[1][kBlockN / 8][4] = reinterpret_cast<float(&)[1][kBlockN / 8][4]>(acc_s);
      apply_mask<Mask>(s3, row_begin + warp_row, n_block * kBlockN, shape);
    }
    return softmax_exp<Config::kExp2EmuColumns, Config::kExp2PolyDegree>(rescale, softmax, acc_s,
                                                                          params.scale_log2);
  };

  {
    begin_step(0);
    float acc_s[kBlockN / 8][4]; // (64, kBlockN) per warpgroup
    wgmma_fence();
    issue_qk(acc_s, 0);
    refill_after_issue(0);
    wgmma_wait<0>();
    fence_operands(acc_s);
    float rescale[2];
    mask_and_exp(rescale, acc_s, 0);
    convert_p<Element>(p, acc_s);
  }
  for (int i = 1; i < n_tiles; ++i) {
    begin_step(i);
    float acc_s[kBlockN / 8][4];
    wgmma_fence();
    issue_qk(acc_s, i);
    issue_pv(i);
    refill_after_issue(i);
    // S_i is the older group: its softmax runs while P_{i-1} V_{i-1} is still in flight.
    wgmma_wait<1>();
    fence_operands(acc_s);
    float rescale[2];
    const bool grew = mask_and_exp(rescale, acc_s, i);
    wgmma_wait<0>();
    fence_operands(acc_o);
    fence_operands(p);
    if (grew)
      rescale_o(acc_o, rescale);
    convert_p<Element>(p, acc_s);
  }
  begin_step(n_tiles);
  wgmma_fence();
  issue_pv(n_tiles);
  refill_after_issue(n_tiles);
  wgmma_wait<0>();
  fence_operands(acc_o);
  fence_operands(p);
  sm80::cp_async_wait<0>();

  float row_lse[2];
  float(&o3)[1][kHeadDim / 8][4] = reinterpret_cast<float(&)[1][kHeadDim / 8][4]>(acc_o);
  softmax.finalize(o3, params.scale_log2, row_lse);

  const int lane = threadIdx.x % 32;
  if (lane % 4 == 0) {
    float *lse = lse_rows();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp_row + 8 * h + lane / 4;
      if (row < rows_q)
        lse[row] = row_lse[h];
    }
  }
  store_o_rows<Element, kHeadDim>(o_rows() + warp_row * params.o_row_stride, params.o_row_stride,
                                  rows_q - warp_row, acc_o);
}

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_FWD_KERNEL_CUH
