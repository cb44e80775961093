// fagen: the forward kernels' parameter block.
//
// Shared verbatim by device code (templates/) and host code (runtime/). Plain C layout, no CUDA
// headers, so that the runtime can fill it without the CUDA toolkit. Every forward kernel of
// params layout version FAGEN_FWD_PARAMS_VERSION takes exactly this struct by value as its only
// argument (`const __grid_constant__ fagen_fwd_params`). Change the layout => bump the version;
// the bundle records the version and the runtime refuses a mismatch.
//
// Fields a kernel's variant does not use are ignored by it (the runtime still zeroes them).
#ifndef FAGEN_TEMPLATES_COMMON_FWD_PARAMS_H
#define FAGEN_TEMPLATES_COMMON_FWD_PARAMS_H

#include <stdint.h>

// Version 3: kernels of template sm90ws take a second argument, `const __grid_constant__
// fagen_fwd_tma_maps` (abi/tma_params.h), after this struct. Version 4: the same layout; the
// dropout rule draws Philox4x32-7 (common/philox.h), so a forward and a backward from bundles
// of different versions would not drop the same elements. Version 5: tile_counter. Version 6:
// total_q / total_k, to which varlen kernels clamp every sequence's rows.
#define FAGEN_FWD_PARAMS_VERSION 6

#ifdef __cplusplus
extern "C" {
#endif

/// Forward attention problem, tensors in the input dtype (fp16/bf16) unless noted.
/// Strides are in elements; the last dimension (head dim) is contiguous.
/// Q: [batch, seqlen_q, heads_q, head_dim_qk] addressed through the strides below (any of
/// BSHD / BHSD works), K: [.., seqlen_k, heads_kv, head_dim_qk], V: [.., seqlen_k, heads_kv,
/// head_dim_v], O like Q with head_dim_v. LSE: float32, natural-log units:
/// lse = log(sum_j exp(logit_ij)), addressed lse + b * lse_batch_stride + h * lse_head_stride
/// + row.
///
/// Variable length (kernels built with Variant::kVarlen): cu_seqlens_q / cu_seqlens_k hold
/// batch + 1 ascending int32 offsets; sequence b is rows [cu[b], cu[b+1]) of packed tensors
/// (Q [total_q, heads_q, d] etc.); every batch stride is then ignored and the row index of every
/// per-row tensor (Q, O, LSE, and the backward's dO, dQ, D) is cu_seqlens_q[b] + i (keys:
/// cu_seqlens_k[b] + j). seqlen_q / seqlen_k are then the maxima over the batch (the grid).
/// The arrays live in device memory that the host does not read: kernels clamp sequence b to
/// rows [min(cu[b], total), min(max(cu[b + 1], cu[b]), total)) and to seqlen_q / seqlen_k
/// (common/variants.cuh sequence_span), so no array makes them touch a row outside the
/// tensors; valid arrays are unchanged by the clamps.
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
  int64_t lse_batch_stride, lse_head_stride; // dense: heads_q * seqlen_q, seqlen_q

  int32_t batch;
  int32_t heads_q;
  int32_t heads_kv;      // heads_q % heads_kv == 0; query head h reads kv head h / group_size
  int32_t seqlen_q;      // >= 1 (varlen: the largest)
  int32_t seqlen_k;      // >= 1 (varlen: the largest)
  int32_t group_size;    // heads_q / heads_kv, precomputed on the host

  float softmax_scale;   // usually 1/sqrt(head_dim_qk)
  float scale_log2;      // softmax_scale * log2(e): logits go through exp2

  // Variable length (Variant::kVarlen), else null / 0.
  const int32_t *cu_seqlens_q;
  const int32_t *cu_seqlens_k;
  int32_t total_q;       // rows of the packed Q, O, LSE (and dO, dQ, D); >= seqlen_q
  int32_t total_k;       // rows of the packed K, V (and dK, dV); >= seqlen_k

  // Sliding window (WindowMask): query i sees key j iff
  //   i + off - window_left <= j <= i + off + window_right, off = seqlen_k - seqlen_q
  // (bottom-right aligned; 0 for top-left). A negative bound is unbounded on that side. The
  // runtime caps a bound at max(seqlen_q, seqlen_k) + 256 (where it excludes no key, as any
  // larger one), so that the masks' 32-bit sums of rows, offset and bounds cannot overflow.
  int32_t window_left;
  int32_t window_right;

  // Softcap (Softcap score mod): logit = softcap * tanh(softmax_scale * s / softcap), > 0.
  float softcap;
  // ALiBi (Alibi score mod): logit = softmax_scale * s - slope[b, h] * |i + off - j|;
  // float32 device pointer, addressed alibi_slopes + b * alibi_batch_stride + h
  // (alibi_batch_stride 0: one slope per head for the whole batch).
  const float *alibi_slopes;
  int64_t alibi_batch_stride;

  // Runtime block mask (RuntimeBlockMask<kBlock>): one byte per (kBlock x kBlock) block of the
  // attention matrix, nonzero = computed, 0 = skipped (as if masked); addressed
  // block_mask + b * batch_stride + h * head_stride + row_block * row_stride + col_block.
  // Strides may be 0 to broadcast.
  const uint8_t *block_mask;
  int64_t block_mask_batch_stride, block_mask_head_stride, block_mask_row_stride;

  // Dropout on P (PhiloxDropout): each element is kept with probability 1 - dropout_p and
  // kept values are scaled by dropout_rescale. Element (b, h, i, j) is kept iff
  // fagen::dropout_keep(...) (common/philox.h) with these seed, offset and threshold; p is
  // quantized to 1/256 there (dropout_threshold(p), dropout_rescale(threshold)).
  float dropout_p;
  float dropout_rescale;
  uint32_t dropout_threshold; // 8 bits: min(255, round(dropout_p * 256)); drop iff byte < it
  // sm90ws kernels with a tile counter: their work tiles, ceil(seqlen_q / kBlockM) * heads_q *
  // batch, filled by the runtime from the kernel's block_m (read from the parameter bank so
  // that the producer keeps no register for it); 0 for other kernels.
  int32_t work_tiles;
  uint64_t dropout_seed;
  uint64_t dropout_offset;

  // Work tiles from a counter (sm90ws kernels built with kTileCounter): one int32 of the
  // caller's forward workspace, zeroed by the runtime before each launch; null = the static
  // deal of WsTileScheduler (templates/sm90/ws_tile_scheduler.cuh).
  int32_t *tile_counter;
} fagen_fwd_params;

#ifdef __cplusplus
} // extern "C"
#endif

#endif // FAGEN_TEMPLATES_COMMON_FWD_PARAMS_H
