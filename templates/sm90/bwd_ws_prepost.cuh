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

/// dQ = dq_accum (times the softmax scale for the identity score mod) in the input dtype,
/// read back in WsBwdConfig::dq_accum_offset's order. Launch: like bwd_ws_preprocess, after
/// bwd_ws_kernel.
template <class Config>
__device__ __forceinline__ void bwd_ws_postprocess(const fagen_bwd_params &params) {
  using Element = typename Config::Element;
  constexpr bool kVarlen = Config::kVarlen;
  constexpr int kBlockM = Config::kBlockM, kChunks = Config::kHeadDimQK / 8; // real columns
  const int m_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const fagen_fwd_params &f = params.fwd;
  const SequenceSpan span = sequence_span<kVarlen>(f, batch);
  const int rows = min(kBlockM, span.shape.seqlen_q - m_block * kBlockM);
  if (rows <= 0)
    return;
  const float scale = Config::ScoreMod::kIdentity ? f.softmax_scale : 1.f;
  const float *accum = params.dq_accum + ws_dq_accum_seq<Config>(params, batch, span) +
                       head * params.dq_accum_head_stride +
                       int64_t(m_block) * kBlockM * Config::kDim;
  // The dq_accum copies that key tiles wrote (WsBwdConfig::kDqSlots; with kDqStoreFirst a copy
  // without a key tile holds nothing, and dQ is 0 where none has one), summed in copy order.
  const int64_t slot_stride = sm80::dq_slot_stride<Config>(params);
  const int written =
      Config::kDqStoreFirst
          ? min(Config::kDqSlots, ceil_div(span.shape.seqlen_k, Config::kBlockN))
          : Config::kDqSlots;
  const auto load = [&](int at) {
    float2 x = written > 0 ? *reinterpret_cast<const float2 *>(accum + at) : make_float2(0.f, 0.f);
#pragma unroll
    for (int slot = 1; slot < Config::kDqSlots; ++slot)
      if (slot < written) {
        const float2 y = *reinterpret_cast<const float2 *>(accum + slot * slot_stride + at);
        x.x += y.x, x.y += y.y;
      }
    return x;
  };
  Element *dq = static_cast<Element *>(params.dq) +
                sm80::batch_offset<kVarlen>(batch, params.dq_batch_stride) +
                head * params.dq_head_stride +
                (span.q_row0 + int64_t(m_block) * kBlockM) * params.dq_row_stride;
  for (int c = threadIdx.x; c < rows * kChunks; c += Config::kPrePostThreads) {
    const int r = c / kChunks, col = 8 * (c % kChunks);
    u32 v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 x = load(Config::dq_accum_offset(r, col + 2 * i));
      v[i] = pack2<Element>(x.x * scale, x.y * scale);
    }
    st_global_v4(dq + r * params.dq_row_stride + col, v);
  }
}

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_BWD_WS_PREPOST_CUH
