//===- FakeDriverTest.cpp - plan and run against a fake libcuda -------------===//
//
// Exercises the runtime past the driver on a machine without a GPU: kernel choice per compute
// capability, the shared-memory limit, module caching, the parameter block and the launch.
// FAGEN_LIBCUDA points at libfagen_fake_cuda.so (set by main); the fake's device is steered
// with FAKE_CUDA_* environment variables, which it reads on every call.
//
//===----------------------------------------------------------------------===//
#include "fagen/fagen.h"
#include "FakeCuda.h"
#include "FakeBundleTest.h"
#include "templates/common/philox.h"
#include "tests/common/TestBundles.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <thread>
#include <tuple>
#include <vector>

using namespace fagen;
using fagen::test::fakeCubin;
using fagen::test::makeTestBundle;
using fagen::test::testKernel;
using fagen::test::testProblem;

namespace {

using fagen::test::fake;

/// The test bundle with its causal fp16 hd 128 forward (kernel 2) made a warp-specialized
/// sm_90a kernel on 128 x 80 tiles.
Bundle sm90wsTestBundle() {
  Bundle b = makeTestBundle();
  KernelRecord &k = b.kernels[2];
  k.name = "fagen_fwd_fp16_hd128_causal_sm90ws_m128n80w8s2";
  k.templ = "sm90ws";
  k.blockN = 80;
  k.threads = 384;
  return b;
}

struct FakeDriverTest : fagen::test::FakeBundleTest {
  Bundle initial() const override { return makeTestBundle(); }
};

} // namespace

TEST_F(FakeDriverTest, PlansTheExactArchKernelOnHopper) {
  fagen_fwd_problem p = testProblem(); // fp16 d128 causal: sm_80 and sm_90a kernels
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_fwd_fp16_d128_causal_sm90a");
  EXPECT_EQ(plan.bundle, bundle);
  EXPECT_EQ(plan.grid[0], 8); // ceil(1000 / 128)
  EXPECT_EQ(plan.grid[1], 16);
  EXPECT_EQ(plan.grid[2], 2);
  EXPECT_EQ(plan.block[0], 128);
  EXPECT_EQ(plan.block[1], 1);
  EXPECT_EQ(plan.smem_bytes, 49152);
  EXPECT_EQ(plan.workspace_bytes, 0u);
  EXPECT_EQ(fake().maxDynamicSmem, 49152);
  fagen_fwd_params params;
  std::memcpy(&params, plan.params, sizeof params);
  EXPECT_EQ(params.q, nullptr);
  EXPECT_EQ(params.q_row_stride, 16 * 128);
  EXPECT_EQ(params.k_row_stride, 4 * 128);
  EXPECT_EQ(params.o_batch_stride, 1000 * 16 * 128);
  EXPECT_EQ(params.group_size, 4);
  EXPECT_EQ(params.seqlen_k, 577);
  EXPECT_FLOAT_EQ(params.softmax_scale, 1.0f / std::sqrt(128.0f));
  EXPECT_FLOAT_EQ(params.scale_log2, params.softmax_scale * 1.44269504f);
}

TEST_F(FakeDriverTest, RunLaunchesWithThePointersFilledIn) {
  fagen_fwd_problem p = testProblem();
  p.softmax_scale = 0.5f;
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  alignas(16) static char q[16], k[16], v[16], o[16];
  static float lse[4];
  int before = fake().launches;
  void *stream = reinterpret_cast<void *>(0x1234);
  ASSERT_EQ(fagen_run_forward(&plan, q, k, v, o, lse, stream), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(fake().launches, before + 1);
  EXPECT_EQ(fake().function, "fagen_fwd_fp16_d128_causal_sm90a");
  EXPECT_EQ(fake().grid[0], 8u);
  EXPECT_EQ(fake().grid[1], 16u);
  EXPECT_EQ(fake().grid[2], 2u);
  EXPECT_EQ(fake().block[0], 128u);
  EXPECT_EQ(fake().smem, 49152u);
  EXPECT_EQ(fake().stream, stream);
  EXPECT_EQ(fake().params.q, q);
  EXPECT_EQ(fake().params.k, k);
  EXPECT_EQ(fake().params.v, v);
  EXPECT_EQ(fake().params.o, o);
  EXPECT_EQ(fake().params.lse, lse);
  EXPECT_EQ(fake().params.heads_kv, 4);
  EXPECT_FLOAT_EQ(fake().params.softmax_scale, 0.5f);
}

TEST_F(FakeDriverTest, TmaKernelsGetTheirTensorMaps) {
  // A warp-specialized sm_90a kernel takes Q, K and V as tensor maps encoded for each call.
  Bundle b = sm90wsTestBundle();
  const KernelRecord &k = b.kernels[2];
  load(b);
  fagen_fwd_problem p = testProblem(); // BSHD, batch 2, 16/4 heads, 1000 x 577, d 128
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), k.name);
  EXPECT_EQ(plan.block[0], 384);
  // Not persistent: one CTA per work tile (8 x 16 x 2), dispatched heaviest first by the hardware.
  EXPECT_EQ(plan.grid[0], 256);
  EXPECT_EQ(plan.grid[1], 1);
  EXPECT_EQ(plan.grid[2], 1);
  alignas(16) static char q[16], kk[16], v[16], o[16];
  static float lse[4];
  fake().tensorMaps.clear();
  ASSERT_EQ(fagen_run_forward(&plan, q, kk, v, o, lse, nullptr), FAGEN_OK) << fagen_last_error();
  ASSERT_EQ(fake().tensorMaps.size(), 3u);
  const FakeTensorMap &mq = fake().tensorMaps[0], &mk = fake().tensorMaps[1],
                      &mv = fake().tensorMaps[2];
  EXPECT_EQ(mq.address, q);
  EXPECT_EQ(mk.address, kk);
  EXPECT_EQ(mv.address, v);
  for (const FakeTensorMap *m : {&mq, &mk, &mv}) {
    EXPECT_EQ(m->rank, 4u);
    EXPECT_EQ(m->dataType, 1); // 16-bit elements
    EXPECT_EQ(m->swizzle, 3);  // 128 bytes
    EXPECT_EQ(m->oobFill, 0);  // zeros
    EXPECT_EQ(m->box[0], 64u); // 64 columns: one 128-byte swizzle row
    EXPECT_EQ(m->box[2], 1u);
    EXPECT_EQ(m->box[3], 1u);
  }
  // {head_dim, seqlen, heads, batch}, strides in bytes of rows, heads and batches (BSHD).
  EXPECT_EQ(std::vector<unsigned long long>(mq.dims, mq.dims + 4),
            (std::vector<unsigned long long>{128, 1000, 16, 2}));
  EXPECT_EQ(std::vector<unsigned long long>(mq.strides, mq.strides + 3),
            (std::vector<unsigned long long>{16 * 128 * 2, 128 * 2, 1000 * 16 * 128 * 2}));
  EXPECT_EQ(mq.box[1], 128u); // block_m
  EXPECT_EQ(std::vector<unsigned long long>(mk.dims, mk.dims + 4),
            (std::vector<unsigned long long>{128, 577, 4, 2}));
  EXPECT_EQ(mk.box[1], 80u); // block_n
  EXPECT_EQ(mv.box[1], 80u);
  // The maps travel as the kernel's second argument, in the order Q, K, V, O; O's is zeros
  // for a kernel that does not store through TMA.
  const FakeLaunch &launch = fake().launchLog.back();
  ASSERT_EQ(launch.tmaMaps.size(), 512u);
  for (int t = 0; t < 4; ++t) {
    const void *address;
    std::memcpy(&address, launch.tmaMaps.data() + 128 * t, sizeof address);
    EXPECT_EQ(address, (t == 0 ? (void *)q : t == 1 ? (void *)kk : t == 2 ? (void *)v : nullptr));
  }
  // A kernel that stores O with TMA gets O's map too: O's shape and strides, 64-row boxes (one
  // consumer warpgroup's rows), and its strides must meet TMA's rules.
  {
    Bundle withO = b;
    withO.kernels[2].tmaStoreO = true;
    load(withO);
    fagen_fwd_problem po = testProblem();
    fagen_plan planO;
    ASSERT_EQ(fagen_plan_forward(bundle, &po, &planO), FAGEN_OK) << fagen_last_error();
    fake().tensorMaps.clear();
    ASSERT_EQ(fagen_run_forward(&planO, q, kk, v, o, lse, nullptr), FAGEN_OK)
        << fagen_last_error();
    ASSERT_EQ(fake().tensorMaps.size(), 4u);
    const FakeTensorMap &mo = fake().tensorMaps[3];
    EXPECT_EQ(mo.address, o);
    EXPECT_EQ(std::vector<unsigned long long>(mo.dims, mo.dims + 4),
              (std::vector<unsigned long long>{128, 1000, 16, 2}));
    EXPECT_EQ(mo.box[0], 64u);
    EXPECT_EQ(mo.box[1], 64u);
    const void *address;
    std::memcpy(&address, fake().launchLog.back().tmaMaps.data() + 3 * 128, sizeof address);
    EXPECT_EQ(address, (void *)o);
    fagen_fwd_problem farO = testProblem();
    farO.o_strides[0] = int64_t(1) << 40;
    fagen_plan noneO;
    EXPECT_EQ(fagen_plan_forward(bundle, &farO, &noneO), FAGEN_ERROR_NOT_SUPPORTED);
    EXPECT_TRUE(std::strstr(fagen_last_error(), "stores o through TMA, whose strides must be "
                                                "below 2^39 elements: o_strides[0] is "
                                                "1099511627776") != nullptr)
        << fagen_last_error();
    load(b); // the plans of the bundle before are void now
    ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  }
  // An encoding the driver refuses fails the call, naming the tensor and the rule.
  setenv("FAKE_CUDA_TMA_ERROR", "1", 1);
  EXPECT_EQ(fagen_run_forward(&plan, q, kk, v, o, lse, nullptr), FAGEN_ERROR_INVALID_ARGUMENT);
  unsetenv("FAKE_CUDA_TMA_ERROR");
  EXPECT_TRUE(std::strstr(fagen_last_error(), "cuTensorMapEncodeTiled failed") != nullptr)
      << fagen_last_error();
  EXPECT_TRUE(std::strstr(fagen_last_error(),
                          "for tensor q of kernel fagen_fwd_fp16_hd128_causal_sm90ws_m128n80w8s2: "
                          "TMA needs 16-byte aligned pointers") != nullptr)
      << fagen_last_error();
  // TMA cannot broadcast: a zero batch stride of K over 2 batches leaves no kernel for the call.
  fagen_fwd_problem broadcast = testProblem();
  broadcast.k_strides[0] = 0;
  fagen_plan none;
  EXPECT_EQ(fagen_plan_forward(bundle, &broadcast, &none), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_TRUE(std::strstr(fagen_last_error(), "loads k through TMA, which cannot broadcast: "
                                              "k_strides[0] (batch) is 0 with 2 indices") !=
              nullptr)
      << fagen_last_error();
  // A persistent kernel (the planner's choice for even tiles and at hd 64): one CTA per SM of
  // the fake GPU's 132.
  Bundle small = b;
  small.kernels[2].persistent = true;
  small.kernels[2].headDimQK = small.kernels[2].headDimV = 64;
  small.kernels[2].variant = "v_fp16_64_causal";
  small.kernels[2].blockM = 192;
  load(small);
  p = testProblem(FAGEN_DTYPE_FP16, 64);
  fagen_plan persistent;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &persistent), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(persistent.grid[0], 132);
  EXPECT_EQ(persistent.grid[1], 1);
}

TEST_F(FakeDriverTest, TileCounterKernelsTakeAWorkspace) {
  // A sm90ws kernel of uneven (causal) tiles with a tile counter: the plan asks for a 4-byte
  // forward workspace; with one, one CTA per SM (132 on the fake GPU) takes tiles from the
  // counter, which the runtime zeroes on the call's stream first; without, one CTA per tile.
  Bundle b = sm90wsTestBundle();
  b.kernels[2].tileCounter = true;
  load(b);
  fagen_fwd_problem p = testProblem(); // 8 query tiles x 16 heads x 2 batches = 256 tiles
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(plan.workspace_bytes, 4u);
  EXPECT_EQ(plan.grid[0], 132);
  alignas(16) static char q[16], kk[16], v[16], o[16];
  alignas(16) static int32_t workspace[4];
  static float lse[4];
  void *stream = reinterpret_cast<void *>(uintptr_t(0x5000));
  // One call of plan `pl` with workspace `ws` (fagen_run_forward when ws is null), then the
  // grid it launched and the counter the kernel got.
  auto expectLaunch = [&](fagen_plan &pl, void *ws, unsigned grid, void *counter) {
    ASSERT_EQ(ws ? fagen_run_forward_with_workspace(&pl, q, kk, v, o, lse, ws, 4, nullptr, nullptr)
                 : fagen_run_forward(&pl, q, kk, v, o, lse, nullptr),
              FAGEN_OK)
        << fagen_last_error();
    EXPECT_EQ(fake().grid[0], grid);
    EXPECT_EQ(fake().params.tile_counter, counter);
  };
  fake().memsetLog.clear();
  ASSERT_EQ(fagen_run_forward_with_workspace(&plan, q, kk, v, o, lse, workspace, 4, nullptr, stream),
            FAGEN_OK)
      << fagen_last_error();
  ASSERT_EQ(fake().memsetLog.size(), 1u);
  const FakeMemset &m = fake().memsetLog[0];
  EXPECT_EQ(m.dst, reinterpret_cast<unsigned long long>(workspace));
  EXPECT_EQ(m.value, 0u);
  EXPECT_EQ(m.count, 1u);
  EXPECT_EQ(m.stream, stream);
  EXPECT_EQ(m.launchesBefore, fake().launches.load() - 1); // right before the launch
  EXPECT_EQ(fake().grid[0], 132u);
  EXPECT_EQ(fake().stream, stream);
  EXPECT_EQ(fake().params.tile_counter, workspace);
  EXPECT_EQ(fake().params.work_tiles, 256);
  // Without a workspace (any of the three run calls): one CTA per tile, no counter, no memset.
  expectLaunch(plan, nullptr, 256u, nullptr);
  ASSERT_EQ(fagen_run_forward_with_workspace(&plan, q, kk, v, o, lse, nullptr, 0, nullptr, nullptr),
            FAGEN_OK)
      << fagen_last_error();
  EXPECT_EQ(fake().grid[0], 256u);
  EXPECT_EQ(fake().params.tile_counter, nullptr);
  EXPECT_EQ(fake().memsetLog.size(), 1u);
  // A misaligned workspace is named; a failed memset is a CUDA error that says what it zeroed.
  EXPECT_EQ(fagen_run_forward_with_workspace(&plan, q, kk, v, o, lse,
                                             reinterpret_cast<char *>(workspace) + 2, 4,
                                             nullptr, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(),
               "fagen_run_forward_with_workspace: workspace is not 4-byte aligned");
  // A workspace smaller than the plan's is refused, nothing zeroed or launched.
  const size_t memsets = fake().memsetLog.size(), launched = fake().launchLog.size();
  EXPECT_EQ(fagen_run_forward_with_workspace(&plan, q, kk, v, o, lse, workspace, 3, nullptr,
                                             nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(),
               "fagen_run_forward_with_workspace: workspace_bytes (3) is less than "
               "plan->workspace_bytes (4): allocate the plan's workspace_bytes, or pass no "
               "workspace");
  EXPECT_EQ(fake().memsetLog.size(), memsets);
  EXPECT_EQ(fake().launchLog.size(), launched);
  setenv("FAKE_CUDA_MEMSET_ERROR", "1", 1);
  EXPECT_EQ(fagen_run_forward_with_workspace(&plan, q, kk, v, o, lse, workspace, 4, nullptr,
                                             nullptr),
            FAGEN_ERROR_CUDA);
  unsetenv("FAKE_CUDA_MEMSET_ERROR");
  EXPECT_TRUE(std::strncmp(fagen_last_error(), "fagen_run_forward_with_workspace: ", 34) == 0 &&
              std::strstr(fagen_last_error(), "cuMemsetD32Async") != nullptr &&
              std::strstr(fagen_last_error(), "zeroing the tile counter in the workspace of "
                                              "kernel fagen_fwd_fp16_hd128_causal_sm90ws_"
                                              "m128n80w8s2") != nullptr)
      << fagen_last_error();
  // Any CTA may take any number of tiles (the kernel keeps its K/V count modulo 2 stages): a
  // long call is limited only by its tiles, not by tiles x key tiles per CTA.
  fagen_fwd_problem longCall = testProblem();
  longCall.batch = 1;
  longCall.seqlen_q = longCall.seqlen_k = 1 << 20;
  fagen_fwd_problem_set_bshd_strides(&longCall);
  fagen_plan longPlan;
  ASSERT_EQ(fagen_plan_forward(bundle, &longCall, &longPlan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(longPlan.grid[0], 132);
  // A persistent kernel with a counter (hd 64): one CTA per SM either way; without a
  // workspace the static deal (no counter).
  Bundle persistent = b;
  persistent.kernels[2].persistent = true;
  load(persistent);
  fagen_plan both;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &both), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(both.workspace_bytes, 4u);
  EXPECT_EQ(both.grid[0], 132);
  expectLaunch(both, nullptr, 132u, nullptr);
  expectLaunch(both, workspace, 132u, workspace);
  // A kernel without a counter reports no workspace and ignores one.
  Bundle plain = b;
  plain.kernels[2].tileCounter = false;
  load(plain);
  fagen_plan noCounter;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &noCounter), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(noCounter.workspace_bytes, 0u);
  EXPECT_EQ(noCounter.grid[0], 256);
  fake().memsetLog.clear();
  ASSERT_EQ(fagen_run_forward_with_workspace(&noCounter, q, kk, v, o, lse, workspace, 4, nullptr,
                                             nullptr),
            FAGEN_OK)
      << fagen_last_error();
  EXPECT_TRUE(fake().memsetLog.empty());
  EXPECT_EQ(fake().params.tile_counter, nullptr);
  EXPECT_EQ(fake().params.work_tiles, 0);
}

TEST_F(FakeDriverTest, RunNamesTheBadPointer) {
  fagen_fwd_problem p = testProblem();
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  alignas(16) static char buf[64];
  static float lse[4];
  EXPECT_EQ(fagen_run_forward(&plan, buf, buf + 8, buf, buf, lse, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_forward: k is not 16-byte aligned");
  EXPECT_EQ(fagen_run_forward(&plan, buf, buf, buf, nullptr, lse, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_forward: o is null");
  EXPECT_EQ(fagen_run_forward(&plan, buf, buf, buf, buf, nullptr, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_forward: lse is null");

  setenv("FAKE_CUDA_LAUNCH_ERROR", "701", 1);
  EXPECT_EQ(fagen_run_forward(&plan, buf, buf, buf, buf, lse, nullptr), FAGEN_ERROR_CUDA);
  EXPECT_EQ(std::string(fagen_last_error()),
            "cuLaunchKernel failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701): fake error text "
            "for kernel fagen_fwd_fp16_d128_causal_sm90a");
}

TEST_F(FakeDriverTest, AmpereClassGpusGetThePortableKernel) {
  setenv("FAKE_CUDA_CC", "86", 1);
  fagen_fwd_problem p = testProblem();
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_fwd_fp16_d128_causal_sm80");
}

TEST_F(FakeDriverTest, PrefersExactPlainArchOverOlderMinor) {
  Bundle b = makeTestBundle();
  b.archs = {"sm_80", "sm_86"};
  b.kernels[2].arch = "sm_86";
  b.kernels[2].name = "fagen_fwd_fp16_d128_causal_sm86";
  load(b);
  setenv("FAKE_CUDA_CC", "86", 1);
  fagen_fwd_problem p = testProblem();
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_fwd_fp16_d128_causal_sm86");
}

TEST_F(FakeDriverTest, NoKernelForThisGpu) {
  setenv("FAKE_CUDA_CC", "100", 1);
  fagen_fwd_problem p = testProblem();
  fagen_plan plan;
  EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_ERROR_NO_KERNEL_FOR_GPU);
  EXPECT_STREQ(fagen_last_error(), "bundle has kernels for sm_80, sm_90a for this call; this GPU "
                                   "(Fake H200) is sm_100: rebuild with --arch sm_100 (or "
                                   "sm_100a)");
  setenv("FAKE_CUDA_CC", "91", 1); // sm_90a is exact-only; no plain sm_90 kernel
  EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_ERROR_NO_KERNEL_FOR_GPU);
}

TEST_F(FakeDriverTest, SharedMemoryLimit) {
  setenv("FAKE_CUDA_SMEM", "40000", 1);
  fagen_fwd_problem p = testProblem();
  fagen_plan plan;
  EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_ERROR_NO_KERNEL_FOR_GPU);
  std::string error = fagen_last_error();
  EXPECT_NE(error.find("needs 49152 bytes of shared memory per block; this GPU (Fake H200) is "
                       "sm_90 and allows 40000: rebuild with --arch sm_90"),
            std::string::npos)
      << error;
}

TEST_F(FakeDriverTest, ModulesLoadOncePerContextAndUnloadWithTheBundle) {
  int loads = fake().moduleLoads, unloads = fake().moduleUnloads;
  setenv("FAKE_CUDA_CC", "80", 1);
  fagen_plan plan;
  for (fagen_dtype dtype : {FAGEN_DTYPE_FP16, FAGEN_DTYPE_BF16, FAGEN_DTYPE_FP16}) {
    fagen_fwd_problem p = testProblem(dtype);
    ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  }
  EXPECT_EQ(fake().moduleLoads, loads + 1); // both sm_80 kernels live in cubin 0
  fagen_bundle_destroy(bundle);
  bundle = nullptr;
  EXPECT_EQ(fake().moduleUnloads, unloads + 1);
}

TEST_F(FakeDriverTest, ConcurrentPlansShareOneModule) {
  int loads = fake().moduleLoads;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        fagen_fwd_problem p = testProblem();
        fagen_plan plan;
        if (fagen_plan_forward(bundle, &p, &plan) != FAGEN_OK)
          failures++;
      }
    });
  for (std::thread &t : threads)
    t.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(fake().moduleLoads, loads + 1);
}

/// An entry point of the fake driver, from the instance the runtime opened.
template <class Fn> Fn fakeEntry(const char *name) {
  void *lib = dlopen(std::getenv("FAGEN_LIBCUDA"), RTLD_NOW | RTLD_LOCAL);
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

TEST_F(FakeDriverTest, ModuleCacheNoticesAResetContext) {
  fagen_fwd_problem p = testProblem();
  fagen_plan before, after;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &before), FAGEN_OK) << fagen_last_error();
  const int loads = fake().moduleLoads;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &after), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(fake().moduleLoads, loads); // cached for the context
  // The device is reset: a new primary context at the same address, with another id.
  fakeEntry<void (*)(int)>("fake_cuda_reset_context")(0);
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &after), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(fake().moduleLoads, loads + 1); // not the dead context's module
  EXPECT_EQ(after.context, before.context);
  EXPECT_NE(after.context_id, before.context_id);
  alignas(16) static char buf[16];
  static float lse[4];
  EXPECT_EQ(fagen_run_forward(&before, buf, buf, buf, buf, lse, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(),
               "fagen_run_forward: the plan was made on device 0 in a context that is not "
               "current (or no longer exists; a device reset destroys it): plan again in the "
               "current context");
  EXPECT_EQ(fagen_run_forward(&after, buf, buf, buf, buf, lse, nullptr), FAGEN_OK)
      << fagen_last_error();
  // The dead context's module went with it: only the live one is unloaded.
  const int unloads = fake().moduleUnloads;
  fagen_bundle_destroy(bundle);
  bundle = nullptr;
  EXPECT_EQ(fake().moduleUnloads, unloads + 1);
}

TEST_F(FakeDriverTest, RunWithAnotherDeviceCurrentNamesBoth) {
  setenv("FAKE_CUDA_DEVICES", "2", 1);
  fagen_fwd_problem p = testProblem();
  fagen_plan plan0, plan1;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan0), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(plan0.device, 0);
  auto getCurrent = fakeEntry<int (*)(void **)>("cuCtxGetCurrent");
  auto setCurrent = fakeEntry<int (*)(void *)>("cuCtxSetCurrent");
  auto retain = fakeEntry<int (*)(void **, int)>("cuDevicePrimaryCtxRetain");
  void *ctx0 = nullptr, *ctx1 = nullptr;
  getCurrent(&ctx0);
  ASSERT_EQ(retain(&ctx1, 1), 0);
  setCurrent(ctx1);
  alignas(16) static char buf[16];
  static float lse[4];
  const size_t launches = fake().launchLog.size();
  EXPECT_EQ(fagen_run_forward(&plan0, buf, buf, buf, buf, lse, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(),
               "fagen_run_forward: the plan was made on device 0 but device 1 is current: make "
               "device 0's context current (cudaSetDevice(0)), or plan again with device 1 "
               "current");
  EXPECT_EQ(fake().launchLog.size(), launches);
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan1), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(plan1.device, 1);
  EXPECT_EQ(fagen_run_forward(&plan1, buf, buf, buf, buf, lse, nullptr), FAGEN_OK)
      << fagen_last_error();
  setCurrent(nullptr);
  EXPECT_EQ(fagen_run_forward(&plan1, buf, buf, buf, buf, lse, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(),
               "fagen_run_forward: the plan was made on device 1 and this thread has no current "
               "CUDA context: make device 1's context current (cudaSetDevice(1)) before the run");
  setCurrent(ctx0);
  unsetenv("FAKE_CUDA_DEVICES");
}

TEST_F(FakeDriverTest, PlansOfADestroyedBundleAreRefused) {
  fagen_fwd_problem p = testProblem();
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  fagen_bundle_destroy(bundle);
  bundle = nullptr;
  // The next bundle may well be allocated where the old one was: the id tells them apart.
  load(makeTestBundle());
  const size_t launches = fake().launchLog.size();
  alignas(16) static char buf[16];
  static float lse[4];
  EXPECT_EQ(fagen_run_forward(&plan, buf, buf, buf, buf, lse, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(),
               "fagen_run_forward: the plan's bundle was destroyed (fagen_bundle_destroy): a "
               "plan lives only as long as its bundle; load the bundle again and plan again");
  EXPECT_EQ(fake().launchLog.size(), launches);
}

TEST_F(FakeDriverTest, CubinWithoutCodeForThisGpu) {
  Bundle b = makeTestBundle();
  b.cubins[1] = fakeCubin("nobinary");
  load(b);
  fagen_fwd_problem p = testProblem();
  fagen_plan plan;
  EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_ERROR_NO_KERNEL_FOR_GPU);
  EXPECT_EQ(std::string(fagen_last_error()).find("cuModuleLoadData failed: "
                                                 "CUDA_ERROR_NO_BINARY_FOR_GPU (209)"),
            0u)
      << fagen_last_error();
}

TEST_F(FakeDriverTest, KernelMissingFromItsCubin) {
  Bundle b = makeTestBundle();
  b.kernels[2].name = "fagen_missing_sm90a";
  load(b);
  fagen_fwd_problem p = testProblem();
  fagen_plan plan;
  EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_ERROR_BUNDLE_INVALID);
  EXPECT_NE(std::string(fagen_last_error()).find("cubin section 2 has no kernel named "
                                                 "fagen_missing_sm90a"),
            std::string::npos)
      << fagen_last_error();
}

TEST_F(FakeDriverTest, PlanASpecificKernel) {
  fagen_fwd_problem p = testProblem(); // fp16 d128 causal
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward_kernel(bundle, &p, 2, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_fwd_fp16_d128_causal_sm90a");
  setenv("FAKE_CUDA_CC", "86", 1);
  ASSERT_EQ(fagen_plan_forward_kernel(bundle, &p, 1, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_fwd_fp16_d128_causal_sm80");
  EXPECT_EQ(plan.grid[0], 8);
  EXPECT_EQ(fagen_plan_forward_kernel(bundle, &p, 0, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_STREQ(fagen_last_error(), "kernel fagen_fwd_bf16_d128_causal_sm80 is a fwd kernel for "
                                   "bf16 head_dim 128/128 mask causal; the call is a forward "
                                   "for fp16 head_dim 128/128 mask causal");
  EXPECT_EQ(fagen_plan_forward_kernel(bundle, &p, 2, &plan), FAGEN_ERROR_NO_KERNEL_FOR_GPU);
  EXPECT_STREQ(fagen_last_error(), "bundle has kernels for sm_90a for this call; this GPU (Fake "
                                   "H200) is sm_86: rebuild with --arch sm_86");
  EXPECT_EQ(fagen_plan_forward_kernel(bundle, &p, 4, &plan), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_plan_forward_kernel: kernel_index 4 is out of range "
                                   "[0, 4)");
  EXPECT_EQ(fagen_plan_forward_kernel(nullptr, &p, 0, &plan), FAGEN_ERROR_INVALID_ARGUMENT);
}

int main(int argc, char **argv) {
  setenv("FAGEN_LIBCUDA", FAGEN_FAKE_CUDA_PATH, /*overwrite=*/0);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

TEST_F(FakeDriverTest, TunedSeqlenRangesDispatchByShape) {
  // Two tuned kernels of one variant (1..1024 and 1025..4096) beside the untuned default:
  // each call takes the narrowest range that holds max(seqlen_q, seqlen_k).
  Bundle b = makeTestBundle();
  KernelRecord shortSeq = b.kernels[2], midSeq = b.kernels[2];
  shortSeq.name = "fagen_fwd_fp16_d128_causal_sm90a_short";
  shortSeq.seqlenMin = 1;
  shortSeq.seqlenMax = 1024;
  midSeq.name = "fagen_fwd_fp16_d128_causal_sm90a_mid";
  midSeq.seqlenMin = 1025;
  midSeq.seqlenMax = 4096;
  b.kernels.push_back(shortSeq);
  b.kernels.push_back(midSeq);
  load(b);
  setenv("FAKE_CUDA_CC", "90", 1);
  for (auto [seqlenQ, seqlenK, want] :
       {std::tuple<int, int, const char *>{1, 1000, "fagen_fwd_fp16_d128_causal_sm90a_short"},
        {1024, 1024, "fagen_fwd_fp16_d128_causal_sm90a_short"},
        {1, 1025, "fagen_fwd_fp16_d128_causal_sm90a_mid"},
        {4096, 2000, "fagen_fwd_fp16_d128_causal_sm90a_mid"},
        {4097, 4097, "fagen_fwd_fp16_d128_causal_sm90a"}}) {
    fagen_fwd_problem p = testProblem();
    p.seqlen_q = seqlenQ;
    p.seqlen_k = seqlenK;
    fagen_fwd_problem_set_bshd_strides(&p);
    fagen_plan plan;
    ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
    EXPECT_EQ(chosenKernel(plan), want) << seqlenQ << "x" << seqlenK;
  }
}

//===--- Variants and the backward pass -----------------------------------===//

namespace {

using fagen::test::makeVariantBundle;

struct FakeVariantTest : FakeDriverTest {
  void SetUp() override {
    FakeDriverTest::SetUp();
    fake().bwdParamsBytes = sizeof(fagen_bwd_params);
    load(makeVariantBundle());
  }

  /// The launches since `from`, with their parameter blocks.
  std::vector<FakeLaunch> launchesSince(size_t from) {
    const std::vector<FakeLaunch> &log = fake().launchLog;
    return std::vector<FakeLaunch>(log.begin() + std::min(from, log.size()), log.end());
  }

  /// The variant bundle for sm_90a with its kernel `index` (`sm80Name`) made the sm90ws
  /// backward `wsName` (64 x 128 tiles, 384 threads), as a sm_90a build plans hd 128.
  static Bundle sm90wsBackwardBundle(size_t index, const std::string &sm80Name,
                                     const std::string &wsName) {
    Bundle b = makeVariantBundle();
    b.archs = {"sm_90a"};
    for (KernelRecord &k : b.kernels)
      k.arch = "sm_90a";
    KernelRecord &k = b.kernels[index];
    EXPECT_EQ(k.name, sm80Name);
    k.name = wsName;
    k.templ = "sm90ws";
    k.blockM = 64;
    k.blockN = 128;
    k.threads = 384;
    k.smemBytes = 198696;
    return b;
  }

  template <typename Params> static Params paramsOf(const FakeLaunch &l) {
    Params p;
    EXPECT_EQ(l.params.size(), sizeof p) << l.function;
    std::memcpy(&p, l.params.data(), std::min(sizeof p, l.params.size()));
    return p;
  }
};

/// bf16 hd64, window (top-left) + softcap + dropout + varlen: kernel 3 forward, 0 backward.
fagen_fwd_problem windowProblem() {
  fagen_fwd_problem p = testProblem(FAGEN_DTYPE_BF16, 64, 0);
  p.batch = 3;
  p.seqlen_q = 700; // the longest sequence
  p.seqlen_k = 900;
  p.mask = FAGEN_MASK_WINDOW;
  p.mask_align = FAGEN_MASK_ALIGN_TOP_LEFT;
  p.window_left = 256;
  p.window_right = -1;
  p.score_mod = FAGEN_SCORE_MOD_SOFTCAP;
  p.softcap = 50;
  p.dropout_p = 0.125f;
  p.varlen = 1;
  p.total_q = 1500;
  p.total_k = 2000;
  fagen_fwd_problem_set_bshd_strides(&p);
  return p;
}

} // namespace

TEST_F(FakeVariantTest, ForwardFillsEveryVariantField) {
  fagen_fwd_problem p = windowProblem();
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_fwd_bf16_hd64_windowtl_softcap_drop_varlen_sm80");
  EXPECT_EQ(plan.pass, FAGEN_PASS_FORWARD);
  EXPECT_EQ(plan.run_args, FAGEN_RUN_ARG_CU_SEQLENS | FAGEN_RUN_ARG_DROPOUT_SEED);
  EXPECT_EQ(plan.workspace_bytes, 0u);
  EXPECT_EQ(plan.grid[0], 6); // ceil(700 / 128): the longest sequence
  EXPECT_EQ(plan.grid[1], 16);
  EXPECT_EQ(plan.grid[2], 3);

  alignas(16) static char q[16], k[16], v[16], o[16];
  static float lse[4];
  static int32_t cuQ[4] = {0, 700, 1000, 1500}, cuK[4] = {0, 900, 1100, 2000};
  fagen_run_args args = FAGEN_RUN_ARGS_INIT;
  args.cu_seqlens_q = cuQ;
  args.cu_seqlens_k = cuK;
  args.dropout_seed = 0x123456789abcdefull;
  args.dropout_offset = 42;
  args.alibi_slopes = lse; // not read by this variant: left out of the block
  EXPECT_EQ(fagen_run_forward(&plan, q, k, v, o, lse, nullptr), FAGEN_ERROR_INVALID_ARGUMENT);
  size_t before = fake().launchLog.size();
  ASSERT_EQ(fagen_run_forward_with_args(&plan, q, k, v, o, lse, &args, nullptr), FAGEN_OK)
      << fagen_last_error();
  std::vector<FakeLaunch> launches = launchesSince(before);
  ASSERT_EQ(launches.size(), 1u);
  fagen_fwd_params fp = paramsOf<fagen_fwd_params>(launches[0]);
  EXPECT_EQ(fp.q, q);
  EXPECT_EQ(fp.lse, lse);
  EXPECT_EQ(fp.seqlen_q, 700);
  EXPECT_EQ(fp.seqlen_k, 900);
  EXPECT_EQ(fp.q_batch_stride, 0); // packed
  EXPECT_EQ(fp.q_row_stride, 16 * 64);
  EXPECT_EQ(fp.lse_batch_stride, 0); // LSE [heads_q, total_q]
  EXPECT_EQ(fp.lse_head_stride, 1500);
  EXPECT_EQ(fp.cu_seqlens_q, cuQ);
  EXPECT_EQ(fp.cu_seqlens_k, cuK);
  EXPECT_EQ(fp.window_left, 256);
  EXPECT_EQ(fp.window_right, -1);
  EXPECT_FLOAT_EQ(fp.softcap, 50.0f);
  EXPECT_FLOAT_EQ(fp.softmax_scale, 0.125f); // 1/sqrt(64)
  EXPECT_FLOAT_EQ(fp.scale_log2, 0.125f * 1.44269504f);
  EXPECT_FLOAT_EQ(fp.dropout_p, 0.125f);
  EXPECT_EQ(fp.dropout_threshold, fagen::dropout_threshold(0.125f));
  EXPECT_EQ(fp.dropout_threshold, 32u); // p in 1/256 steps (philox.h)
  EXPECT_FLOAT_EQ(fp.dropout_rescale, fagen::dropout_rescale(fp.dropout_threshold));
  EXPECT_FLOAT_EQ(fp.dropout_rescale, 1.0f / 0.875f);
  EXPECT_EQ(fp.dropout_seed, 0x123456789abcdefull);
  EXPECT_EQ(fp.dropout_offset, 42u);
  EXPECT_EQ(fp.alibi_slopes, nullptr);
  EXPECT_EQ(fp.block_mask, nullptr);

  // cu_seqlens are required.
  args.cu_seqlens_k = nullptr;
  EXPECT_EQ(fagen_run_forward_with_args(&plan, q, k, v, o, lse, &args, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_forward_with_args: args->cu_seqlens_k is null");
}

TEST_F(FakeVariantTest, DenseCallsLeaveTheVariantFieldsZero) {
  fagen_fwd_problem p = testProblem(FAGEN_DTYPE_FP16, 128, 1); // ABI 1 fields only
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_fwd_fp16_hd128_causal_sm80");
  EXPECT_EQ(plan.run_args, 0u);
  fagen_fwd_params fp;
  std::memcpy(&fp, plan.params, sizeof fp);
  EXPECT_EQ(fp.lse_batch_stride, 16 * 1000);
  EXPECT_EQ(fp.lse_head_stride, 1000);
  EXPECT_EQ(fp.window_left, 0);
  EXPECT_EQ(fp.window_right, 0);
  EXPECT_EQ(fp.softcap, 0.0f);
  EXPECT_EQ(fp.dropout_p, 0.0f);
  EXPECT_EQ(fp.dropout_rescale, 0.0f);
  EXPECT_EQ(fp.dropout_threshold, 0u);
  EXPECT_EQ(fp.cu_seqlens_q, nullptr);
  // mask = FAGEN_MASK_CAUSAL says the same as causal = 1.
  p.causal = 0;
  p.mask = FAGEN_MASK_CAUSAL;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_fwd_fp16_hd128_causal_sm80");
}

TEST_F(FakeVariantTest, AlibiAndRuntimeBlockMask) {
  fagen_fwd_problem p = testProblem(FAGEN_DTYPE_FP16, 128, 0);
  p.score_mod = FAGEN_SCORE_MOD_ALIBI;
  p.sparsity = FAGEN_SPARSITY_RUNTIME;
  p.sparse_block = 128;
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_fwd_fp16_hd128_none_alibi_bsr128_sm80");
  EXPECT_EQ(plan.run_args, FAGEN_RUN_ARG_ALIBI_SLOPES | FAGEN_RUN_ARG_BLOCK_MASK);
  alignas(16) static char buf[16];
  static float slopes[16], lse[4];
  static uint8_t mask[2 * 16 * 8 * 5];
  fagen_run_args args = FAGEN_RUN_ARGS_INIT;
  args.block_mask = mask;
  args.block_mask_batch_stride = 16 * 8 * 5;
  args.block_mask_head_stride = 8 * 5;
  args.block_mask_row_stride = 5;
  EXPECT_EQ(fagen_run_forward_with_args(&plan, buf, buf, buf, buf, lse, &args, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_forward_with_args: args->alibi_slopes is null");
  args.alibi_slopes = slopes;
  size_t before = fake().launchLog.size();
  ASSERT_EQ(fagen_run_forward_with_args(&plan, buf, buf, buf, buf, lse, &args, nullptr), FAGEN_OK)
      << fagen_last_error();
  fagen_fwd_params fp = paramsOf<fagen_fwd_params>(launchesSince(before).at(0));
  EXPECT_EQ(fp.alibi_slopes, slopes);
  EXPECT_EQ(fp.alibi_batch_stride, 0);
  EXPECT_EQ(fp.block_mask, mask);
  EXPECT_EQ(fp.block_mask_batch_stride, 16 * 8 * 5);
  EXPECT_EQ(fp.block_mask_head_stride, 8 * 5);
  EXPECT_EQ(fp.block_mask_row_stride, 5);
  EXPECT_EQ(fp.dropout_seed, 0u);
}

TEST_F(FakeVariantTest, StaticLayoutsAreChosenByHash) {
  fagen_fwd_problem p = testProblem(FAGEN_DTYPE_FP16, 128, 1);
  p.sparsity = FAGEN_SPARSITY_STATIC;
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_fwd_fp16_hd128_causal_bs128_0123abcd_sm80");
  EXPECT_EQ(plan.run_args, 0u); // the layout is in the cubin

  // A second layout for the same variant: the call must say which.
  Bundle b = makeVariantBundle();
  KernelRecord other = b.kernels[5];
  other.name = "fagen_fwd_fp16_hd128_causal_bs128_fedcba98_sm80";
  other.sparseHash = "fedcba98";
  b.kernels.push_back(other);
  load(b);
  EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_STREQ(fagen_last_error(), "the bundle has 2 static block layouts for fp16 head_dim "
                                   "128/128 mask causal block_sparse static (sparse_hash "
                                   "0123abcd, fedcba98): set the problem's sparse_hash to the "
                                   "layout the call means");
  p.sparse_hash = 0xfedcba98;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_fwd_fp16_hd128_causal_bs128_fedcba98_sm80");
  p.sparse_block = 64; // the caller's expectation of the block size is checked too
  EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_ERROR_NOT_SUPPORTED);
}

TEST_F(FakeVariantTest, BackwardLaunchesPreMainPostInOrder) {
  fagen_fwd_problem p = testProblem(FAGEN_DTYPE_FP16, 128, 1); // B2 Hq16 Hkv4 Sq1000 Sk577
  p.softmax_scale = 0.5f;
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_backward(bundle, &p, 0, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_bwd_fp16_hd128_causal_sm80"); // not the _det one
  EXPECT_EQ(plan.pass, FAGEN_PASS_BACKWARD);
  EXPECT_EQ(plan.grid[0], 5); // ceil(577 / 128) key tiles
  EXPECT_EQ(plan.grid[1], 4); // kv heads
  EXPECT_EQ(plan.grid[2], 2);
  EXPECT_EQ(plan.block[0], 256);
  EXPECT_EQ(plan.smem_bytes, 81920);
  EXPECT_EQ(plan.pre_post_grid[0], 16); // ceil(1000 / 64) query tiles
  EXPECT_EQ(plan.pre_post_grid[1], 16);
  EXPECT_EQ(plan.pre_post_grid[2], 2);
  EXPECT_EQ(plan.pre_post_block[0], 128);
  fagen_bwd_workspace w = fagen_bwd_workspace_layout(2 * 1000, 2 * 1024, 16, 128, 2, 16, 0, 1);
  EXPECT_EQ(plan.workspace_bytes, w.total_bytes);
  // dq_accum: 16 whole query tiles of 64 rows a head; D: 1000 rows (both 256-byte aligned).
  EXPECT_EQ(plan.workspace_bytes, 2u * 1024 * 16 * 128 * 4 + 2 * 1000 * 16 * 4);
  EXPECT_EQ(fake().maxDynamicSmem, 81920);

  alignas(256) static char q[16], k[16], v[16], o[16], dout[16], dq[16], dk[16], dv[16];
  alignas(256) static char workspace[256];
  static float lse[4];
  void *stream = reinterpret_cast<void *>(0x77);
  size_t before = fake().launchLog.size();
  ASSERT_EQ(fagen_run_backward(&plan, q, k, v, o, lse, dout, dq, dk, dv, workspace,
                               plan.workspace_bytes, nullptr, stream),
            FAGEN_OK)
      << fagen_last_error();
  std::vector<FakeLaunch> launches = launchesSince(before);
  ASSERT_EQ(launches.size(), 3u);
  const char *names[3] = {"fagen_bwd_fp16_hd128_causal_sm80_pre",
                          "fagen_bwd_fp16_hd128_causal_sm80",
                          "fagen_bwd_fp16_hd128_causal_sm80_post"};
  for (int i = 0; i < 3; ++i) {
    const FakeLaunch &l = launches[i];
    EXPECT_EQ(l.function, names[i]);
    EXPECT_EQ(l.stream, stream);
    bool main = i == 1;
    EXPECT_EQ(l.grid[0], main ? 5u : 16u) << names[i];
    EXPECT_EQ(l.grid[1], main ? 4u : 16u) << names[i];
    EXPECT_EQ(l.grid[2], 2u) << names[i];
    EXPECT_EQ(l.block[0], main ? 256u : 128u) << names[i];
    EXPECT_EQ(l.smem, main ? 81920u : 0u) << names[i];
    fagen_bwd_params bp = paramsOf<fagen_bwd_params>(l);
    EXPECT_EQ(std::memcmp(l.params.data(), launches[0].params.data(), l.params.size()), 0)
        << "every launch gets the same block";
    EXPECT_EQ(bp.fwd.q, q);
    EXPECT_EQ(bp.fwd.o, o);
    EXPECT_EQ(bp.fwd.lse, lse);
    EXPECT_EQ(bp.dout, dout);
    EXPECT_EQ(bp.dq, dq);
    EXPECT_EQ(bp.dk, dk);
    EXPECT_EQ(bp.dv, dv);
  }
  fagen_bwd_params bp = paramsOf<fagen_bwd_params>(launches[1]);
  EXPECT_EQ(bp.dq_accum, reinterpret_cast<float *>(workspace + w.dq_accum_offset));
  EXPECT_EQ(bp.d, reinterpret_cast<float *>(workspace + w.d_offset));
  EXPECT_EQ(bp.dq_semaphore, nullptr);
  EXPECT_EQ(bp.m_blocks, 16);
  EXPECT_EQ(bp.dq_accum_batch_stride, 16 * 1024 * 128);
  EXPECT_EQ(bp.dq_accum_head_stride, 1024 * 128);
  EXPECT_EQ(bp.d_batch_stride, 16 * 1000);
  EXPECT_EQ(bp.d_head_stride, 1000);
  EXPECT_EQ(bp.do_row_stride, 16 * 128);
  EXPECT_EQ(bp.dq_batch_stride, 1000 * 16 * 128);
  EXPECT_EQ(bp.dk_row_stride, 4 * 128);
  EXPECT_EQ(bp.dv_batch_stride, 577 * 4 * 128);
  EXPECT_FLOAT_EQ(bp.fwd.softmax_scale, 0.5f);
  EXPECT_EQ(bp.fwd.group_size, 4);
  EXPECT_EQ(bp.fwd.lse_head_stride, 1000);

  // The forward's plan does not run as a backward, nor the backward's as a forward.
  EXPECT_EQ(fagen_run_forward(&plan, q, k, v, o, lse, nullptr), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fake().launchLog.size(), before + 3);
}

TEST_F(FakeVariantTest, TmaBackwardGetsItsTensorMaps) {
  // The sm90ws backward (sm_90a): its main kernel takes Q, K, V and dO as tensor maps, boxes of
  // block_m rows for Q and dO, block_n for K and V; _pre and _post take none.
  Bundle b = sm90wsBackwardBundle(1, "fagen_bwd_fp16_hd128_causal_sm80",
                                  "fagen_bwd_fp16_hd128_causal_sm90ws_m64n128w8s2");
  const KernelRecord k = b.kernels[1];
  load(b);
  fagen_fwd_problem p = testProblem(FAGEN_DTYPE_FP16, 128, 1); // B2 Hq16 Hkv4 Sq1000 Sk577
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_backward(bundle, &p, 0, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), k.name);
  // A causal kernel that is not deterministic interleaves the key tiles of 2^g kv heads: here
  // all 4 (a kv head's 4 query heads' Q, dO and dq_accum rows: 1000 x 4 x (256 + 256 + 512)
  // bytes, 3.9 MiB; 4 of them fit FAGEN_BWD_TILE_GROUP_BYTES).
  EXPECT_EQ(plan.grid[0], 5 << 2); // ceil(577 / 128) key tiles << g, ceil(4 kv heads / 2^g), batch
  EXPECT_EQ(plan.grid[1], 1);
  EXPECT_EQ(plan.grid[2], 2);
  EXPECT_EQ(plan.block[0], 384);
  EXPECT_EQ(plan.pre_post_grid[0], 16); // ceil(1000 / 64) query tiles
  {
    fagen_bwd_params bp;
    std::memcpy(&bp, plan.params, sizeof bp);
    EXPECT_EQ(bp.tile_group_log2, 2);
  }
  alignas(256) static char q[16], kk[16], v[16], o[16], dout[16], dq[16], dk[16], dv[16];
  alignas(256) static char workspace[256];
  static float lse[4];
  fake().tensorMaps.clear();
  size_t before = fake().launchLog.size();
  ASSERT_EQ(fagen_run_backward(&plan, q, kk, v, o, lse, dout, dq, dk, dv, workspace,
                               plan.workspace_bytes, nullptr, nullptr),
            FAGEN_OK)
      << fagen_last_error();
  std::vector<FakeLaunch> launches = launchesSince(before);
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_TRUE(launches[0].tmaMaps.empty());
  EXPECT_TRUE(launches[2].tmaMaps.empty());
  ASSERT_EQ(launches[1].tmaMaps.size(), 512u);
  ASSERT_EQ(fake().tensorMaps.size(), 4u);
  const void *addresses[4] = {q, kk, v, dout};
  const unsigned rows[4] = {64, 128, 128, 64};
  const unsigned long long seqlens[4] = {1000, 577, 577, 1000}, heads[4] = {16, 4, 4, 16};
  for (int t = 0; t < 4; ++t) {
    const FakeTensorMap &m = fake().tensorMaps[t];
    EXPECT_EQ(m.address, addresses[t]) << t;
    EXPECT_EQ(m.box[0], 64u) << t;
    EXPECT_EQ(m.box[1], rows[t]) << t;
    EXPECT_EQ(m.dims[1], seqlens[t]) << t;
    EXPECT_EQ(m.dims[2], heads[t]) << t;
    const void *address;
    std::memcpy(&address, launches[1].tmaMaps.data() + 128 * t, sizeof address);
    EXPECT_EQ(address, addresses[t]) << "the maps travel in the order Q, K, V, dO";
  }
  // A map the driver refuses fails the call before any of its three launches.
  setenv("FAKE_CUDA_TMA_ERROR", "1", 1);
  before = fake().launchLog.size();
  EXPECT_EQ(fagen_run_backward(&plan, q, kk, v, o, lse, dout, dq, dk, dv, workspace,
                               plan.workspace_bytes, nullptr, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  unsetenv("FAKE_CUDA_TMA_ERROR");
  EXPECT_NE(std::string(fagen_last_error()).find("for tensor q of kernel " + k.name),
            std::string::npos)
      << fagen_last_error();
  EXPECT_EQ(fake().launchLog.size(), before);
  // dO must meet TMA's rules as Q does: with a stride of 2^39 elements the plan takes the
  // bundle's portable kernel of the variant (here the deterministic one), and without one it
  // says why.
  p.do_strides[0] = int64_t(1) << 39;
  ASSERT_EQ(fagen_plan_backward(bundle, &p, 0, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_bwd_fp16_hd128_causal_det_sm80");
  b.kernels.erase(b.kernels.begin() + 2);
  load(b);
  EXPECT_EQ(fagen_plan_backward(bundle, &p, 0, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_NE(std::string(fagen_last_error()).find("loads do through TMA"), std::string::npos)
      << fagen_last_error();
}

TEST_F(FakeVariantTest, DeterministicTmaBackwardKeepsBlockOrder) {
  // A deterministic sm90ws causal kernel adds dQ in its dispatch order: its grid stays
  // (key tiles, kv heads, batch), g = 0.
  Bundle b = sm90wsBackwardBundle(2, "fagen_bwd_fp16_hd128_causal_det_sm80",
                                  "fagen_bwd_fp16_hd128_causal_det_sm90ws_m64n128w8s2");
  const KernelRecord &k = b.kernels[2];
  load(b);
  fagen_fwd_problem p = testProblem(FAGEN_DTYPE_FP16, 128, 1); // B2 Hq16 Hkv4 Sq1000 Sk577
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_backward(bundle, &p, 1, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), k.name);
  EXPECT_EQ(plan.grid[0], 5);
  EXPECT_EQ(plan.grid[1], 4);
  EXPECT_EQ(plan.grid[2], 2);
  fagen_bwd_params bp;
  std::memcpy(&bp, plan.params, sizeof bp);
  EXPECT_EQ(bp.tile_group_log2, 0);
}

TEST_F(FakeVariantTest, DeterministicBackwardAddsSemaphores) {
  fagen_fwd_problem p = testProblem(FAGEN_DTYPE_FP16, 128, 1);
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_backward(bundle, &p, 1, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_bwd_fp16_hd128_causal_det_sm80");
  // A causal kernel: one copy of dq_accum and of the semaphores.
  fagen_bwd_workspace w = fagen_bwd_workspace_layout(2 * 1000, 2 * 1024, 16, 128, 2, 16, 1, 1);
  EXPECT_EQ(plan.workspace_bytes, w.total_bytes);
  EXPECT_GT(w.total_bytes, w.semaphore_offset);
  EXPECT_EQ(w.d_offset, 2u * 1024 * 16 * 128 * 4);
  EXPECT_EQ(w.total_bytes - w.semaphore_offset, 2u * 16 * 16 * 4);
  alignas(256) static char buf[16], workspace[256];
  static float lse[4];
  size_t before = fake().launchLog.size();
  ASSERT_EQ(fagen_run_backward(&plan, buf, buf, buf, buf, lse, buf, buf, buf, buf, workspace,
                               plan.workspace_bytes, nullptr, nullptr),
            FAGEN_OK)
      << fagen_last_error();
  fagen_bwd_params bp = paramsOf<fagen_bwd_params>(launchesSince(before).at(1));
  EXPECT_EQ(bp.dq_semaphore, reinterpret_cast<int32_t *>(workspace + w.semaphore_offset));
  EXPECT_EQ(bp.semaphore_batch_stride, 16 * 16);
  EXPECT_EQ(bp.semaphore_head_stride, 16);

  // Without the nondeterministic kernel, the deterministic one serves every call.
  Bundle b = makeVariantBundle();
  b.kernels.erase(b.kernels.begin() + 1);
  load(b);
  ASSERT_EQ(fagen_plan_backward(bundle, &p, 0, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_bwd_fp16_hd128_causal_det_sm80");
  // Without the deterministic kernel, a call that asks for one is refused.
  b = makeVariantBundle();
  b.kernels.erase(b.kernels.begin() + 2);
  load(b);
  EXPECT_EQ(fagen_plan_backward(bundle, &p, 1, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_TRUE(std::string(fagen_last_error()).find("passes [fwd, bwd] and deterministic true") !=
              std::string::npos)
      << fagen_last_error();

  // An unmasked dense deterministic kernel: FAGEN_BWD_DET_DQ_SLOTS copies of dq_accum and of
  // the semaphores (bwd_params.h), its non-deterministic twin one.
  b = makeVariantBundle();
  for (KernelRecord &k : b.kernels)
    if (k.name.rfind("fagen_bwd_fp16_hd128_causal", 0) == 0)
      k.mask = Mask::None;
  load(b);
  p = testProblem(FAGEN_DTYPE_FP16, 128, 0);
  const uint64_t dqBytes = 2u * 1024 * 16 * 128 * 4, semBytes = 2u * 16 * 16 * 4;
  ASSERT_EQ(fagen_plan_backward(bundle, &p, 1, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_bwd_fp16_hd128_causal_det_sm80");
  w = fagen_bwd_workspace_layout(2 * 1000, 2 * 1024, 16, 128, 2, 16, 1, FAGEN_BWD_DET_DQ_SLOTS);
  EXPECT_EQ(plan.workspace_bytes, w.total_bytes);
  EXPECT_EQ(w.d_offset, FAGEN_BWD_DET_DQ_SLOTS * dqBytes);
  EXPECT_EQ(w.total_bytes - w.semaphore_offset, FAGEN_BWD_DET_DQ_SLOTS * semBytes);
  ASSERT_EQ(fagen_plan_backward(bundle, &p, 0, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_bwd_fp16_hd128_causal_sm80");
  EXPECT_EQ(plan.workspace_bytes, dqBytes + 2 * 1000 * 16 * 4); // dq_accum once, D, no semaphores
}

TEST_F(FakeVariantTest, TmaMapsOfVarlenCallsSpanThePackedTensors) {
  // A warp-specialized varlen kernel: its maps cover every sequence's rows (total_q / total_k)
  // as one batch; the kernel adds each sequence's first row. V's map has V's head dim.
  Bundle b = makeVariantBundle();
  KernelRecord &k = b.kernels[3]; // bf16 hd64 window tl + softcap + dropout + varlen
  k.name = "fagen_fwd_bf16_hd64x128_windowtl_softcap_drop_varlen_sm90ws_m128n128w8s2";
  k.templ = "sm90ws";
  k.headDimV = 128;
  k.blockM = 128;
  k.blockN = 128;
  k.threads = 384;
  load(b);
  fagen_fwd_problem p = windowProblem(); // batch 3, total_q 1500, total_k 2000, 16/4 heads
  p.head_dim_v = 128;
  fagen_fwd_problem_set_bshd_strides(&p);
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), k.name);
  EXPECT_EQ(plan.grid[0], 6 * 16 * 3); // ceil(700 / 128) x heads x sequences
  alignas(16) static char q[16], kk[16], v[16], o[16];
  static float lse[4];
  static int32_t cuQ[4] = {0, 700, 1000, 1500}, cuK[4] = {0, 900, 1100, 2000};
  fagen_run_args args = FAGEN_RUN_ARGS_INIT;
  args.cu_seqlens_q = cuQ;
  args.cu_seqlens_k = cuK;
  fake().tensorMaps.clear();
  ASSERT_EQ(fagen_run_forward_with_args(&plan, q, kk, v, o, lse, &args, nullptr), FAGEN_OK)
      << fagen_last_error();
  ASSERT_EQ(fake().tensorMaps.size(), 3u);
  const FakeTensorMap &mq = fake().tensorMaps[0], &mk = fake().tensorMaps[1],
                      &mv = fake().tensorMaps[2];
  using Dims = std::vector<unsigned long long>;
  EXPECT_EQ(Dims(mq.dims, mq.dims + 4), (Dims{64, 1500, 16, 1}));
  EXPECT_EQ(Dims(mk.dims, mk.dims + 4), (Dims{64, 2000, 4, 1}));
  EXPECT_EQ(Dims(mv.dims, mv.dims + 4), (Dims{128, 2000, 4, 1}));
  // Rows and heads strided as packed BSHD; the batch of one gets the smallest legal stride.
  EXPECT_EQ(Dims(mq.strides, mq.strides + 3), (Dims{16 * 64 * 2, 64 * 2, 16}));
  EXPECT_EQ(Dims(mv.strides, mv.strides + 3), (Dims{4 * 128 * 2, 128 * 2, 16}));
  EXPECT_EQ(mq.box[1], 128u);
  EXPECT_EQ(mv.box[1], 128u);
}

TEST_F(FakeVariantTest, VarlenBackwardWorkspaceAndArguments) {
  fagen_fwd_problem p = windowProblem(); // total_q 1500, longest 700
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_backward(bundle, &p, 0, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_bwd_bf16_hd64_windowtl_softcap_drop_varlen_sm80");
  fagen_bwd_workspace w = fagen_bwd_workspace_layout(1500, 1500, 16, 64, 3, 11, 0, 1);
  EXPECT_EQ(plan.workspace_bytes, w.total_bytes);
  EXPECT_EQ(plan.pre_post_grid[0], 11); // ceil(700 / 64)
  EXPECT_EQ(plan.grid[0], 8);           // ceil(900 / 128)
  alignas(256) static char buf[16], workspace[256];
  static float lse[4];
  static int32_t cuQ[4] = {0, 700, 1000, 1500}, cuK[4] = {0, 900, 1100, 2000};
  fagen_run_args args = FAGEN_RUN_ARGS_INIT;
  args.cu_seqlens_q = cuQ;
  args.cu_seqlens_k = cuK;
  args.dropout_seed = 7;
  args.dropout_offset = 9;
  EXPECT_EQ(fagen_run_backward(&plan, buf, buf, buf, buf, lse, buf, buf, buf, buf, workspace,
                               plan.workspace_bytes, nullptr, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_backward: args is null but the plan's variant "
                                   "reads cu_seqlens_q/_k, dropout_seed/_offset");
  size_t before = fake().launchLog.size();
  ASSERT_EQ(fagen_run_backward(&plan, buf, buf, buf, buf, lse, buf, buf, buf, buf, workspace,
                               plan.workspace_bytes, &args, nullptr),
            FAGEN_OK)
      << fagen_last_error();
  std::vector<FakeLaunch> launches = launchesSince(before);
  ASSERT_EQ(launches.size(), 3u);
  fagen_bwd_params bp = paramsOf<fagen_bwd_params>(launches[0]);
  EXPECT_EQ(bp.fwd.cu_seqlens_q, cuQ);
  EXPECT_EQ(bp.fwd.dropout_seed, 7u);
  EXPECT_EQ(bp.fwd.dropout_offset, 9u);
  EXPECT_EQ(bp.fwd.dropout_threshold, fagen::dropout_threshold(0.125f));
  EXPECT_EQ(bp.dq_accum_batch_stride, 0);
  EXPECT_EQ(bp.dq_accum_head_stride, 1500 * 64);
  EXPECT_EQ(bp.d_batch_stride, 0);
  EXPECT_EQ(bp.d_head_stride, 1500);
  EXPECT_EQ(bp.dk_batch_stride, 0);
  EXPECT_EQ(bp.dk_row_stride, 4 * 64);
  EXPECT_EQ(bp.m_blocks, 11);
}

TEST_F(FakeVariantTest, TmaVarlenBackwardTakesWholeDqTiles) {
  // The sm90ws varlen backward: its maps span the packed tensors (total_q / total_k rows, one
  // batch) as the forward's, and its dq_accum gives every sequence whole query tiles
  // (fagen_bwd_dq_tiled_rows: total_q + batch * block_m rows a head).
  Bundle b = makeVariantBundle();
  b.archs = {"sm_90a"};
  for (KernelRecord &k : b.kernels)
    k.arch = "sm_90a";
  KernelRecord &k = b.kernels[0]; // bf16 hd64 window tl + softcap + dropout + varlen
  k.name = "fagen_bwd_bf16_hd64_windowtl_softcap_drop_varlen_sm90ws_m128n128w8s2";
  k.templ = "sm90ws";
  k.blockM = 128;
  k.blockN = 128;
  k.threads = 384;
  load(b);
  fagen_fwd_problem p = windowProblem(); // batch 3, total_q 1500, total_k 2000, 16/4 heads
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_backward(bundle, &p, 0, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), k.name);
  fagen_bwd_workspace w =
      fagen_bwd_workspace_layout(1500, 1500 + 3 * 128, 16, 64, 3, 6, 0, 1);
  EXPECT_EQ(plan.workspace_bytes, w.total_bytes);
  EXPECT_EQ(fagen_bwd_dq_tiled_rows(1500, 3, 128), 1500 + 3 * 128);
  EXPECT_EQ(plan.workspace_offsets[1], w.d_offset);
  EXPECT_EQ(plan.grid[0], 8);           // ceil(900 / 128) key tiles of the longest sequence
  EXPECT_EQ(plan.pre_post_grid[0], 6);  // ceil(700 / 128) query tiles
  fagen_bwd_params bp;
  std::memcpy(&bp, plan.params, sizeof bp);
  EXPECT_EQ(bp.dq_accum_batch_stride, 0);
  EXPECT_EQ(bp.dq_accum_head_stride, (1500 + 3 * 128) * 64);
  EXPECT_EQ(bp.tile_group_log2, 0); // a window: the grid in block order
  // Sequence b's tiles start at cu_seqlens_q[b] + b tiles, rounded down to a tile: after the
  // previous sequence's whole tiles.
  EXPECT_EQ(fagen_bwd_dq_tile_row0(0, 0, 128), 0);
  EXPECT_EQ(fagen_bwd_dq_tile_row0(700, 1, 128), 768);   // sequence 0: 6 tiles, rows 0..767
  EXPECT_EQ(fagen_bwd_dq_tile_row0(1000, 2, 128), 1152); // sequence 1: 3 tiles, 768..1151
  EXPECT_LE(1152 + 4 * 128, 1500 + 3 * 128);             // sequence 2: 4 tiles
  alignas(256) static char buf[16], workspace[256];
  static float lse[4];
  static int32_t cuQ[4] = {0, 700, 1000, 1500}, cuK[4] = {0, 900, 1100, 2000};
  fagen_run_args args = FAGEN_RUN_ARGS_INIT;
  args.cu_seqlens_q = cuQ;
  args.cu_seqlens_k = cuK;
  fake().tensorMaps.clear();
  size_t before = fake().launchLog.size();
  ASSERT_EQ(fagen_run_backward(&plan, buf, buf, buf, buf, lse, buf, buf, buf, buf, workspace,
                               plan.workspace_bytes, &args, nullptr),
            FAGEN_OK)
      << fagen_last_error();
  ASSERT_EQ(launchesSince(before).size(), 3u);
  ASSERT_EQ(fake().tensorMaps.size(), 4u);
  using Dims = std::vector<unsigned long long>;
  const Dims dims[4] = {{64, 1500, 16, 1}, {64, 2000, 4, 1}, {64, 2000, 4, 1}, {64, 1500, 16, 1}};
  const unsigned rows[4] = {128, 128, 128, 128};
  for (int t = 0; t < 4; ++t) {
    const FakeTensorMap &m = fake().tensorMaps[t];
    EXPECT_EQ(Dims(m.dims, m.dims + 4), dims[t]) << t;
    EXPECT_EQ(m.box[1], rows[t]) << t;
  }
}

TEST_F(FakeVariantTest, BackwardLaunchFailureNamesTheKernel) {
  fagen_fwd_problem p = testProblem(FAGEN_DTYPE_FP16, 128, 1);
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_backward(bundle, &p, 0, &plan), FAGEN_OK) << fagen_last_error();
  alignas(256) static char buf[16], workspace[256];
  static float lse[4];
  setenv("FAKE_CUDA_LAUNCH_ERROR", "701", 1);
  EXPECT_EQ(fagen_run_backward(&plan, buf, buf, buf, buf, lse, buf, buf, buf, buf, workspace,
                               plan.workspace_bytes, nullptr, nullptr),
            FAGEN_ERROR_CUDA);
  EXPECT_EQ(std::string(fagen_last_error()),
            "cuLaunchKernel failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701): fake error text "
            "for kernel fagen_bwd_fp16_hd128_causal_sm80_pre");
  unsetenv("FAKE_CUDA_LAUNCH_ERROR");
  EXPECT_EQ(fagen_run_backward(&plan, buf, buf, buf, buf, lse, buf, buf, buf, buf, workspace + 16,
                               plan.workspace_bytes, nullptr, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(std::string(fagen_last_error()).find("workspace is not 256-byte aligned") !=
              std::string::npos)
      << fagen_last_error();
}

TEST_F(FakeVariantTest, BackwardNeedsAllThreeEntryPoints) {
  Bundle b = makeVariantBundle();
  b.kernels[1].name = "fagen_bwd_missing_sm80";
  load(b);
  fagen_fwd_problem p = testProblem(FAGEN_DTYPE_FP16, 128, 1);
  fagen_plan plan;
  EXPECT_EQ(fagen_plan_backward_kernel(bundle, &p, 0, 1, &plan), FAGEN_ERROR_BUNDLE_INVALID);
  EXPECT_TRUE(std::string(fagen_last_error()).find("has no kernel named fagen_bwd_missing_sm80") !=
              std::string::npos)
      << fagen_last_error();
}

TEST_F(FakeVariantTest, VarlenKernelsGetTheTotalsTheyClampTo) {
  // The kernels cannot trust the device's cu_seqlens (the host never reads them): they clamp
  // every sequence's rows to [0, total) with the totals of the call, here and in the backward.
  fagen_fwd_problem p = windowProblem(); // total_q 1500, total_k 2000
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  alignas(16) static char buf[16];
  static float lse[4];
  static int32_t cuQ[4] = {0, 2000, 4000, 6000}; // past total_q: the kernels' business
  fagen_run_args args = FAGEN_RUN_ARGS_INIT;
  args.cu_seqlens_q = args.cu_seqlens_k = cuQ;
  const size_t from = fake().launchLog.size();
  ASSERT_EQ(fagen_run_forward_with_args(&plan, buf, buf, buf, buf, lse, &args, nullptr), FAGEN_OK)
      << fagen_last_error();
  fagen_fwd_params fp = paramsOf<fagen_fwd_params>(launchesSince(from).at(0));
  EXPECT_EQ(fp.total_q, 1500);
  EXPECT_EQ(fp.total_k, 2000);
  EXPECT_EQ(fp.seqlen_q, 700);
  EXPECT_EQ(fp.seqlen_k, 900);

  fagen_plan back;
  ASSERT_EQ(fagen_plan_backward(bundle, &p, 0, &back), FAGEN_OK) << fagen_last_error();
  std::vector<char> workspace(back.workspace_bytes + 256);
  char *ws = workspace.data() + (256 - reinterpret_cast<uintptr_t>(workspace.data()) % 256);
  const size_t before = fake().launchLog.size();
  ASSERT_EQ(fagen_run_backward(&back, buf, buf, buf, buf, lse, buf, buf, buf, buf, ws,
                               back.workspace_bytes, &args, nullptr),
            FAGEN_OK)
      << fagen_last_error();
  for (const FakeLaunch &l : launchesSince(before)) {
    fagen_bwd_params bp = paramsOf<fagen_bwd_params>(l);
    EXPECT_EQ(bp.fwd.total_q, 1500) << l.function;
    EXPECT_EQ(bp.fwd.total_k, 2000) << l.function;
  }
  // Dense calls leave them 0 (their kernels read the batch strides instead).
  fagen_fwd_problem dense = testProblem(FAGEN_DTYPE_FP16, 128, 1);
  ASSERT_EQ(fagen_plan_forward(bundle, &dense, &plan), FAGEN_OK) << fagen_last_error();
  fagen_fwd_params dp;
  std::memcpy(&dp, plan.params, sizeof dp);
  EXPECT_EQ(dp.total_q, 0);
  EXPECT_EQ(dp.total_k, 0);
}

TEST_F(FakeVariantTest, WorkspaceSmallerThanThePlansIsRefused) {
  fagen_fwd_problem p = testProblem(FAGEN_DTYPE_FP16, 128, 1);
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_backward(bundle, &p, 1, &plan), FAGEN_OK) << fagen_last_error();
  ASSERT_GT(plan.workspace_bytes, 1024u);
  alignas(256) static char buf[256];
  static float lse[4];
  const size_t from = fake().launchLog.size();
  // A workspace made for a smaller call: refused before any launch.
  EXPECT_EQ(fagen_run_backward(&plan, buf, buf, buf, buf, lse, buf, buf, buf, buf, buf,
                               sizeof buf, nullptr, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(fagen_last_error()),
            "fagen_run_backward: workspace_bytes (256) is less than plan->workspace_bytes (" +
                std::to_string(plan.workspace_bytes) +
                "): the backward would write past the workspace; allocate the plan's "
                "workspace_bytes (it grows with batch, heads and seqlen_q)");
  EXPECT_EQ(fake().launchLog.size(), from);
}

TEST_F(FakeVariantTest, WindowBoundsBeyondTheSequencesAreCapped) {
  // INT32_MAX (as "everything") used to overflow the masks' last_row + off + right + 1 into
  // O = 0, LSE = -inf; a bound this wide excludes no key, so it is capped where the sums fit.
  fagen_fwd_problem p = windowProblem(); // seqlen_q 700, seqlen_k 900
  p.window_left = INT32_MAX;
  p.window_right = INT32_MAX - 1;
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  fagen_fwd_params fp;
  std::memcpy(&fp, plan.params, sizeof fp);
  EXPECT_EQ(fp.window_left, 900 + 256);
  EXPECT_EQ(fp.window_right, 900 + 256);
  // Bounds that can cut stay as they are.
  p.window_left = 899;
  p.window_right = 0;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  std::memcpy(&fp, plan.params, sizeof fp);
  EXPECT_EQ(fp.window_left, 899);
  EXPECT_EQ(fp.window_right, 0);
}

TEST_F(FakeVariantTest, DropoutZeroRunsADropoutKernelThatKeepsEverything) {
  // The bundle has the window + softcap + varlen variant only with dropout: docs/spec.md says
  // dropout_p = 0 runs it without dropout.
  fagen_fwd_problem p = windowProblem();
  p.dropout_p = 0;
  fagen_plan plan;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(chosenKernel(plan), "fagen_fwd_bf16_hd64_windowtl_softcap_drop_varlen_sm80");
  EXPECT_EQ(plan.run_args, FAGEN_RUN_ARG_CU_SEQLENS); // no seed to pass
  fagen_fwd_params fp;
  std::memcpy(&fp, plan.params, sizeof fp);
  EXPECT_EQ(fp.dropout_threshold, 0u); // no byte is below 0: every element kept
  EXPECT_EQ(fp.dropout_rescale, 1.0f);
  fagen_plan back;
  ASSERT_EQ(fagen_plan_backward(bundle, &p, 0, &back), FAGEN_OK) << fagen_last_error();
  fagen_bwd_params bp;
  std::memcpy(&bp, back.params, sizeof bp);
  EXPECT_EQ(bp.fwd.dropout_threshold, 0u);
  EXPECT_EQ(bp.fwd.dropout_rescale, 1.0f);
  // A variant that has a kernel without dropout gets that one (the dense fp16 causal).
  fagen_fwd_problem dense = testProblem(FAGEN_DTYPE_FP16, 128, 1);
  ASSERT_EQ(fagen_plan_forward(bundle, &dense, &plan), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(plan.run_args & FAGEN_RUN_ARG_DROPOUT_SEED, 0u);
  // A variant with neither is refused as the call was made (no dropout in the message).
  fagen_fwd_problem none = testProblem(FAGEN_DTYPE_BF16, 256, 0);
  EXPECT_EQ(fagen_plan_forward(bundle, &none, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(std::string(fagen_last_error())
                .find("no forward kernel in the bundle serves bf16 head_dim 256/256 mask none; "),
            0u)
      << fagen_last_error();
}

TEST_F(FakeVariantTest, ValidateModeNamesTheFirstBadCuSeqlensEntry) {
  fagen_fwd_problem p = windowProblem(); // batch 3, total_q 1500, total_k 2000, longest 700/900
  fagen_plan plan, back;
  ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_OK) << fagen_last_error();
  ASSERT_EQ(fagen_plan_backward(bundle, &p, 0, &back), FAGEN_OK) << fagen_last_error();
  alignas(256) static char buf[16];
  static float lse[4];
  std::vector<char> workspace(back.workspace_bytes + 256);
  char *ws = workspace.data() + (256 - reinterpret_cast<uintptr_t>(workspace.data()) % 256);
  static int32_t cuQ[4], cuK[4] = {0, 900, 1100, 2000};
  fagen_run_args args = FAGEN_RUN_ARGS_INIT;
  args.cu_seqlens_q = cuQ; // the fake's "device" memory is the host's
  args.cu_seqlens_k = cuK;
  auto forwardError = [&](std::initializer_list<int32_t> q) {
    std::copy(q.begin(), q.end(), cuQ);
    const size_t from = fake().launchLog.size();
    fagen_status s = fagen_run_forward_with_args(&plan, buf, buf, buf, buf, lse, &args, nullptr);
    EXPECT_EQ(fake().launchLog.size(), from + (s == FAGEN_OK ? 1 : 0));
    return s == FAGEN_OK ? std::string("ok") : std::string(fagen_last_error());
  };
  // Without FAGEN_VALIDATE the host never reads the arrays: the kernels clamp.
  unsetenv("FAGEN_VALIDATE");
  EXPECT_EQ(forwardError({0, 700, 2000, 1500}), "ok");
  setenv("FAGEN_VALIDATE", "1", 1);
  EXPECT_EQ(forwardError({0, 700, 1000, 1500}), "ok");
  EXPECT_EQ(forwardError({0, 700, 2000, 1500}),
            "fagen_run_forward_with_args: FAGEN_VALIDATE: args->cu_seqlens_q[2] (2000) is past "
            "total_q (1500)");
  EXPECT_EQ(forwardError({0, 700, 600, 1500}),
            "fagen_run_forward_with_args: FAGEN_VALIDATE: args->cu_seqlens_q[2] (600) is less "
            "than args->cu_seqlens_q[1] (700): the offsets must ascend");
  EXPECT_EQ(forwardError({0, 800, 1000, 1500}),
            "fagen_run_forward_with_args: FAGEN_VALIDATE: sequence 0 has 800 rows "
            "(args->cu_seqlens_q[1] (800) - args->cu_seqlens_q[0]), more than seqlen_q (700), the longest "
            "the call declared");
  EXPECT_EQ(forwardError({3, 700, 1000, 1500}),
            "fagen_run_forward_with_args: FAGEN_VALIDATE: args->cu_seqlens_q[0] is 3, not 0");
  EXPECT_EQ(forwardError({0, 700, 1000, 1400}),
            "fagen_run_forward_with_args: FAGEN_VALIDATE: args->cu_seqlens_q[batch] (1400) is "
            "not total_q (1500)");
  std::copy_n(std::begin({0, 700, 1000, 1500}), 4, cuQ);
  cuK[1] = 2500;
  EXPECT_EQ(fagen_run_backward(&back, buf, buf, buf, buf, lse, buf, buf, buf, buf, ws,
                               back.workspace_bytes, &args, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_backward: FAGEN_VALIDATE: args->cu_seqlens_k[1] "
                                   "(2500) is past total_k (2000)");
  cuK[1] = 900;
  EXPECT_EQ(fagen_run_backward(&back, buf, buf, buf, buf, lse, buf, buf, buf, buf, ws,
                               back.workspace_bytes, &args, nullptr),
            FAGEN_OK)
      << fagen_last_error();
  unsetenv("FAGEN_VALIDATE");
}

TEST(BackwardTileGroups, TheRuleOfTheGroupedGrid) {
  // Only sm90ws causal kernels that are not deterministic group kv heads (the deterministic
  // mode's dQ order is its dispatch order).
  EXPECT_EQ(fagen_bwd_ws_groups_kv_heads(1, 0), 1);
  EXPECT_EQ(fagen_bwd_ws_groups_kv_heads(1, 1), 0);
  EXPECT_EQ(fagen_bwd_ws_groups_kv_heads(0, 0), 0);
  // bf16 hd 128, MHA: a head's rows take seqlen_q x (256 + 256 + 512) bytes, 16 MiB at 16k.
  EXPECT_EQ(fagen_bwd_tile_group_log2(2048, 1, 128, 128, 128, 16, 16), 3);   // 2 MiB a head: 8 fit
  EXPECT_EQ(fagen_bwd_tile_group_log2(8192, 1, 128, 128, 128, 16, 64), 1);   // 8 MiB: 2
  EXPECT_EQ(fagen_bwd_tile_group_log2(16384, 1, 128, 128, 128, 16, 128), 0); // 16 MiB: 1
  EXPECT_EQ(fagen_bwd_tile_group_log2(32768, 1, 128, 128, 128, 16, 256), 0); // none fits: 0
  // Never past heads_kv: 2^g <= heads_kv (5 kv heads: 4).
  EXPECT_EQ(fagen_bwd_tile_group_log2(128, 1, 64, 64, 64, 5, 1), 2);
  EXPECT_EQ(fagen_bwd_tile_group_log2(128, 1, 64, 64, 64, 1, 1), 0);
  EXPECT_EQ(fagen_bwd_tile_group_log2(0, 0, 64, 64, 64, 0, 0), 0);
  // GQA counts every query head of a kv head; hd 96's dq_accum rows are 128 floats (sm90ws):
  // 2048 x 4 x (192 + 192 + 512) bytes = 7 MiB a kv head, 2 fit.
  EXPECT_EQ(fagen_bwd_tile_group_log2(2048, 4, 96, 96, 128, 8, 16), 1);
  // 192 / 128: 1024 x (384 + 256 + 1024) bytes = 1.625 MiB, 8 fit, but only 4 kv heads.
  EXPECT_EQ(fagen_bwd_tile_group_log2(1024, 1, 192, 128, 256, 4, 8), 2);
  // The grid's x stays under 2^31 CTAs: 2^29 key tiles take g <= 1 whatever fits in L2.
  EXPECT_EQ(fagen_bwd_tile_group_log2(1, 1, 64, 64, 64, 64, int64_t(1) << 29), 1);
  EXPECT_EQ(fagen_bwd_tile_group_log2(1, 1, 64, 64, 64, 64, 1), 6);
}

TEST(BackwardTileGroups, EveryKeyTileOfEveryHeadRunsOnce) {
  // fagen_bwd_main_grid's CTAs, placed by fagen_bwd_grid_cta, cover each (key tile, kv head)
  // once; the last group's CTAs past heads_kv have none.
  for (int32_t heads = 1; heads <= 9; ++heads)
    for (int32_t g = 0; g <= 4; ++g)
      for (int64_t tiles = 1; tiles <= 5; ++tiles) {
        const fagen_bwd_grid grid = fagen_bwd_main_grid(tiles, heads, 2, g);
        EXPECT_EQ(grid.z, 2);
        std::vector<int> seen(size_t(tiles * heads), 0);
        for (int32_t y = 0; y < grid.y; ++y)
          for (int32_t x = 0; x < grid.x; ++x) {
            int32_t tile = -1, head = -1;
            fagen_bwd_grid_cta(x, y, g, &tile, &head);
            ASSERT_GE(tile, 0);
            ASSERT_LT(tile, tiles);
            if (head < heads)
              ++seen[size_t(head * tiles + tile)];
          }
        for (int c : seen)
          EXPECT_EQ(c, 1) << "heads " << heads << " g " << g << " tiles " << tiles;
      }
}
