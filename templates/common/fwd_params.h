// fagen: the forward kernels' parameter block.
//
// Shared verbatim by device code (templates/) and host code (runtime/). Plain C layout, no CUDA
// headers, so that the runtime can fill it without the CUDA toolkit. Every kernel of params
// layout version kFwdParamsVersion takes exactly this struct by value as its only argument
// (`const __grid_constant__ fagen_fwd_params`). Change the layout => bump the version; the
// bundle records the version and the runtime refuses a mismatch.
#ifndef FAGEN_TEMPLATES_COMMON_FWD_PARAMS_H
#define FAGEN_TEMPLATES_COMMON_FWD_PARAMS_H

#include <stdint.h>

#define FAGEN_FWD_PARAMS_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

/// Forward attention problem, tensors in the input dtype (fp16/bf16) unless noted.
/// Strides are in elements; the last dimension (head dim) is contiguous.
/// Q: [batch, seqlen_q, heads_q, head_dim_qk] addressed through the strides below (any of
/// BSHD / BHSD works), K: [.., seqlen_k, heads_kv, head_dim_qk], V: [.., seqlen_k, heads_kv,
/// head_dim_v], O like Q with head_dim_v. LSE: float32, [batch, heads_q, seqlen_q] contiguous,
/// natural-log units: lse = log(sum_j exp(scale * s_ij)).
typedef struct fagen_fwd_params {
  const void *q;
  const void *k;
  const void *v;
  void *o;
  float *lse;

  int64_t q_batch_stride, q_head_stride, q_row_stride;
  int64_t k_batch_stride, k_head_stride, k_row_stride;
  int64_t v_batch_stride, v_head_stride, v_row_stride;
  int64_t o_batch_stride, o_head_stride, o_row_stride;

  int32_t batch;
  int32_t heads_q;
  int32_t heads_kv;      // heads_q % heads_kv == 0; query head h reads kv head h / (heads_q / heads_kv)
  int32_t seqlen_q;      // >= 1
  int32_t seqlen_k;      // >= 1
  int32_t group_size;    // heads_q / heads_kv, precomputed on the host

  float softmax_scale;   // usually 1/sqrt(head_dim_qk)
  float scale_log2;      // softmax_scale * log2(e): logits go through exp2
} fagen_fwd_params;

#ifdef __cplusplus
} // extern "C"
#endif

#endif // FAGEN_TEMPLATES_COMMON_FWD_PARAMS_H
