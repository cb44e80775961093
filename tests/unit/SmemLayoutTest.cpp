//===- SmemLayoutTest.cpp - the sm80 shared-memory layout arithmetic -----------===//
//
// templates/common/smem_layout.h compiled as host C++: the row bytes and shared-memory counts
// that the portable template's SmemRow, FwdConfig and BwdConfig and the planner's budget
// (compiler/plan/PlanSm80.cpp) all read. The values are checked at compile time too.
//
//===----------------------------------------------------------------------===//

#include "templates/common/smem_layout.h"

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

} // namespace
