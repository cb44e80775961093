// fagen: the order in which a grid walks its work tiles in groups of (batch, head) pairs that
// keep their data in L2: the portable backward's causal CTA order. The sm90ws forward's tile
// scheduler (sm90/fwd_ws_kernel.cuh, WsTileScheduler::tile) walks the same order with its own
// arithmetic: written through this function, its SASS changed (and the backward's did in the
// other form), so the two stay apart until a GPU run verifies one of them. Plain C++, host and
// device (tests/unit/TileOrderTest.cpp).
#ifndef FAGEN_TEMPLATES_COMMON_TILE_ORDER_H
#define FAGEN_TEMPLATES_COMMON_TILE_ORDER_H

#include <stdint.h>

#if defined(__CUDACC__)
#define FAGEN_TILE_ORDER_HD __host__ __device__ __forceinline__
#else
#define FAGEN_TILE_ORDER_HD inline
#endif

namespace fagen {

/// How many bytes of L2 a group of pairs may fill (of the H200's 50 MB): the causal orders,
/// whose longest-first deal wants many pairs to a group.
constexpr int64_t kTileGroupL2Bytes = int64_t(32) << 20;
// (The sm90ws forward's tiles without a causal mask take no groups: WsTileScheduler says why.)

/// Work item `t` of `tiles` tiles x `pairs` pairs, walked in groups of `group` pairs (the last
/// group may have fewer): within a group, tile 0 of every pair, then tile 1, and so on. Sets
/// *tile and *pair. A bijection of [0, tiles * pairs) for any group >= 1.
FAGEN_TILE_ORDER_HD void grouped_tile_order(int t, int tiles, int pairs, int group, int *tile,
                                            int *pair) {
  const int first = t / (group * tiles) * group; // the group's first pair
  const int in_group = pairs - first < group ? pairs - first : group;
  const int i = t - first * tiles;
  *tile = i / in_group;
  *pair = first + i % in_group;
}

} // namespace fagen

#endif // FAGEN_TEMPLATES_COMMON_TILE_ORDER_H
