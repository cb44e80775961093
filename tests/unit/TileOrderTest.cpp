// The grouped order of work tiles (templates/common/tile_order.h): the portable backward's
// causal CTA order, and the sm90ws forward's tile scheduler's order. Every item of the grid gets a
// distinct (tile, pair), groups come in order, and within a group the tiles never go back (the
// backward's longest key tile first). The GPU checks run small grids (one group for causal
// kernels; the sm90ws forward's other kernels take one pair a group, so several); the
// benchmarks' grids have many.
#include "tile_order.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

TEST(TileOrder, GroupedOrderIsABijectionTilesInOrderInEachGroup) {
  for (int n_tiles : {1, 2, 3, 16, 33, 128})
    for (int pairs : {1, 2, 5, 8, 128, 131})
      for (int group : {1, 2, 3, 4, 7, 16, 32, 200}) {
        const int g = group < pairs ? group : pairs; // what BwdTile passes: 1 <= group <= pairs
        std::vector<int> seen(size_t(n_tiles) * pairs, 0);
        int last_first = 0, last_n = 0;
        for (int linear = 0; linear < n_tiles * pairs; ++linear) {
          int n = -1, pair = -1;
          fagen::grouped_tile_order(linear, n_tiles, pairs, g, &n, &pair);
          ASSERT_GE(n, 0);
          ASSERT_LT(n, n_tiles);
          ASSERT_GE(pair, 0);
          ASSERT_LT(pair, pairs);
          ++seen[size_t(pair) * n_tiles + n];
          // Groups in order; inside one, key tiles never go back (tile 0 is the longest).
          const int first = pair / g * g;
          ASSERT_GE(first, last_first) << n_tiles << " " << pairs << " " << g << " " << linear;
          if (first == last_first)
            ASSERT_GE(n, last_n) << n_tiles << " " << pairs << " " << g << " " << linear;
          last_first = first, last_n = n;
        }
        for (int count : seen)
          ASSERT_EQ(count, 1) << n_tiles << " " << pairs << " " << g;
      }
}

} // namespace
