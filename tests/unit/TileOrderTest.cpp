// The grouped orders of work tiles (templates/common/tile_order.h): the portable backward's
// causal CTA order, and the sm90ws forward's causal tile order (its last group sized apart).
// Every item of the grid gets a distinct (tile, pair), groups come in order, and within a group
// the tiles never go back (the longest first). The GPU checks' grids are small (one group for
// causal kernels); the benchmarks' grids have many, and so do these tests.
#include "templates/common/tile_order.h"

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

// causal_tail_groups(pairs, tiles, kv_bytes, ctas, 16 MB, 32 MB): what WsTileScheduler passes.
void tail_groups(int pairs, int tiles, int64_t kv_bytes, int64_t ctas, int *group, int *first) {
  fagen::causal_tail_groups(pairs, tiles, kv_bytes, ctas, int64_t(16) << 20, int64_t(32) << 20,
                            group, first);
}

TEST(TileOrder, CausalTailGroupsAtTheBenchmarkShapes) {
  const int64_t mb = int64_t(1) << 20;
  int group = 0, first = 0;
  tail_groups(128, 16, 1 * mb, 132, &group, &first); // hd 128 2k, 128-row tiles: 6 x 16, then 32
  EXPECT_EQ(group, 16);
  EXPECT_EQ(first, 96);
  tail_groups(64, 16, 2 * mb, 132, &group, &first); // hd 256 2k: 6 x 8, then 16 (32 MB, the cap)
  EXPECT_EQ(group, 8);
  EXPECT_EQ(first, 48);
  tail_groups(16, 86, 8 * mb, 132, &group, &first); // hd 128 16k, 192-row tiles: 6 x 2, then 4
  EXPECT_EQ(group, 2);
  EXPECT_EQ(first, 12);
  tail_groups(8, 128, 16 * mb, 132, &group, &first); // hd 256 16k: 6 x 1, then 2 (the cap)
  EXPECT_EQ(group, 1);
  EXPECT_EQ(first, 6);
  tail_groups(256, 11, mb / 2, 132, &group, &first); // hd 64 2k, 192-row tiles: 7 x 32, then 32
  EXPECT_EQ(group, 32);
  EXPECT_EQ(first, 224);
  tail_groups(70, 16, 2 * mb, 132, &group, &first); // 70 pairs: the cap keeps the last at 16
  EXPECT_EQ(group, 8);
  EXPECT_EQ(first, 56);
  tail_groups(8, 4, 64 * mb, 132, &group, &first); // a pair's K/V over 32 MB: one a group
  EXPECT_EQ(group, 1);
  EXPECT_EQ(first, 7);
  tail_groups(16, 1, 1, int64_t(1) << 30, &group, &first); // one CTA a tile, 2^30 of them
  EXPECT_EQ(group, 16);
  EXPECT_EQ(first, 0);
}

TEST(TileOrder, CausalTailGroupsKeepTheirBytesAndTheLastGroupsSize) {
  const int64_t kGroup = int64_t(16) << 20, kTail = int64_t(32) << 20;
  for (int pairs : {1, 2, 3, 7, 8, 16, 33, 64, 70, 128, 131, 250, 256, 1000})
    for (int tiles : {1, 2, 11, 16, 43, 86, 128})
      for (int64_t kv : {int64_t(1) << 10, int64_t(1) << 19, int64_t(3) << 19, int64_t(1) << 20,
                         int64_t(2) << 20, int64_t(5) << 20, int64_t(16) << 20, int64_t(40) << 20})
        for (int64_t ctas : {int64_t(1), int64_t(3), int64_t(132), int64_t(1) << 30}) {
          int group = 0, first = 0;
          tail_groups(pairs, tiles, kv, ctas, &group, &first);
          const int last = pairs - first;
          const int64_t cap = kTail / kv > group ? kTail / kv : group; // the last group's cap
          const int64_t want = (2 * ctas + tiles - 1) / tiles;         // two tiles a CTA
          ASSERT_GE(group, 1);
          ASSERT_LE(group, pairs);
          ASSERT_TRUE(group == 1 || group * kv <= kGroup) << pairs << " " << kv;
          ASSERT_EQ(first % group, 0);
          ASSERT_GE(first, 0);
          ASSERT_GE(last, 1);
          ASSERT_LE(last, cap) << pairs << " " << tiles << " " << kv << " " << ctas;
          // The last group: at least the two tiles a CTA it wants (within the cap and the
          // pairs) unless the cap cut it, and less than a group beyond that.
          const int64_t need0 = want < cap ? want : cap, need = need0 < pairs ? need0 : pairs;
          const int64_t top = cap < pairs ? cap : pairs;
          ASSERT_LT(last, need + group) << pairs << " " << tiles << " " << kv << " " << ctas;
          ASSERT_TRUE(last >= need || last + group > top)
              << pairs << " " << tiles << " " << kv << " " << ctas;
        }
}

TEST(TileOrder, TailGroupedOrderIsABijectionHeaviestFirstInEachGroup) {
  for (int tiles : {1, 2, 3, 16, 33})
    for (int pairs : {1, 2, 5, 8, 16, 128, 131})
      for (int64_t kv : {int64_t(1) << 10, int64_t(3) << 20, int64_t(5) << 20, int64_t(40) << 20})
        for (int64_t ctas : {int64_t(1), int64_t(5), int64_t(132)}) {
          int g = 0, tail_first = 0;
          tail_groups(pairs, tiles, kv, ctas, &g, &tail_first);
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
            ASSERT_EQ(count, 1) << tiles << " " << pairs << " " << g << " " << tail_first;
        }
}

} // namespace
