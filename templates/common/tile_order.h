// fagen: the orders in which a grid walks its work tiles in groups of (batch, head) pairs that
// keep their data in L2: the portable backward's causal CTA order (grouped_tile_order) and the
// sm90ws forward's causal tile order (tail_grouped_tile_order, whose last group is larger). Plain
// C++, host and device (tests/unit/TileOrderTest.cpp).
#ifndef FAGEN_TEMPLATES_COMMON_TILE_ORDER_H
#define FAGEN_TEMPLATES_COMMON_TILE_ORDER_H

#include <stdint.h>

#if defined(__CUDACC__)
#define FAGEN_TILE_ORDER_HD __host__ __device__ __forceinline__
#else
#define FAGEN_TILE_ORDER_HD inline
#endif

namespace fagen {

/// How many bytes of L2 a group of pairs may fill (of the H200's 50 MB): the portable
/// backward's causal order, whose longest-first deal wants many pairs to a group.
constexpr int64_t kTileGroupL2Bytes = int64_t(32) << 20;
// (The sm90ws forward's causal groups hold 16 MB of K/V and its other tiles take no groups:
// WsTileScheduler, sm90/fwd_ws_kernel.cuh, says why.)

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

/// The sm90ws forward's causal order (WsTileScheduler): as grouped_tile_order, but every group
/// before pair `tail_first` (a multiple of `group`) holds `group` pairs and the last group holds
/// every pair from `tail_first` on. Sets *tile (0: the group's heaviest level) and *pair. A
/// bijection of [0, tiles * pairs) for 0 <= tail_first <= pairs - 1.
FAGEN_TILE_ORDER_HD void tail_grouped_tile_order(int t, int tiles, int pairs, int group,
                                                 int tail_first, int *tile, int *pair) {
  const bool body = t < tail_first * tiles;
  const int first = body ? t / (group * tiles) * group : tail_first;
  const int in_group = body ? group : pairs - tail_first;
  const int i = t - first * tiles;
  *tile = i / in_group;
  *pair = first + i % in_group;
}

/// The first pair of tail_grouped_tile_order's last group: groups of `group` pairs while at
/// least `last_min` pairs (and one) would be left for the last, which takes the rest (between
/// last_min and last_min + group - 1 pairs, or every pair where there are no more than
/// last_min).
FAGEN_TILE_ORDER_HD int tail_group_first(int pairs, int group, int last_min) {
  const int need = last_min > 1 ? last_min : 1;
  return pairs > need ? (pairs - need) / group * group : 0;
}

} // namespace fagen

#endif // FAGEN_TEMPLATES_COMMON_TILE_ORDER_H
