// fagen sm90: the warp-specialized backward's _pre and _post kernels (bwd_ws_kernel.cuh runs
// between them): D = rowsum(dO o O) with the query tile's dq_accum block zeroed, and dQ out of
// dq_accum in the input dtype, read in WsBwdConfig::dq_accum_offset's order; and where a batch
// entry's query tiles start in dq_accum, which the main kernel's dQ reductions share.
#ifndef FAGEN_TEMPLATES_SM90_BWD_WS_PREPOST_CUH
#define FAGEN_TEMPLATES_SM90_BWD_WS_PREPOST_CUH

#include "abi/bwd_params.h"
#include "common/ptx.cuh"
#include "sm80/bwd_kernel.cuh"
#include "sm90/bwd_ws_config.cuh"
#include "sm90/tile_ops.cuh"

namespace fagen {
namespace sm90 {

/// Where batch entry `batch`'s query tiles start in dq_accum (floats): dense, its batch
/// stride; varlen, its whole-tile rows (abi/bwd_params.h, fagen_bwd_dq_tile_row0), so that the
/// padding rows of its last tile are its own.
template <class Config>
__device__ __forceinline__ int64_t ws_dq_accum_seq(const fagen_bwd_params &params, int batch,
                                                   const SequenceSpan &span) {
  if constexpr (Config::kVarlen)
    return fagen_bwd_dq_tile_row0(span.q_row0, batch, Config::kBlockM) * Config::kDim;
  else
    return batch * params.dq_accum_batch_stride;
}

/// D = rowsum(dO o O) of one query tile in fp32, and its dq_accum block (kBlockM x head dim,
/// the padding rows of a last tile too: WsBwdConfig::dq_fragment_order) zeroed: the portable
/// backward's _pre. Launch: grid (ceil(seqlen_q / kBlockM), heads_q, batch), block
/// kPrePostThreads.
template <class Config>
__device__ __forceinline__ void bwd_ws_preprocess(const fagen_bwd_params &params) {
  sm80::bwd_preprocess<Config>(params);
}

/// dQ = dq_accum (times the softmax scale for the identity score mod) in the input dtype. The
/// query tile's block is read with contiguous 16-byte loads, up to eight of a thread's in flight
/// at once (each float4 holds two columns of two rows: ws_bwd_dq_accum_row / _col; the padding
/// dQ sub-block of hd 192, WsBwdConfig::kDqPadBlock, is not read), converted into a
/// row-major tile in shared memory (rows padded by 4 words: the warp's stores land in 32
/// banks), and written out row by row with 16-byte stores. 16k tokens of hidden 2048, H100:
/// 69-70 us at hd 64 / 128 / 256 (cuDNN's conversion 73), where 8-byte loads of each row's
/// columns in the accumulator order took 78-92 at hd 128 / 256 (docs/perf/sm90-bwd.md).
/// Launch: like bwd_ws_preprocess, after bwd_ws_kernel.
template <class Config>
__device__ __forceinline__ void bwd_ws_postprocess(const fagen_bwd_params &params) {
  using Element = typename Config::Element;
  constexpr bool kVarlen = Config::kVarlen;
  constexpr int kBlockM = Config::kBlockM, kThreads = Config::kPrePostThreads;
  constexpr int kChunks = Config::kHeadDimQK / 8; // real columns, 8 a 16-byte store
  constexpr int kRowWords = Config::kDim / 2 + 4; // a row of bf16 / fp16 pairs, padded
  constexpr int kLoads = kBlockM * Config::kDim / 4 / kThreads; // float4 a thread
  static_assert(kBlockM * Config::kDim % (4 * kThreads) == 0, "whole float4 a thread");
  constexpr int kBatch = kLoads < 8 ? kLoads : 8; // in flight at once
  static_assert(kLoads % kBatch == 0, "whole batches");
  // Load i of every thread lies in one 64 x 64 sub-block (1024 float4): i kThreads / 1024.
  static_assert(1024 % kThreads == 0, "a round of loads inside one dQ sub-block");
  const auto padding = [](int i) { // the sub-block past hd 192's columns, never added to
    return Config::kDqPadBlock && i * kThreads / 1024 / (kBlockM / 64) >= Config::kQkBlocks;
  };
  __shared__ __align__(16) u32 tile[kBlockM * kRowWords];
  const int m_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const fagen_fwd_params &f = params.fwd;
  const SequenceSpan span = sequence_span<kVarlen>(f, batch);
  const int rows = min(kBlockM, span.shape.seqlen_q - m_block * kBlockM);
  if (rows <= 0)
    return;
  const float scale = Config::ScoreMod::kIdentity ? f.softmax_scale : 1.f;
  const float4 *accum = reinterpret_cast<const float4 *>(
      params.dq_accum + ws_dq_accum_seq<Config>(params, batch, span) +
      head * params.dq_accum_head_stride + int64_t(m_block) * kBlockM * Config::kDim);
  // The dq_accum copies that key tiles wrote (WsBwdConfig::kDqSlots; with kDqStoreFirst a copy
  // without a key tile holds nothing, and dQ is 0 where none has one), summed in copy order.
  const int64_t slot_stride = sm80::dq_slot_stride<Config>(params) / 4;
  const int written =
      Config::kDqStoreFirst
          ? min(Config::kDqSlots, ceil_div(span.shape.seqlen_k, Config::kBlockN))
          : Config::kDqSlots;
#pragma unroll
  for (int i0 = 0; i0 < kLoads; i0 += kBatch) {
    float4 x[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int q = threadIdx.x + kThreads * (i0 + u);
      x[u] = written > 0 && !padding(i0 + u) ? __ldcs(accum + q)
                                              : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int slot = 1; slot < Config::kDqSlots; ++slot)
        if (slot < written && !padding(i0 + u)) {
          const float4 y = __ldcs(accum + slot * slot_stride + q);
          x[u].x += y.x, x[u].y += y.y, x[u].z += y.z, x[u].w += y.w;
        }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int q = threadIdx.x + kThreads * (i0 + u);
      const int row = ws_bwd_dq_accum_row(q, kBlockM), col = ws_bwd_dq_accum_col(q, kBlockM);
      tile[row * kRowWords + col / 2] = pack2<Element>(x[u].x * scale, x[u].y * scale);
      tile[(row + 8) * kRowWords + col / 2] = pack2<Element>(x[u].z * scale, x[u].w * scale);
    }
  }
  __syncthreads();
  Element *dq = static_cast<Element *>(params.dq) +
                sm80::batch_offset<kVarlen>(batch, params.dq_batch_stride) +
                head * params.dq_head_stride +
                (span.q_row0 + int64_t(m_block) * kBlockM) * params.dq_row_stride;
  for (int c = threadIdx.x; c < rows * kChunks; c += kThreads) {
    const int r = c / kChunks, chunk = c % kChunks;
    const uint4 v = *reinterpret_cast<const uint4 *>(tile + r * kRowWords + 4 * chunk);
    const u32 w[4] = {v.x, v.y, v.z, v.w};
    st_global_v4(dq + r * params.dq_row_stride + 8 * chunk, w);
  }
}

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_BWD_WS_PREPOST_CUH
