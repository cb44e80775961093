//===- FakeDecodeTest.cpp - decode plans and state merging on a fake libcuda ---===//
//
// The split-KV decode kernels' plans (kernel choice, split count, grids, workspace, both
// parameter blocks) and runs (the split kernel and its combine, or one split without a
// workspace), and fagen_plan_merge_states / fagen_run_merge_states with their argument checks,
// against tests/runtime/FakeCuda.cpp (132 SMs, compute capability 9.0 unless FAKE_CUDA_CC).
//
//===----------------------------------------------------------------------===//
#include "fagen/fagen.h"
#include "FakeCuda.h"
#include "FakeBundleTest.h"
#include "templates/abi/decode_params.h"
#include "tests/common/TestBundles.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>

using namespace fagen;
using fagen::test::makeDecodeBundle;
using fagen::test::testDecodeKernel;

namespace {

using fagen::test::fake;

/// A decode call: batch B, 32 query heads over 8 kv heads, T tokens, Sk keys, fp16 hd 128
/// causal (kernel 4 of makeDecodeBundle serves it for T <= 4).
fagen_fwd_problem decodeProblem(int batch, int tokens, int seqlenK, int headsQ = 32,
                                int headsKV = 8) {
  fagen_fwd_problem p = FAGEN_FWD_PROBLEM_INIT;
  p.batch = batch;
  p.heads_q = headsQ;
  p.heads_kv = headsKV;
  p.seqlen_q = tokens;
  p.seqlen_k = seqlenK;
  p.head_dim_qk = p.head_dim_v = 128;
  p.dtype = FAGEN_DTYPE_FP16;
  p.causal = 1;
  fagen_fwd_problem_set_bshd_strides(&p);
  return p;
}

template <class T> T paramsOf(const FakeLaunch &launch) {
  T out;
  EXPECT_EQ(launch.params.size(), sizeof out);
  std::memcpy(&out, launch.params.data(), std::min(sizeof out, launch.params.size()));
  return out;
}

struct FakeDecodeTest : fagen::test::FakeBundleTest {
  Bundle initial() const override { return makeDecodeBundle(); }
  alignas(256) static inline char q[64], k[64], v[64], o[64];
  alignas(256) static inline float lse[16];
  alignas(256) static inline char workspace[1 << 20];
};

const char *kDecode = "fagen_fwd_fp16_hd128_causal_sm80decode_m16n64w4s3";

} // namespace

TEST_F(FakeDecodeTest, PlansSplitsFromTheShapeAndTheSms) {
  // 1 x 8 kv heads, 4 packed rows (one row block), 128k keys: 2048 key tiles; 8 CTAs without
  // splits, so 16 splits fill one CTA per SM of the fake's 132 (common/decode_split.h).
  fagen_fwd_problem p = decodeProblem(1, 1, 131072);
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), kDecode); // over the sm_90a forward of the same variant
  EXPECT_EQ(plan.pass, FAGEN_PASS_FORWARD);
  EXPECT_EQ(plan.grid[0], 16);
  EXPECT_EQ(plan.grid[1], 8);
  EXPECT_EQ(plan.grid[2], 1);
  EXPECT_EQ(plan.block[0], 128);
  EXPECT_EQ(plan.smem_bytes, 108800);
  EXPECT_NE(plan.post_function, nullptr); // NAME_combine
  EXPECT_EQ(plan.pre_function, nullptr);
  EXPECT_EQ(plan.pre_post_grid[0], 32); // 32 rows x 16 chunks x 8 state lanes / 128 threads
  EXPECT_EQ(plan.pre_post_block[0], 128);
  const fagen_decode_workspace w = fagen_decode_workspace_layout(16, 1, 32, 1, 128, 0);
  EXPECT_EQ(plan.workspace_bytes, w.total_bytes);
  EXPECT_EQ(plan.workspace_offsets[0], w.o_offset);
  EXPECT_EQ(plan.workspace_offsets[1], w.lse_offset);
  fagen_decode_params dp;
  std::memcpy(&dp, plan.params, sizeof dp);
  EXPECT_EQ(dp.num_splits, 16);
  EXPECT_EQ(dp.m_blocks, 1);
  EXPECT_EQ(dp.fwd.group_size, 4);
  EXPECT_EQ(dp.fwd.seqlen_q, 1);
  EXPECT_EQ(dp.o_partial, nullptr);

  // Batch 64 fills the GPU alone: one split, no workspace, no combine.
  p = decodeProblem(64, 1, 131072);
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(plan.grid[0], 1);
  EXPECT_EQ(plan.grid[2], 64);
  EXPECT_EQ(plan.workspace_bytes, 0u);
  // MQA: 64 query heads over one kv head at 4 tokens are 256 rows, 16 row blocks.
  p = decodeProblem(2, 4, 1000, 64, 1);
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  std::memcpy(&dp, plan.params, sizeof dp);
  EXPECT_EQ(dp.m_blocks, 16);
  // 32 CTAs without splits, 16 key tiles: 4 splits of 4 tiles (one CTA per SM; the shortest
  // a split takes).
  EXPECT_EQ(dp.num_splits, 4);
  EXPECT_EQ(plan.grid[0], 16 * 4);
  EXPECT_EQ(plan.grid[1], 1);
}

/// The decode bundle with kernel 4's split rule as `fagen tune` may record it: two CTAs per SM,
/// splits of one key tile at least.
struct FakeDecodeRuleTest : FakeDecodeTest {
  Bundle initial() const override {
    Bundle b = makeDecodeBundle();
    b.kernels[4].decodeCtasPerSm = 2;
    b.kernels[4].decodeMinTiles = 1;
    return b;
  }
};

TEST_F(FakeDecodeRuleTest, PlansSplitsWithTheKernelsRule) {
  // 8 CTAs without splits aim at 2 x 132 slots: 33 splits of the 2048 key tiles (16 with the
  // default rule).
  fagen_fwd_problem p = decodeProblem(1, 1, 131072);
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), kDecode);
  EXPECT_EQ(fagen_plan_decode_splits(&plan), 33);
  EXPECT_EQ(plan.grid[0], 33);
  EXPECT_EQ(plan.workspace_bytes, fagen_decode_workspace_layout(33, 1, 32, 1, 128, 0).total_bytes);
  // MQA, 32 CTAs, 16 key tiles: 8 splits of 2 tiles (4 of 4 with the default rule).
  p = decodeProblem(2, 4, 1000, 64, 1);
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(fagen_plan_decode_splits(&plan), 8);
}

TEST_F(FakeDecodeTest, TheSplitCountCanBeSet) {
  fagen_fwd_problem p = decodeProblem(1, 1, 131072); // planned: 16 splits
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(fagen_plan_decode_splits(&plan), 16);
  ASSERT_EQ(fagen_plan_set_decode_splits(&plan, 5), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(fagen_plan_decode_splits(&plan), 5);
  EXPECT_EQ(plan.grid[0], 5);
  const fagen_decode_workspace w = fagen_decode_workspace_layout(5, 1, 32, 1, 128, 0);
  EXPECT_EQ(plan.workspace_bytes, w.total_bytes);
  EXPECT_EQ(plan.workspace_offsets[1], w.lse_offset);
  fake().launchLog.clear();
  ASSERT_EQ(fagen_run_forward_with_workspace(&plan, q, k, v, o, lse, workspace,
                                             plan.workspace_bytes, nullptr, nullptr),
            FAGEN_OK)
      << fagen_last_error();
  ASSERT_EQ(fake().launchLog.size(), 2u);
  EXPECT_EQ(paramsOf<fagen_decode_params>(fake().launchLog[0]).num_splits, 5);
  EXPECT_EQ(paramsOf<fagen_merge_params>(fake().launchLog[1]).num_states, 5);
  // One split: no workspace, no combine.
  ASSERT_EQ(fagen_plan_set_decode_splits(&plan, 1), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(plan.workspace_bytes, 0u);
  EXPECT_EQ(plan.grid[0], 1);
  fake().launchLog.clear();
  ASSERT_EQ(fagen_run_forward(&plan, q, k, v, o, lse, nullptr), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(fake().launchLog.size(), 1u);
  // Out of range, and a plan of another kernel: refused, named.
  EXPECT_EQ(fagen_plan_set_decode_splits(&plan, 0), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fagen_last_error()).find("num_splits (0) must be in 1..128"),
            std::string::npos)
      << fagen_last_error();
  EXPECT_EQ(fagen_plan_set_decode_splits(&plan, 129), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fagen_plan_set_decode_splits(nullptr, 4), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fagen_plan_decode_splits(nullptr), 0);
  p = decodeProblem(1, 1, 131072);
  p.seqlen_q = 2048; // past the decode kernels' q_tokens: the forward kernel serves it
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(fagen_plan_decode_splits(&plan), 0);
  EXPECT_EQ(fagen_plan_set_decode_splits(&plan, 4), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fagen_last_error()).find("is not a split-KV decode kernel"),
            std::string::npos)
      << fagen_last_error();
}

TEST_F(FakeDecodeTest, RunLaunchesTheSplitsThenTheirCombine) {
  fagen_fwd_problem p = decodeProblem(1, 1, 131072);
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  ASSERT_LE(plan.workspace_bytes, sizeof workspace);
  fake().launchLog.clear();
  void *stream = reinterpret_cast<void *>(uintptr_t(0x7000));
  ASSERT_EQ(fagen_run_forward_with_workspace(&plan, q, k, v, o, lse, workspace,
                                             plan.workspace_bytes, nullptr, stream),
            FAGEN_OK)
      << fagen_last_error();
  ASSERT_EQ(fake().launchLog.size(), 2u);
  const FakeLaunch &main = fake().launchLog[0], &combine = fake().launchLog[1];
  EXPECT_EQ(main.function, kDecode);
  EXPECT_EQ(main.grid[0], 16u);
  EXPECT_EQ(main.grid[1], 8u);
  EXPECT_EQ(main.smem, 108800u);
  EXPECT_EQ(main.stream, stream);
  const auto dp = paramsOf<fagen_decode_params>(main);
  EXPECT_EQ(dp.num_splits, 16);
  EXPECT_EQ(dp.o_partial, reinterpret_cast<float *>(workspace + plan.workspace_offsets[0]));
  EXPECT_EQ(dp.lse_partial, reinterpret_cast<float *>(workspace + plan.workspace_offsets[1]));
  EXPECT_EQ(dp.fwd.q, q);
  EXPECT_EQ(dp.fwd.o, o);
  EXPECT_EQ(dp.fwd.lse, lse);
  EXPECT_EQ(combine.function, std::string(kDecode) + "_combine");
  // An sm_90 kernel: the combine starts as the splits' programmatic dependent (it waits for
  // their grid itself), the splits after whatever the stream held.
  EXPECT_FALSE(main.programmaticDependent);
  EXPECT_TRUE(combine.programmaticDependent);
  EXPECT_EQ(combine.grid[0], 32u); // FAGEN_COMBINE_STATE_LANES threads a chunk
  EXPECT_EQ(combine.block[0], 128u);
  EXPECT_EQ(combine.smem, 0u);
  EXPECT_EQ(combine.stream, stream);
  const auto mp = paramsOf<fagen_merge_params>(combine);
  EXPECT_EQ(mp.o_states, dp.o_partial);
  EXPECT_EQ(mp.lse_states, dp.lse_partial);
  EXPECT_EQ(mp.o, static_cast<void *>(o));
  EXPECT_EQ(mp.lse, lse);
  EXPECT_EQ(mp.num_states, 16);
  EXPECT_EQ(mp.batch, 1);
  EXPECT_EQ(mp.heads, 32);
  EXPECT_EQ(mp.seqlen, 1);
  // Partials [split, batch, heads_q, token, head dim] in floats; O as the call's (BSHD).
  const int64_t oStates[4] = {32 * 128, 32 * 128, 128, 128};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(mp.o_states_strides[i], oStates[i]) << i;
    EXPECT_EQ(mp.lse_states_strides[i], oStates[i] / 128) << i;
  }
  EXPECT_EQ(mp.o_strides[1], p.o_strides[1]);
  EXPECT_EQ(mp.o_strides[2], p.o_strides[2]);
  EXPECT_EQ(mp.lse_strides[1], 1); // LSE [batch, heads_q, seqlen_q]
  EXPECT_EQ(mp.lse_strides[2], 1);
}

TEST_F(FakeDecodeTest, WithoutAWorkspaceOneSplitWritesO) {
  fagen_fwd_problem p = decodeProblem(1, 2, 131072);
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  ASSERT_GT(plan.workspace_bytes, 0u);
  for (int withArgs = 0; withArgs < 2; ++withArgs) {
    fake().launchLog.clear();
    ASSERT_EQ(withArgs ? fagen_run_forward_with_workspace(&plan, q, k, v, o, lse, nullptr, 0,
                                                          nullptr, nullptr)
                       : fagen_run_forward(&plan, q, k, v, o, lse, nullptr),
              FAGEN_OK)
        << fagen_last_error();
    ASSERT_EQ(fake().launchLog.size(), 1u);
    EXPECT_EQ(fake().launchLog[0].grid[0], 1u); // 8 packed rows: one row block, one split
    const auto dp = paramsOf<fagen_decode_params>(fake().launchLog[0]);
    EXPECT_EQ(dp.num_splits, 1);
    EXPECT_EQ(dp.o_partial, nullptr);
    EXPECT_EQ(dp.lse_partial, nullptr);
  }
  // A plan of one split ignores a workspace.
  fagen_fwd_problem small = decodeProblem(1, 1, 100);
  ASSERT_EQ(fagen_plan_forward(bundle, &small, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(plan.workspace_bytes, 0u);
  fake().launchLog.clear();
  ASSERT_EQ(fagen_run_forward_with_workspace(&plan, q, k, v, o, lse, workspace, sizeof workspace,
                                             nullptr, nullptr),
            FAGEN_OK)
      << fagen_last_error();
  ASSERT_EQ(fake().launchLog.size(), 1u);
  EXPECT_EQ(paramsOf<fagen_decode_params>(fake().launchLog[0]).o_partial, nullptr);
}

TEST_F(FakeDecodeTest, ASmallOrMisalignedWorkspaceLaunchesNothing) {
  fagen_fwd_problem p = decodeProblem(1, 1, 131072);
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  fake().launchLog.clear();
  EXPECT_EQ(fagen_run_forward_with_workspace(&plan, q, k, v, o, lse, workspace,
                                             plan.workspace_bytes - 1, nullptr, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(fagen_last_error()),
            "fagen_run_forward_with_workspace: workspace_bytes (" +
                std::to_string(plan.workspace_bytes - 1) + ") is less than plan->workspace_bytes (" +
                std::to_string(plan.workspace_bytes) +
                "): the decode's 16 splits would write past it; allocate the plan's "
                "workspace_bytes, or pass no workspace (one split)");
  EXPECT_EQ(fagen_run_forward_with_workspace(&plan, q, k, v, o, lse, workspace + 4,
                                             plan.workspace_bytes, nullptr, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(),
               "fagen_run_forward_with_workspace: workspace is not 16-byte aligned");
  EXPECT_TRUE(fake().launchLog.empty());
}

TEST_F(FakeDecodeTest, MoreTokensThanTheKernelServesTakeTheForward) {
  fagen_fwd_problem p = decodeProblem(1, 5, 4096); // the decode kernel serves up to 4
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_fwd_fp16_d128_causal_sm90a");
  // Pinned, or with no forward beside it: the reason, and the spec key that lifts it.
  EXPECT_EQ(fagen_plan_forward_kernel(bundle, &p, 4, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  const std::string why = "kernel fagen_fwd_fp16_hd128_causal_sm80decode_m16n64w4s3 decodes up "
                          "to 4 query tokens per sequence (spec decode.q_tokens); the call has "
                          "seqlen_q 5: raise decode.q_tokens (at most 16), or add fwd to the "
                          "variant's passes";
  EXPECT_EQ(fagen_last_error(), why);
  Bundle onlyDecode = makeDecodeBundle();
  onlyDecode.kernels.erase(onlyDecode.kernels.begin(), onlyDecode.kernels.begin() + 4);
  load(onlyDecode);
  EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(fagen_last_error(), why);
  // Pinned within its tokens: what `fagen check` plans.
  p.seqlen_q = 4;
  fagen_fwd_problem_set_bshd_strides(&p);
  ASSERT_EQ(fagen_plan_forward_kernel(bundle, &p, 0, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), kDecode);
  // Where the decode kernel's arch does not run (sm_80): the forward serves the call.
  load(makeDecodeBundle());
  setenv("FAKE_CUDA_CC", "80", 1);
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_fwd_fp16_d128_causal_sm80");
}

TEST_F(FakeDecodeTest, TheFewestTokensThatHoldTheCall) {
  // Two decode kernels of one variant: q_tokens 16 (32-row tiles) and 1 (16-row tiles).
  Bundle b = makeDecodeBundle();
  KernelRecord wide = b.kernels[4];
  wide.name = "fagen_fwd_fp16_hd128_causal_sm80decode_m32n64w4s3";
  wide.qTokens = 16;
  wide.blockM = 32;
  b.kernels[4].qTokens = 1;
  b.kernels.push_back(wide);
  load(b);
  fagen_plan plan;
  fagen_fwd_problem p = decodeProblem(1, 1, 8192);
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), kDecode);
  p = decodeProblem(1, 2, 8192);
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), wide.name);
  fagen_decode_params dp;
  std::memcpy(&dp, plan.params, sizeof dp);
  EXPECT_EQ(dp.m_blocks, 1); // 8 rows in one 32-row block
}

TEST_F(FakeDecodeTest, ACombineGridPast2To31BlocksIsRefused) {
  Bundle b = makeDecodeBundle();
  b.kernels[4].qTokens = 16;
  b.kernels = {b.kernels[4]}; // no forward to take the call instead
  load(b);
  // 65535 x 65535 heads x 16 tokens: 6.9e10 rows of 16 chunks, 8 threads each: 6.9e10 blocks of
  // 128 threads.
  fagen_fwd_problem p = decodeProblem(65535, 16, 64, 65535, 65535);
  fagen_plan plan;
  EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_NE(std::string(fagen_last_error()).find("combine takes 8 threads per 8 columns of O "
                                                 "in a 1-D grid below 2^31 blocks"),
            std::string::npos)
      << fagen_last_error();
}

TEST_F(FakeDecodeTest, WindowSplitsOnlyTheVisibleKeys) {
  Bundle b = makeDecodeBundle();
  b.kernels[4].mask = Mask::Window;
  b.kernels[4].name = "fagen_fwd_fp16_hd128_window_sm80decode_m16n64w4s3";
  b.kernels.resize(5);
  load(b);
  fagen_fwd_problem p = decodeProblem(1, 1, 100000);
  p.causal = 0;
  p.mask = FAGEN_MASK_WINDOW;
  p.window_left = 1000;
  p.window_right = 0;
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  fagen_decode_params dp;
  std::memcpy(&dp, plan.params, sizeof dp);
  // Keys 98999..99999: tiles 1546..1562, 17 tiles; 4 splits of at least 4 tiles wanted, 4 of
  // 5 tiles without an empty one (not 16 splits of all 1563 tiles).
  EXPECT_EQ(dp.num_splits, 4);
  EXPECT_EQ(dp.fwd.window_left, 1000);
  EXPECT_EQ(plan.grid[0], 4);
}

TEST_F(FakeDecodeTest, MergeStatesPlansAndRunsADecodeCubinsMerge) {
  fagen_merge_problem m = FAGEN_MERGE_PROBLEM_INIT;
  m.num_states = 3;
  m.batch = 2;
  m.heads = 32;
  m.seqlen = 5;
  m.head_dim = 128;
  m.dtype = FAGEN_DTYPE_FP16;
  fagen_merge_problem_set_bshd_strides(&m);
  EXPECT_EQ(m.o_states_strides[0], 2 * 5 * 32 * 128);
  EXPECT_EQ(m.o_states_strides[2], 128); // head
  EXPECT_EQ(m.o_states_strides[3], 32 * 128); // row
  EXPECT_EQ(m.lse_states_strides[2], 5);
  EXPECT_EQ(m.lse_strides[0], 32 * 5);
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_merge_states(bundle, &m, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(plan.pass, FAGEN_PASS_MERGE);
  EXPECT_EQ(chosenKernel(plan), kDecode);
  EXPECT_EQ(plan.grid[0], 40); // 320 rows x 16 chunks / 128
  EXPECT_EQ(plan.block[0], 128);
  EXPECT_EQ(plan.workspace_bytes, 0u);
  fake().launchLog.clear();
  alignas(16) static char states[64];
  alignas(16) static float stateLse[8];
  void *stream = reinterpret_cast<void *>(uintptr_t(0x9000));
  ASSERT_EQ(fagen_run_merge_states(&plan, states, stateLse, o, nullptr, stream), FAGEN_OK)
      << fagen_last_error();
  ASSERT_EQ(fake().launchLog.size(), 1u);
  const FakeLaunch &launch = fake().launchLog[0];
  EXPECT_EQ(launch.function, std::string(kDecode) + "_merge");
  EXPECT_EQ(launch.grid[0], 40u);
  EXPECT_EQ(launch.stream, stream);
  const auto mp = paramsOf<fagen_merge_params>(launch);
  EXPECT_EQ(mp.o_states, static_cast<const void *>(states));
  EXPECT_EQ(mp.lse_states, stateLse);
  EXPECT_EQ(mp.lse, nullptr); // not written
  EXPECT_EQ(mp.num_states, 3);
  EXPECT_EQ(mp.o_states_strides[3], 32 * 128);
  EXPECT_EQ(mp.lse_strides[1], 5);
}

TEST_F(FakeDecodeTest, MergeStatesRefusesBadArguments) {
  auto problem = [] {
    fagen_merge_problem m = FAGEN_MERGE_PROBLEM_INIT;
    m.num_states = 2, m.batch = 1, m.heads = 4, m.seqlen = 3, m.head_dim = 64;
    m.dtype = FAGEN_DTYPE_BF16; // kernel 5: bf16 hd 64
    fagen_merge_problem_set_bshd_strides(&m);
    return m;
  };
  fagen_plan plan;
  fagen_merge_problem m = problem();
  ASSERT_EQ(fagen_plan_merge_states(bundle, &m, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_fwd_bf16_hd64_none_sm80decode_m16n64w4s6");
  auto refused = [&](fagen_merge_problem bad, fagen_status status, const std::string &why) {
    EXPECT_EQ(fagen_plan_merge_states(bundle, &bad, &plan), status) << why;
    EXPECT_EQ(fagen_last_error(), why);
    EXPECT_EQ(plan.struct_size, status == FAGEN_ERROR_ABI_MISMATCH ? plan.struct_size : 0u);
  };
  const std::string fn = "fagen_plan_merge_states: ";
  m = problem(), m.num_states = 0;
  refused(m, FAGEN_ERROR_INVALID_ARGUMENT,
          fn + "num_states, batch, heads and seqlen must be >= 1, got 0, 1, 4, 3");
  m = problem(), m.head_dim = 100;
  refused(m, FAGEN_ERROR_INVALID_ARGUMENT, fn + "head_dim must be a multiple of 8 in 32..256, got 100");
  m = problem(), m.dtype = fagen_dtype(7);
  refused(m, FAGEN_ERROR_INVALID_ARGUMENT,
          fn + "dtype must be FAGEN_DTYPE_FP16 or FAGEN_DTYPE_BF16, got 7");
  m = problem(), m.lse_states_strides[0] = -1;
  refused(m, FAGEN_ERROR_INVALID_ARGUMENT,
          fn + "lse_states_strides[0] (state) is negative: strides must be >= 0");
  m = problem(), m.o_states_strides[3] = 4;
  refused(m, FAGEN_ERROR_INVALID_ARGUMENT,
          fn + "o_states_strides[3] (row) is 4 elements, not a multiple of 8: every row must "
               "start 16-byte aligned");
  m = problem(), m.o_strides[2] = 0;
  refused(m, FAGEN_ERROR_INVALID_ARGUMENT,
          fn + "o_strides[2] (row) is 0 but the row extent is 3: outputs would overwrite each "
               "other");
  m = problem(), m.lse_strides[1] = 0;
  refused(m, FAGEN_ERROR_INVALID_ARGUMENT,
          fn + "lse_strides[1] (head) is 0: an output's strides must be > 0 where the extent "
               "is above 1");
  m = problem(), m.lse_strides[1] = 1; // heads on the rows' addresses
  EXPECT_EQ(fagen_plan_merge_states(bundle, &m, &plan), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fagen_last_error()).find("lse_strides overlap"), std::string::npos)
      << fagen_last_error();
  m = problem(), m.head_dim = 128; // bf16 hd 128: no decode kernel
  fagen_merge_problem_set_bshd_strides(&m);
  refused(m, FAGEN_ERROR_NOT_SUPPORTED,
          fn + "the bundle has no merge kernel for bf16 states of head dim 128: the merge comes "
               "with a decode kernel; add a variant with dtype bf16, head_dim 128 (head_dim_v) "
               "and passes [decode] to the spec and rebuild");
  m = problem(), m.struct_size = 8;
  EXPECT_EQ(fagen_plan_merge_states(bundle, &m, &plan), FAGEN_ERROR_ABI_MISMATCH);
  EXPECT_EQ(fagen_plan_merge_states(bundle, nullptr, &plan), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_plan_merge_states: problem is null");

  // Runs: a merge plan only through fagen_run_merge_states, pointers checked.
  m = problem();
  ASSERT_EQ(fagen_plan_merge_states(bundle, &m, &plan), FAGEN_OK) << fagen_last_error();
  alignas(16) static char states[64];
  alignas(16) static float stateLse[8];
  fake().launchLog.clear();
  EXPECT_EQ(fagen_run_merge_states(&plan, nullptr, stateLse, o, lse, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_merge_states: o_states is null");
  EXPECT_EQ(fagen_run_merge_states(&plan, states + 8, stateLse, o, lse, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_merge_states: o_states is not 16-byte aligned");
  EXPECT_EQ(fagen_run_merge_states(&plan, states, stateLse, o,
                                   reinterpret_cast<float *>(reinterpret_cast<char *>(lse) + 2),
                                   nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_merge_states: lse is not 4-byte aligned");
  EXPECT_EQ(fagen_run_forward(&plan, q, k, v, o, lse, nullptr), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(),
               "fagen_run_forward: the plan is a merge plan; make it with fagen_plan_forward");
  EXPECT_TRUE(fake().launchLog.empty());
  fagen_fwd_problem p = decodeProblem(1, 1, 4096);
  fagen_plan forward;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &forward), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(fagen_run_merge_states(&forward, states, stateLse, o, lse, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_merge_states: the plan is a forward plan; make it "
                                   "with fagen_plan_merge_states");
  fagen_plan empty;
  std::memset(&empty, 0, sizeof empty);
  EXPECT_EQ(fagen_run_merge_states(&empty, states, stateLse, o, lse, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_merge_states: the plan was not filled by a "
                                   "successful fagen_plan_merge_states");
  ASSERT_EQ(fagen_run_merge_states(&plan, states, stateLse, o, lse, nullptr), FAGEN_OK)
      << fagen_last_error();
  EXPECT_EQ(fake().launchLog.size(), 1u);
}
