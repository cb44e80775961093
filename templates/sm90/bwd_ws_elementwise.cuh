// fagen sm90: the warp-specialized backward's elementwise phase (bwd_ws_kernel.cuh): a consumer
// warpgroup's P^T and dS^T from S^T and dP^T in its registers (masks, score mods, dropout's
// keep flags), as the portable backward computes P and dS (docs/design/variants-and-backward.md).
#ifndef FAGEN_TEMPLATES_SM90_BWD_WS_ELEMENTWISE_CUH
#define FAGEN_TEMPLATES_SM90_BWD_WS_ELEMENTWISE_CUH

#include "abi/bwd_params.h"
#include "common/dropout.cuh"
#include "common/softmax.cuh"
#include "sm80/bwd_kernel.cuh"
#include "sm90/bwd_ws_config.cuh"

namespace fagen {
namespace sm90 {

/// Dropout's keep flags of a consumer thread's P^T elements (dropout_keep_bits_transposed).
template <class Config> using WsKeepBits = u32[ceil_div(Config::kSCols / 8, 8)];

/// P^T and dS^T of one consumer warpgroup's 64 keys against a query tile, from S^T (st) and
/// dP^T (dpt) in place: st becomes P^T (with dropout P^T o keep, which dV reads: dV is scaled
/// by 1 / (1 - p) once, as it is stored), dpt dS^T = P^T o (dP^T [o keep / (1 - p)] - D).
/// key0: the warpgroup's first key (in the sequence), q0: the tile's first query row.
template <class Config>
__device__ __forceinline__ void bwd_ws_p_ds(float (&st)[Config::kSCols / 8][4],
                                            float (&dpt)[Config::kSCols / 8][4],
                                            const fagen_bwd_params &params, const float *lse2,
                                            const float *d, const WsKeepBits<Config> &keep,
                                            int key0, int q0, int head, int batch, bool masked,
                                            AttentionShape shape) {
  using Mask = typename Config::Mask;
  using ScoreMod = typename Config::ScoreMod;
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const ScoreMod mod(params.fwd, batch, head, shape);
  const float scale_log2 = params.fwd.scale_log2;
#pragma unroll
  for (int j = 0; j < Config::kSCols / 8; ++j) {
    const int c = 8 * j + 2 * (lane % 4);
    const float2 l = *reinterpret_cast<const float2 *>(lse2 + c);
    const float2 dd = *reinterpret_cast<const float2 *>(d + c);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = key0 + 16 * warp + lane / 4 + 8 * (e / 2), q = q0 + c + e % 2;
      const float s = st[j][e];
      float p;
      if constexpr (ScoreMod::kIdentity)
        p = exp2_approx(fmaf(s, scale_log2, -(e % 2 ? l.y : l.x)));
      else
        p = exp2_approx(fmaf(mod.logit(s, q, key), sm80::kLog2e, -(e % 2 ? l.y : l.x)));
      if (masked && !(key < shape.seqlen_k && Mask::is_visible(q, key, shape)))
        p = 0.f;
      float ds;
      if constexpr (Config::Dropout::kEnabled) {
        const u32 kept = keep_mask_transposed(keep, j, e);
        ds = p * fmaf(keep_masked(dpt[j][e], kept), params.fwd.dropout_rescale,
                      -(e % 2 ? dd.y : dd.x));
        st[j][e] = keep_masked(p, kept);
      } else {
        ds = p * (dpt[j][e] - (e % 2 ? dd.y : dd.x));
        st[j][e] = p;
      }
      if constexpr (!ScoreMod::kIdentity)
        ds *= mod.dlogit(s, q, key);
      dpt[j][e] = ds;
    }
  }
}

/// bwd_ws_p_ds's P^T alone, for the identity score mod: st (S^T) becomes P^T.
template <class Config>
__device__ __forceinline__ void bwd_ws_p(float (&st)[Config::kSCols / 8][4],
                                         const fagen_bwd_params &params, const float *lse2,
                                         int key0, int q0, bool masked, AttentionShape shape) {
  using Mask = typename Config::Mask;
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const float scale_log2 = params.fwd.scale_log2;
#pragma unroll
  for (int j = 0; j < Config::kSCols / 8; ++j) {
    const int c = 8 * j + 2 * (lane % 4);
    const float2 l = *reinterpret_cast<const float2 *>(lse2 + c);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = key0 + 16 * warp + lane / 4 + 8 * (e / 2), q = q0 + c + e % 2;
      float p = exp2_approx(fmaf(st[j][e], scale_log2, -(e % 2 ? l.y : l.x)));
      if (masked && !(key < shape.seqlen_k && Mask::is_visible(q, key, shape)))
        p = 0.f;
      st[j][e] = p;
    }
  }
}

/// bwd_ws_p_ds's dS^T from P^T (pt), for the identity score mod: dpt (dP^T) becomes dS^T (and
/// with dropout pt P^T o keep).
template <class Config>
__device__ __forceinline__ void bwd_ws_ds(float (&dpt)[Config::kSCols / 8][4],
                                          float (&pt)[Config::kSCols / 8][4], const float *d,
                                          const WsKeepBits<Config> &keep, float rescale) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < Config::kSCols / 8; ++j) {
    const float2 dd = *reinterpret_cast<const float2 *>(d + 8 * j + 2 * (lane % 4));
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if constexpr (Config::Dropout::kEnabled) {
        const u32 kept = keep_mask_transposed(keep, j, e);
        dpt[j][e] = pt[j][e] * fmaf(keep_masked(dpt[j][e], kept), rescale, -(e % 2 ? dd.y : dd.x));
        pt[j][e] = keep_masked(pt[j][e], kept);
      } else {
        dpt[j][e] = pt[j][e] * (dpt[j][e] - (e % 2 ? dd.y : dd.x));
      }
    }
  }
}

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_BWD_WS_ELEMENTWISE_CUH
