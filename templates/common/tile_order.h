// fagen: the orders in which a grid walks its work tiles in groups of (batch, head) pairs that
// keep their data in L2: the portable backward's causal CTA order (grouped_tile_order) and the
// sm90ws forward's causal tile order (tail_grouped_tile_order, whose last group is sized apart:
// causal_tail_groups). Plain C++, host and device (tests/unit/TileOrderTest.cpp).
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
// WsTileScheduler, sm90/ws_tile_scheduler.cuh, says why.)

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

/// The sm90ws forward's causal groups for tail_grouped_tile_order: *group, the pairs whose K/V
/// (kv_bytes a pair) fit in group_bytes (at least one, at most every pair), and *tail_first,
/// the first pair of the last group. Groups of *group while at least two tiles for each of
/// `ctas` CTAs running at once (ceil(2 ctas / tiles) pairs) are left for the last group, which
/// takes the rest; but the last group holds no more pairs than tail_bytes of K/V take (or than
/// a group, where that is more): then it is between that cap less a group and the cap. 64-bit
/// arithmetic: ctas may be a grid of one CTA a tile.
FAGEN_TILE_ORDER_HD void causal_tail_groups(int pairs, int tiles, int64_t kv_bytes, int64_t ctas,
                                            int64_t group_bytes, int64_t tail_bytes, int *group,
                                            int *tail_first) {
  const int64_t per_group = group_bytes / kv_bytes, per_tail = tail_bytes / kv_bytes;
  const int64_t g = per_group < 1 ? 1 : per_group < pairs ? per_group : pairs;
  const int64_t last_max = per_tail < g ? g : per_tail < pairs ? per_tail : pairs;
  const int64_t want = (2 * ctas + tiles - 1) / tiles;
  const int64_t last_min = want < 1 ? 1 : want < last_max ? want : last_max;
  int64_t first = pairs > last_min ? (pairs - last_min) / g * g : 0;
  if (pairs - first > last_max)
    first = (pairs - last_max + g - 1) / g * g;
  *group = int(g);
  *tail_first = int(first);
}

} // namespace fagen

#endif // FAGEN_TEMPLATES_COMMON_TILE_ORDER_H
