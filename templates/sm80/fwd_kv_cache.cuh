// fagen sm80: where the forward kernel's keys and values are. The kernel asks its cache for the
// cp.async copies of a key or value tile and addresses K and V nowhere else: the interface that
// the decode kernel's caches serve (sm80/decode_kv_cache.cuh), so that a paged cache (chunked
// prefill) can take this one's place without touching the kernel's loop.
#ifndef FAGEN_TEMPLATES_SM80_FWD_KV_CACHE_CUH
#define FAGEN_TEMPLATES_SM80_FWD_KV_CACHE_CUH

#include "abi/fwd_params.h"
#include "common/variants.cuh"
#include "sm80/decode_kv_cache.cuh"
#include "sm80/tile_ops.cuh"

namespace fagen {
namespace sm80 {

/// The K and V rows of one (batch, kv head) in contiguous tensors (dense, or varlen's packed
/// rows): key j at row j, one row stride apart. Tile addresses are recomputed from the
/// (constant-bank) params per tile rather than kept as base pointers through the main loop
/// (measured: this removed the spills of hd64 128x128 on sm_90, nvcc 13.0); varlen re-reads its
/// first key row (an L1 hit) likewise.
template <class Config> struct FwdContiguousKv {
  using Element = typename Config::Element;
  static constexpr bool kVarlen = Config::kVarlen;
  const fagen_fwd_params &params;
  int batch, kv_head, seqlen_k;

  __device__ __forceinline__ FwdContiguousKv(const fagen_fwd_params &params_, int batch_,
                                             int kv_head_, int seqlen_k_)
      : params(params_), batch(batch_), kv_head(kv_head_), seqlen_k(seqlen_k_) {}

  /// Where sequence `batch`'s rows are and how many (common/variants.cuh).
  __device__ __forceinline__ static SequenceSpan sequence_span(const fagen_fwd_params &p,
                                                               int batch) {
    return fagen::sequence_span<kVarlen>(p, batch);
  }

  /// This sequence's first key row in the packed tensors (dense: 0).
  __device__ __forceinline__ int64_t k_row0() const {
    if constexpr (kVarlen)
      return sequence_row0(params.cu_seqlens_k, block_index_rematerialized().z, params.total_k);
    else
      return 0;
  }

  /// Offset of this sequence's key 0 in a tensor: dense, its batch stride; varlen, its first
  /// row in the packed tensor (batch strides unused).
  __device__ __forceinline__ int64_t sequence_offset(int64_t batch_stride, int64_t row0,
                                                     int64_t row_stride) const {
    return kVarlen ? row0 * row_stride : batch * batch_stride;
  }

  /// The cp.async copies of key tile n_block, (kBlockN, kHeadDimQK) at dst; rows past the
  /// sequence zero-filled. (The tile's first key is formed here, after the varlen row: in the
  /// caller it moved the SASS of varlen kernels.)
  __device__ __forceinline__ void load_k(u32 dst, int n_block) const {
    const Element *k = static_cast<const Element *>(params.k) +
                       (sequence_offset(params.k_batch_stride, k_row0(), params.k_row_stride) +
                        kv_head * params.k_head_stride +
                        n_block * Config::kBlockN * params.k_row_stride);
    load_tile_padded_async<Config::kBlockN, Config::kHeadDimQK, Config::kHeadDimQKPad,
                           Config::kThreads>(dst, k, params.k_row_stride,
                                             seqlen_k - n_block * Config::kBlockN);
  }

  /// As load_k, for value tile n_block, (kBlockN, kHeadDimV) at dst.
  __device__ __forceinline__ void load_v(u32 dst, int n_block) const {
    const Element *v = static_cast<const Element *>(params.v) +
                       (sequence_offset(params.v_batch_stride, k_row0(), params.v_row_stride) +
                        kv_head * params.v_head_stride +
                        n_block * Config::kBlockN * params.v_row_stride);
    load_tile_padded_async<Config::kBlockN, Config::kHeadDimV, Config::kHeadDimVPad,
                           Config::kThreads>(dst, v, params.v_row_stride,
                                             seqlen_k - n_block * Config::kBlockN);
  }
};

/// A paged forward's sequence `batch`: the query rows as varlen's (cu_seqlens_q); the keys:
/// seqused_k[batch] clamped to [0, seqlen_k], as PagedKv clamps (and reports) it.
__device__ __forceinline__ SequenceSpan paged_sequence_span(const fagen_decode_params &params,
                                                            int batch) {
  const fagen_fwd_params &p = params.fwd;
  SequenceSpan s;
  s.shape.window_left = p.window_left;
  s.shape.window_right = p.window_right;
  const int q0 = sequence_row0(p.cu_seqlens_q, batch, p.total_q);
  const int q1 = min(max(p.cu_seqlens_q[batch + 1], q0), p.total_q);
  s.q_row0 = q0;
  s.k_row0 = 0;
  s.shape.seqlen_q = min(q1 - q0, p.seqlen_q);
  s.shape.seqlen_k = min(max(params.seqused_k[batch], 0), p.seqlen_k);
  return s;
}

/// Chunked prefill's cache: sequence b's queries are rows [cu_seqlens_q[b], cu_seqlens_q[b +
/// 1]) of the packed Q (varlen), its keys the seqused_k[b] cached tokens of its pages, in the
/// decode kernel's layout and checks (sm80/decode_kv_cache.cuh: page ids checked before any
/// load, the first bad entry reported in the status record).
template <class Config> struct FwdPagedKv {
  using Element = typename Config::Element;
  static constexpr int kPageSize = Config::kPageSize, kRunRows = Config::kRunRows;
  // As FwdContiguousKv: addresses recomputed from the params per tile, not kept through the
  // main loop (PagedKv's pointers and strides, kept, spilled 80 bytes at hd 128 with 16-token
  // pages, this 16; nvcc 13.0, sm_90).
  const fagen_decode_params &params;
  int batch, kv_head, seqlen_k;

  __device__ __forceinline__ FwdPagedKv(const fagen_decode_params &params_, int batch_,
                                        int kv_head_, int seqlen_k_)
      : params(params_), batch(batch_), kv_head(kv_head_), seqlen_k(seqlen_k_) {
    const int used = params.seqused_k[batch];
    if (seqlen_k != used) // clamped by sequence_span
      report_kv_status(params.kv_status, FAGEN_KV_STATUS_SEQUSED_K, batch, 0, used);
  }

  /// The cp.async copies of key tile n_block (PagedKv::load_tile's runs, the keys alone).
  __device__ __forceinline__ void load_k(u32 dst, int n_block) const {
    load_runs<Config::kHeadDimQK, Config::kHeadDimQKPad>(
        dst, params.fwd.k, params.fwd.k_batch_stride, params.fwd.k_head_stride,
        params.fwd.k_row_stride, n_block);
  }
  /// As load_k, for value tile n_block.
  __device__ __forceinline__ void load_v(u32 dst, int n_block) const {
    load_runs<Config::kHeadDimV, Config::kHeadDimVPad>(
        dst, params.fwd.v, params.fwd.v_batch_stride, params.fwd.v_head_stride,
        params.fwd.v_row_stride, n_block);
  }

  __device__ __forceinline__ static SequenceSpan sequence_span(const fagen_decode_params &params,
                                                               int batch) {
    return paged_sequence_span(params, batch);
  }

private:
  /// Tile n_block as kBlockN / kRunRows runs of rows one stride apart, each inside one page;
  /// a run past the sequence or through a bad page id is zero-filled, nothing read.
  template <int kDim, int kDimPad>
  __device__ __forceinline__ void load_runs(u32 dst, const void *cache, int64_t page_stride,
                                            int64_t head_stride, int64_t row_stride,
                                            int n_block) const {
    const int32_t *pages = params.block_table + batch * params.block_table_batch_stride;
#pragma unroll
    for (int run = 0; run < Config::kBlockN / kRunRows; ++run) {
      const int key = n_block * Config::kBlockN + run * kRunRows;
      const int page = key < seqlen_k ? checked_page(pages, key / kPageSize, params.num_pages,
                                                     params.kv_status, batch)
                                      : -1;
      const int rows = page < 0 ? 0 : seqlen_k - key;
      load_tile_padded_async<kRunRows, kDim, kDimPad, Config::kThreads>(
          dst + run * kRunRows * SmemRow<kDimPad>::kBytes,
          static_cast<const Element *>(cache) + kv_head * head_stride +
              max(page, 0) * page_stride + (key % kPageSize) * row_stride,
          row_stride, rows);
    }
  }
};

} // namespace sm80
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM80_FWD_KV_CACHE_CUH
