//===- FakeDriverWrapperTest.cpp - fagen.hpp against the fake driver -------===//
#include "fagen/fagen.hpp"
#include "FakeCuda.h"
#include "tests/common/TestBundleBytes.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <string>

TEST(FakeDriverWrapperTest, PlanRunAndErrors) {
  std::vector<uint8_t> bytes = fagenTestBundleBytes();
  fagen::Bundle b = fagen::Bundle::fromMemory(bytes.data(), bytes.size());
  fagen::Plan plan = b.planForward(fagenTestProblem(FAGEN_DTYPE_FP16, 128, 1));
  alignas(16) static char buf[16];
  static float lse[4];
  plan.run(buf, buf, buf, buf, lse);
  void *lib = dlopen(std::getenv("FAGEN_LIBCUDA"), RTLD_NOW | RTLD_LOCAL);
  auto state = reinterpret_cast<FakeCudaState *(*)()>(dlsym(lib, "fake_cuda_state"));
  ASSERT_NE(state, nullptr);
  EXPECT_EQ(state()->params.o, buf);
  // The overload with a workspace: this kernel has no tile counter, so none is read.
  EXPECT_EQ(plan.workspaceBytes(), 0u);
  alignas(16) static char other[16];
  plan.run(buf, buf, buf, other, lse, /*workspace=*/nullptr, /*workspaceBytes=*/0, /*args=*/nullptr);
  EXPECT_EQ(state()->params.o, other);
  EXPECT_EQ(state()->params.tile_counter, nullptr);
  try {
    b.planForward(fagenTestProblem(FAGEN_DTYPE_FP16, 96, 1));
    FAIL() << "no exception";
  } catch (const fagen::Error &e) {
    EXPECT_EQ(e.status(), FAGEN_ERROR_NOT_SUPPORTED);
  }
  fagen::Bundle moved = std::move(b);
  EXPECT_EQ(moved.kernelCount(), 4);
}

TEST(FakeDriverWrapperTest, Backward) {
  std::vector<uint8_t> bytes = fagenVariantBundleBytes();
  fagen::Bundle b = fagen::Bundle::fromMemory(bytes.data(), bytes.size());
  fagen_fwd_problem problem = fagenTestProblem(FAGEN_DTYPE_FP16, 128, 1);
  fagen::Plan plan = b.planBackward(problem, /*deterministic=*/true);
  EXPECT_EQ(plan.pass(), FAGEN_PASS_BACKWARD);
  EXPECT_GT(plan.workspaceBytes(), 0u);
  void *lib = dlopen(std::getenv("FAGEN_LIBCUDA"), RTLD_NOW | RTLD_LOCAL);
  auto state = reinterpret_cast<FakeCudaState *(*)()>(dlsym(lib, "fake_cuda_state"));
  ASSERT_NE(state, nullptr);
  size_t before = state()->launchLog.size();
  alignas(256) static char buf[16];
  static float lse[4];
  const size_t wsBytes = (plan.workspaceBytes() + 255) / 256 * 256;
  void *workspace = std::aligned_alloc(256, wsBytes); // host memory: the fake reads nothing
  EXPECT_THROW(plan.runBackward(buf, buf, buf, buf, lse, buf, buf, buf, buf, workspace,
                                plan.workspaceBytes() - 1),
               fagen::Error); // too small
  EXPECT_EQ(state()->launchLog.size(), before);
  plan.runBackward(buf, buf, buf, buf, lse, buf, buf, buf, buf, workspace, wsBytes);
  std::free(workspace);
  ASSERT_EQ(state()->launchLog.size(), before + 3);
  EXPECT_EQ(state()->launchLog[before + 1].function, "fagen_bwd_fp16_hd128_causal_det_sm80");
  try {
    plan.run(buf, buf, buf, buf, lse);
    FAIL() << "no exception";
  } catch (const fagen::Error &e) {
    EXPECT_EQ(e.status(), FAGEN_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("the plan is a backward plan"), std::string::npos);
  }
  fagen_fwd_problem softcap = problem;
  softcap.score_mod = FAGEN_SCORE_MOD_SOFTCAP;
  softcap.softcap = 30;
  EXPECT_THROW(b.planForward(softcap), fagen::Error);
}

TEST(FakeDriverWrapperTest, MergeStates) {
  std::vector<uint8_t> bytes = fagenDecodeBundleBytes();
  fagen::Bundle b = fagen::Bundle::fromMemory(bytes.data(), bytes.size());
  fagen_merge_problem m = FAGEN_MERGE_PROBLEM_INIT;
  m.num_states = 2, m.batch = 1, m.heads = 32, m.seqlen = 1, m.head_dim = 128;
  m.dtype = FAGEN_DTYPE_FP16;
  fagen_merge_problem_set_bshd_strides(&m);
  fagen::Plan plan = b.planMergeStates(m);
  EXPECT_EQ(plan.pass(), FAGEN_PASS_MERGE);
  void *lib = dlopen(std::getenv("FAGEN_LIBCUDA"), RTLD_NOW | RTLD_LOCAL);
  auto state = reinterpret_cast<FakeCudaState *(*)()>(dlsym(lib, "fake_cuda_state"));
  ASSERT_NE(state, nullptr);
  const size_t before = state()->launchLog.size();
  alignas(16) static char states[16], out[16];
  static float lse[4];
  plan.runMergeStates(states, lse, out, nullptr);
  ASSERT_EQ(state()->launchLog.size(), before + 1);
  EXPECT_EQ(state()->launchLog.back().function,
            "fagen_fwd_fp16_hd128_causal_sm80decode_m16n64w4s3_merge");
  EXPECT_THROW(plan.runMergeStates(nullptr, lse, out, nullptr), fagen::Error);
  m.dtype = FAGEN_DTYPE_BF16;
  try {
    b.planMergeStates(m);
    FAIL() << "no exception";
  } catch (const fagen::Error &e) {
    EXPECT_EQ(e.status(), FAGEN_ERROR_NOT_SUPPORTED);
  }
}

TEST(FakeDriverWrapperTest, PagedDecode) {
  const std::vector<uint8_t> bytes = fagenPagedDecodeBundleBytes();
  fagen::Bundle b = fagen::Bundle::fromMemory(bytes.data(), bytes.size());
  fagen_fwd_problem p = FAGEN_FWD_PROBLEM_INIT;
  p.batch = 2, p.heads_q = 32, p.heads_kv = 8, p.seqlen_q = 1, p.seqlen_k = 500;
  p.head_dim_qk = p.head_dim_v = 128, p.dtype = FAGEN_DTYPE_FP16, p.causal = 1;
  fagen_paged_kv paged = FAGEN_PAGED_KV_INIT;
  paged.page_size = 16, paged.num_pages = 100, paged.max_pages_per_seq = 32;
  paged.block_table_stride = 32;
  fagen_fwd_problem_set_paged_strides(&p, &paged);
  fagen::Plan plan = b.planForwardPaged(p, paged);
  EXPECT_GE(plan.workspaceBytes(), 256u);
  alignas(256) static char buf[64], workspace[1 << 18];
  alignas(16) static int32_t table[64], used[2];
  static float lse[64];
  ASSERT_LE(plan.workspaceBytes(), sizeof workspace); // the status record lies at its end
  std::memset(workspace, 0, sizeof workspace);
  plan.runPaged(buf, buf, buf, buf, lse, table, used, workspace, plan.workspaceBytes());
  plan.checkPagedStatus(workspace);
  EXPECT_THROW(plan.runPaged(buf, buf, buf, buf, lse, nullptr, used, workspace,
                             plan.workspaceBytes()),
               fagen::Error);
  paged.page_size = 64; // no kernel of that page size
  EXPECT_THROW(b.planForwardPaged(p, paged), fagen::Error);
}
