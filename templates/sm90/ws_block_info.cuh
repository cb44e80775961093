// fagen sm90: one work tile's geometry in the warp-specialized forward: its sequence's rows and
// shape, the key tiles it visits (mask range and block sparsity) and where its O and LSE rows
// start.
#ifndef FAGEN_TEMPLATES_SM90_WS_BLOCK_INFO_CUH
#define FAGEN_TEMPLATES_SM90_WS_BLOCK_INFO_CUH

#include "abi/fwd_params.h"
#include "common/variants.cuh"
#include "sm80/tile_ops.cuh"
#include "sm90/ws_paged_kv.cuh"

namespace fagen {
namespace sm90 {

/// Batch entry `batch`'s rows (varlen: from cu_seqlens; paged: the queries from cu_seqlens_q,
/// the keys its seqused_k cached tokens) and shape as the mask hooks read it: a window mask
/// reads its bounds from it (the other masks leave them unbounded, as the dense kernels always
/// did).
template <class Config>
__device__ __forceinline__ SequenceSpan ws_span(const fagen_fwd_params &p, int batch) {
  using Mask = typename Config::Mask;
  SequenceSpan s;
  if constexpr (Config::kPaged)
    s = sm80::paged_sequence_span(ws_paged_params(p), batch);
  else
    s = sequence_span<Config::kVarlen>(p, batch);
  if constexpr (std::is_same<Mask, NoMask>::value || Mask::kCausal)
    s.shape.window_left = s.shape.window_right = -1;
  return s;
}

/// Whether work tile m_block of a sequence has rows: varlen tiles past the end of a shorter
/// sequence have none and are skipped by every warpgroup alike.
template <class Config>
__device__ __forceinline__ bool ws_has_rows(int m_block, const AttentionShape &shape) {
  return !Config::kVarlen || m_block * Config::kBlockM < shape.seqlen_q;
}

/// The key tiles a work tile visits: those of [n_begin, n_end) (the mask's range) that the
/// sparsity layout keeps. Dense: n_first = n_begin and every tile after it.
template <class Config> struct WsKeyTiles {
  using Sparsity = typename Config::Sparsity;
  static constexpr int kBlockM = Config::kBlockM, kBlockN = Config::kBlockN;
  int n_first, n_end, count;

  /// One thread's walk (the producer): reads the layout byte by byte.
  __device__ static int next_scalar(const Sparsity &sp, int m_block, int n, int n_end) {
    while (n < n_end && !sp.template visible<kBlockM, kBlockN>(m_block, n))
      ++n;
    return n;
  }
  /// Whole warps (the consumers): 32 tiles a step (next_visible_tile).
  template <bool kWarp>
  __device__ static int next(const Sparsity &sp, int m_block, int n, int n_end) {
    if constexpr (!Sparsity::kSparse)
      return n;
    else if constexpr (kWarp)
      return next_visible_tile<kBlockM, kBlockN>(sp, m_block, n, n_end);
    else
      return next_scalar(sp, m_block, n, n_end);
  }

  template <bool kWarp>
  __device__ static WsKeyTiles make(const fagen_fwd_params &params, int m_block, int head,
                                    int batch, const AttentionShape &shape) {
    using Mask = typename Config::Mask;
    WsKeyTiles t;
    const int n_begin = Mask::template n_block_begin<kBlockM, kBlockN>(m_block, shape);
    t.n_end = Mask::template n_block_end<kBlockM, kBlockN>(m_block, shape);
    if constexpr (!Sparsity::kSparse) {
      t.n_first = n_begin;
      t.count = max(0, t.n_end - n_begin);
    } else {
      const Sparsity sp(params, batch, head);
      t.n_first = next<kWarp>(sp, m_block, n_begin, t.n_end);
      t.count = 0;
      for (int n = t.n_first; n < t.n_end; n = next<kWarp>(sp, m_block, n + 1, t.n_end))
        ++t.count;
    }
    return t;
  }
  /// The visible key tile after n.
  template <bool kWarp>
  __device__ static int after(const fagen_fwd_params &params, int head, int batch, int m_block,
                              int n, int n_end) {
    if constexpr (!Sparsity::kSparse)
      return n + 1;
    else
      return next<kWarp>(Sparsity(params, batch, head), m_block, n + 1, n_end);
  }
};

/// Where a work tile's rows of O and LSE start: batch entry `batch` (varlen: its first row in
/// the packed tensors, from cu_seqlens, re-read here so that no offset stays live through the
/// main loop), head `head`, row `row0` of the sequence.
template <class Config>
__device__ __forceinline__ typename Config::Element *ws_o_rows(const fagen_fwd_params &params,
                                                               int batch, int head, int64_t row0) {
  const int64_t seq = Config::kVarlen ? ws_span<Config>(params, batch).q_row0 * params.o_row_stride
                                      : batch * params.o_batch_stride;
  return static_cast<typename Config::Element *>(params.o) + seq + head * params.o_head_stride +
         row0 * params.o_row_stride;
}
template <class Config>
__device__ __forceinline__ float *ws_lse_rows(const fagen_fwd_params &params, int batch, int head,
                                              int64_t row0) {
  const int64_t seq = Config::kVarlen ? ws_span<Config>(params, batch).q_row0
                                      : batch * params.lse_batch_stride;
  return params.lse + seq + head * params.lse_head_stride + row0;
}

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_WS_BLOCK_INFO_CUH
