//===- SmemLayoutTest.cpp - the sm80 shared-memory layout arithmetic -----------===//
//
// templates/common/smem_layout.h compiled as host C++: the row bytes and shared-memory counts
// that the portable template's SmemRow, FwdConfig and BwdConfig and the planner's budget
// (compiler/plan/PlanSm80.cpp) all read. The values are checked at compile time too.
//
//===----------------------------------------------------------------------===//

#include "templates/common/smem_layout.h"
#include "templates/common/ws_bwd_layout.h"
#include "templates/common/ws_registers.h"

#include <vector>

#include <gtest/gtest.h>

namespace {

using namespace fagen;

// constexpr: usable where the template needs its constants.
static_assert(smem_row_bytes(128, kFwdSwizzleFrom) == 272, "");
static_assert(sm80_fwd_smem_bytes(128, 128, 128, 64, 2) == 104448, "");

TEST(SmemLayout, RowBytes) {
  EXPECT_EQ(kFwdSwizzleFrom, 192);
  EXPECT_EQ(bwd_swizzle_from(false), 64);
  EXPECT_EQ(bwd_swizzle_from(true), 192);
  // Multiples of 64 from the threshold on are unpadded (swizzled); others padded by 16 bytes.
  EXPECT_FALSE(smem_row_swizzled(128, kFwdSwizzleFrom));
  EXPECT_EQ(smem_row_bytes(64, kFwdSwizzleFrom), 144);
  EXPECT_EQ(smem_row_bytes(128, kFwdSwizzleFrom), 272);
  EXPECT_TRUE(smem_row_swizzled(192, kFwdSwizzleFrom));
  EXPECT_EQ(smem_row_bytes(192, kFwdSwizzleFrom), 384);
  EXPECT_EQ(smem_row_bytes(256, kFwdSwizzleFrom), 512);
  EXPECT_EQ(smem_row_bytes(64, bwd_swizzle_from(false)), 128);
  EXPECT_EQ(smem_row_bytes(128, bwd_swizzle_from(false)), 256);
  EXPECT_EQ(smem_row_bytes(128, bwd_swizzle_from(true)), 272);
  // Not a multiple of 64: padded whatever the threshold.
  EXPECT_FALSE(smem_row_swizzled(80, 64));
  EXPECT_EQ(smem_row_bytes(80, 64), 176);
  EXPECT_EQ(smem_row_bytes(160, 64), 336);
}

TEST(SmemLayout, Sm80Forward) {
  // Q tile (rows as wide as the wider head dim) + stages x (K + V tiles).
  EXPECT_EQ(sm80_fwd_smem_bytes(128, 128, 128, 64, 2), 128 * 272 + 2 * 64 * (272 + 272));
  EXPECT_EQ(sm80_fwd_smem_bytes(64, 64, 128, 128, 2), 92160);
  EXPECT_EQ(sm80_fwd_smem_bytes(256, 256, 64, 64, 1), 64 * 512 + 64 * 1024);
  EXPECT_EQ(sm80_fwd_smem_bytes(192, 128, 64, 64, 1), 64 * 384 + 64 * (384 + 272));
  EXPECT_EQ(sm80_fwd_smem_bytes(128, 192, 64, 64, 1), 64 * 384 + 64 * (272 + 384));
}

TEST(SmemLayout, Sm80Backward) {
  // K + V tiles, stages x (Q + dO tiles), P and dS tiles (rows block_n * 2 + 16 bytes).
  EXPECT_EQ(sm80_bwd_p_row_bytes(64), 144);
  EXPECT_EQ(sm80_bwd_smem_bytes(128, 128, 64, 64, 2, false),
            64 * (256 + 256) + 2 * 64 * (256 + 256) + 2 * 64 * 144);
  EXPECT_EQ(sm80_bwd_smem_bytes(128, 128, 64, 64, 2, true),
            64 * (272 + 272) + 2 * 64 * (272 + 272) + 2 * 64 * 144);
  EXPECT_EQ(sm80_bwd_smem_bytes(192, 128, 64, 128, 1, true),
            128 * (384 + 272) + 64 * (384 + 272) + 2 * 64 * 272);
}

TEST(SmemLayout, Sm90WsBackward) {
  // hd 128, 64 x 128 tiles, two stages: K, V 32 KB each, Q and dO 16 KB a stage, two dS^T tiles
  // of 16 KB, two 16 KB dQ staging blocks, LSE + D 512 bytes a stage, 5 mbarriers, alignment.
  constexpr WsBwdLayout l(128, 64, 128, 2);
  static_assert(l.bytes == 4 * 32768 + 2 * 16384 + 2 * 16384 + 2 * 512 + 5 * 8 + 1024, "");
  EXPECT_EQ(l.q, 65536);
  EXPECT_EQ(l.ds, 65536 + 4 * 16384);
  EXPECT_EQ(l.stats, l.dq + 2 * 16384);
  // Every tile starts on a 1024-byte swizzle atom.
  for (int off : {l.v, l.q, l.dout, l.ds, l.dq})
    EXPECT_EQ(off % 1024, 0);
  EXPECT_EQ(l.pt, l.dq); // no P^T tiles below hd 256
  EXPECT_LE(WsBwdLayout(64, 128, 128, 2).bytes, 227 * 1024);
  // hd 256, 64 x 64 tiles, one stage (S^T split by query columns): K, V, Q, dO 32 KB each, two
  // dS^T and two P^T tiles of 8 KB, a 16 KB dQ staging block for each of the two consumer
  // warpgroups, LSE + D 512 bytes, 3 mbarriers, alignment.
  static_assert(ws_bwd_split_s(256) && !ws_bwd_split_s(128), "");
  static_assert(ws_bwd_consumers(256, 64) == 2 && ws_bwd_consumers(128, 128) == 2, "");
  constexpr WsBwdLayout w(256, 64, 64, 1);
  static_assert(w.bytes == 4 * 32768 + 4 * 8192 + 2 * 16384 + 512 + 3 * 8 + 1024, "");
  EXPECT_EQ(w.pt, w.ds + 2 * 8192);
  EXPECT_EQ(w.dq, w.pt + 2 * 8192);
  for (int off : {w.v, w.q, w.dout, w.ds, w.pt, w.dq})
    EXPECT_EQ(off % 1024, 0);
  EXPECT_LE(w.bytes, 227 * 1024);
  // Two Q slots (with their LSE and D rows) beside one dO slot in a ring of its own (its two
  // mbarriers too); three do not fit.
  static_assert(ws_bwd_do_stages(256, 2) == 1 && ws_bwd_do_stages(128, 2) == 2, "");
  constexpr WsBwdLayout w2(256, 64, 64, 2);
  static_assert(w2.bytes == w.bytes + 32768 + 512 + 4 * 8, "");
  EXPECT_EQ(w2.ds, w2.dout + 32768);
  EXPECT_LE(w2.bytes, 227 * 1024);
  EXPECT_GT(WsBwdLayout(256, 64, 64, 3).bytes, 227 * 1024);
}

TEST(SmemLayout, Sm90WsRegisterSplitsFitTheLaunch) {
  // 384 threads launch with 168 registers each: the backward's splits (24 + 2 x 240, and
  // 40 + 2 x 232 with the deterministic kernels' dQ writer warp) take all of it, one more step
  // of 8 for the producer would not fit (setmaxnreg.inc would wait forever).
  EXPECT_TRUE(ws_split_fits(2, ws_bwd_producer_registers(false), ws_bwd_consumer_registers(false)));
  EXPECT_TRUE(ws_split_fits(2, ws_bwd_producer_registers(true), ws_bwd_consumer_registers(true)));
  EXPECT_EQ(128 * (40 + 2 * 232), 384 * 168);
  EXPECT_FALSE(ws_split_fits(2, ws_bwd_producer_registers(true) + 8, ws_bwd_consumer_registers(true)));
  EXPECT_FALSE(ws_split_fits(2, ws_bwd_producer_registers(true), ws_bwd_consumer_registers(false)));
  EXPECT_TRUE(ws_registers_fit(2, false) && ws_registers_fit(2, true) && ws_registers_fit(3, false));
}

TEST(SmemLayout, Sm90WsBackwardDqAccumOrder) {
  // A bijection of the query tile's (row, col) onto its block_m x head dim floats, for both
  // tiles the planner builds; each 64 x 64 sub-block is contiguous, and a pair of columns
  // (2 c, 2 c + 1) of a row is one float2.
  for (auto [blockM, dim] : {std::pair{64, 128}, std::pair{128, 64}, std::pair{64, 256}}) {
    std::vector<int> seen(blockM * dim, 0);
    for (int row = 0; row < blockM; ++row)
      for (int col = 0; col < dim; ++col) {
        const int at = ws_bwd_dq_accum_offset(row, col, blockM);
        ASSERT_GE(at, 0);
        ASSERT_LT(at, blockM * dim);
        ++seen[at];
        const int sub = (col / 64) * (blockM / 64) + row / 64;
        EXPECT_EQ(at / 4096, sub) << row << " " << col;
        if (col % 2 == 1)
          EXPECT_EQ(at, ws_bwd_dq_accum_offset(row, col - 1, blockM) + 1);
      }
    for (int n : seen)
      ASSERT_EQ(n, 1);
    // _post's inverse: float4 q holds (row, col), (row, col + 1), (row + 8, col),
    // (row + 8, col + 1) of ws_bwd_dq_accum_row / _col.
    for (int q = 0; q < blockM * dim / 4; ++q) {
      const int row = ws_bwd_dq_accum_row(q, blockM), col = ws_bwd_dq_accum_col(q, blockM);
      ASSERT_EQ(ws_bwd_dq_accum_offset(row, col, blockM), 4 * q) << q;
      ASSERT_EQ(ws_bwd_dq_accum_offset(row, col + 1, blockM), 4 * q + 1) << q;
      ASSERT_EQ(ws_bwd_dq_accum_offset(row + 8, col, blockM), 4 * q + 2) << q;
      ASSERT_EQ(ws_bwd_dq_accum_offset(row + 8, col + 1, blockM), 4 * q + 3) << q;
    }
  }
}

} // namespace
