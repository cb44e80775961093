// The grouped orders of work tiles (templates/common/tile_order.h): the portable backward's
// causal CTA order, and the sm90ws forward's causal tile order (its last group larger). Every item of the grid gets a
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

TEST(TileOrder, TailGroupTakesWhatTheGroupsLeaveAtLeastLastMin) {
  EXPECT_EQ(fagen::tail_group_first(128, 16, 17), 96); // hd 128 2k: 6 groups of 16, then 32
  EXPECT_EQ(fagen::tail_group_first(128, 16, 16), 112);
  EXPECT_EQ(fagen::tail_group_first(16, 2, 4), 12);    // hd 128 16k, 192-row tiles
  EXPECT_EQ(fagen::tail_group_first(8, 16, 3), 0);     // the group holds every pair
  EXPECT_EQ(fagen::tail_group_first(3, 1, 5), 0);      // fewer pairs than last_min
  EXPECT_EQ(fagen::tail_group_first(5, 1, 0), 4);      // last_min below one: one pair
  for (int pairs = 1; pairs <= 70; ++pairs)
    for (int group = 1; group <= pairs; ++group)
      for (int last_min = 0; last_min <= 80; ++last_min) {
        const int first = fagen::tail_group_first(pairs, group, last_min);
        const int left = pairs - first, need = last_min > 1 ? last_min : 1;
        ASSERT_EQ(first % group, 0);
        ASSERT_GE(first, 0);
        ASSERT_GE(left, 1);
        if (first > 0) { // groups only while the last keeps at least `need`, and no more than
          ASSERT_GE(left, need);         // one group's worth beyond it
          ASSERT_LT(left, need + group);
        } else {
          ASSERT_TRUE(pairs <= need || pairs - need < group) << pairs << " " << group << " " << last_min;
        }
      }
}

TEST(TileOrder, TailGroupedOrderIsABijectionHeaviestFirstInEachGroup) {
  for (int tiles : {1, 2, 3, 16, 33})
    for (int pairs : {1, 2, 5, 8, 16, 128, 131})
      for (int group : {1, 2, 3, 4, 7, 16, 32, 200})
        for (int last_min : {0, 1, 3, 17, 40}) {
          const int g = group < pairs ? group : pairs; // what WsTileScheduler passes
          const int tail_first = fagen::tail_group_first(pairs, g, last_min);
          std::vector<int> seen(size_t(tiles) * pairs, 0);
          int last_first = 0, last_tile = 0;
          for (int t = 0; t < tiles * pairs; ++t) {
            int tile = -1, pair = -1;
            fagen::tail_grouped_tile_order(t, tiles, pairs, g, tail_first, &tile, &pair);
            ASSERT_GE(tile, 0);
            ASSERT_LT(tile, tiles);
            ASSERT_GE(pair, 0);
            ASSERT_LT(pair, pairs);
            ++seen[size_t(pair) * tiles + tile];
            // Groups in order (every pair from tail_first on is one group); inside one, the
            // level never goes back (level 0: the heaviest tile, m_block num_m - 1).
            const int first = pair >= tail_first ? tail_first : pair / g * g;
            ASSERT_GE(first, last_first) << tiles << " " << pairs << " " << g << " " << t;
            if (first == last_first)
              ASSERT_GE(tile, last_tile) << tiles << " " << pairs << " " << g << " " << t;
            last_first = first, last_tile = tile;
          }
          for (int count : seen)
            ASSERT_EQ(count, 1) << tiles << " " << pairs << " " << g << " " << last_min;
        }
}

} // namespace
