// fagen: the key tiles a query tile visits under block sparsity, found by a whole warp.
#ifndef FAGEN_TEMPLATES_COMMON_KEY_TILES_CUH
#define FAGEN_TEMPLATES_COMMON_KEY_TILES_CUH

#include "common/types.cuh"

namespace fagen {

/// The first key tile in [n, n_end) whose block the sparsity layout computes for query tile
/// m_block, or n_end; n itself without a layout (DenseBlocks). Warp-cooperative (every lane of
/// the warp calls it with the same arguments): 32 tiles tested per load round.
template <int kBlockM, int kBlockN, class Sparsity>
__device__ __forceinline__ int next_visible_tile(const Sparsity &sparsity, int m_block, int n,
                                                 int n_end) {
  if constexpr (!Sparsity::kSparse) {
    return n;
  } else {
    const int lane = threadIdx.x % 32;
    for (; n < n_end; n += 32) {
      const bool visible =
          n + lane < n_end && sparsity.template visible<kBlockM, kBlockN>(m_block, n + lane);
      const unsigned ballot = __ballot_sync(0xffffffffu, visible);
      if (ballot)
        return n + __ffs(ballot) - 1;
    }
    return n_end;
  }
}

} // namespace fagen

#endif // FAGEN_TEMPLATES_COMMON_KEY_TILES_CUH
