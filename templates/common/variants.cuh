// fagen: attention variants as hooks, shared by every arch's templates.
//
// A mask variant answers three questions about a (query tile, key tile) pair, at three
// granularities, so that kernels skip invisible tiles, mask only the tiles that need it, and
// test single elements there:
//   n_block_begin / n_block_end  which key tiles a query tile visits at all
//   needs_mask                   whether a visited key tile holds any invisible element
//   is_visible                   the element rule
// Key columns >= seqlen_k are the kernel's business (bounds), never a variant's.
// Later variants (sliding window, block-sparse, softcap, ALiBi) add hooks beside these.
#ifndef FAGEN_TEMPLATES_COMMON_VARIANTS_CUH
#define FAGEN_TEMPLATES_COMMON_VARIANTS_CUH

#include "common/types.cuh"

namespace fagen {

/// Sequence lengths of one (batch, head) problem.
struct AttentionShape {
  int seqlen_q;
  int seqlen_k;
};

/// Every query sees every key.
struct NoMask {
  /// Whether later query tiles cost more (schedule the heavy ones first).
  static constexpr bool kWorkGrowsWithRow = false;

  template <int kBlockM, int kBlockN>
  static __device__ __forceinline__ int n_block_begin(int m_block, AttentionShape shape) {
    return 0;
  }
  template <int kBlockM, int kBlockN>
  static __device__ __forceinline__ int n_block_end(int m_block, AttentionShape shape) {
    return ceil_div(shape.seqlen_k, kBlockN);
  }
  template <int kBlockM, int kBlockN>
  static __device__ __forceinline__ bool needs_mask(int m_block, int n_block,
                                                    AttentionShape shape) {
    return false;
  }
  static __device__ __forceinline__ bool is_visible(int row, int col, AttentionShape shape) {
    return true;
  }
};

/// Causal, aligned to the bottom-right corner: query i sees key j iff
/// j <= i + seqlen_k - seqlen_q. With seqlen_q > seqlen_k the first rows see no key at all
/// (their output is 0 and their LSE -inf).
struct CausalMask {
  static constexpr bool kWorkGrowsWithRow = true;

  static __device__ __forceinline__ int diagonal_offset(AttentionShape shape) {
    return shape.seqlen_k - shape.seqlen_q;
  }
  template <int kBlockM, int kBlockN>
  static __device__ __forceinline__ int n_block_begin(int m_block, AttentionShape shape) {
    return 0;
  }
  template <int kBlockM, int kBlockN>
  static __device__ __forceinline__ int n_block_end(int m_block, AttentionShape shape) {
    int last_row = min((m_block + 1) * kBlockM, shape.seqlen_q) - 1;
    int key_end = last_row + diagonal_offset(shape) + 1; // keys [0, key_end) are visible
    if (key_end <= 0)
      return 0;
    return min(ceil_div(shape.seqlen_k, kBlockN), ceil_div(key_end, kBlockN));
  }
  template <int kBlockM, int kBlockN>
  static __device__ __forceinline__ bool needs_mask(int m_block, int n_block,
                                                    AttentionShape shape) {
    // The tile's last key against its first row's diagonal.
    return (n_block + 1) * kBlockN - 1 > m_block * kBlockM + diagonal_offset(shape);
  }
  static __device__ __forceinline__ bool is_visible(int row, int col, AttentionShape shape) {
    return col <= row + diagonal_offset(shape);
  }
};

} // namespace fagen

#endif // FAGEN_TEMPLATES_COMMON_VARIANTS_CUH
