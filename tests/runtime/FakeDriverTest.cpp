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
#include "../common/TestBundles.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <thread>
#include <tuple>

using namespace fagen;
using fagen::test::fakeCubin;
using fagen::test::makeTestBundle;
using fagen::test::testKernel;
using fagen::test::testProblem;

namespace {

FakeCudaState &fake() {
  static FakeCudaState *state = [] {
    void *lib = dlopen(std::getenv("FAGEN_LIBCUDA"), RTLD_NOW | RTLD_LOCAL);
    auto get = reinterpret_cast<FakeCudaState *(*)()>(dlsym(lib, "fake_cuda_state"));
    return get();
  }();
  return *state;
}

struct FakeDriverTest : ::testing::Test {
  void SetUp() override {
    unsetenv("FAKE_CUDA_CC");
    unsetenv("FAKE_CUDA_SMEM");
    unsetenv("FAKE_CUDA_LAUNCH_ERROR");
    load(makeTestBundle());
  }
  void TearDown() override { fagen_bundle_destroy(bundle); }

  void load(const Bundle &b) {
    fagen_bundle_destroy(bundle);
    std::vector<uint8_t> bytes = serializeBundle(b);
    ASSERT_EQ(fagen_bundle_load_memory(bytes.data(), bytes.size(), &bundle), FAGEN_OK)
        << fagen_last_error();
  }

  std::string chosenKernel(const fagen_plan &plan) {
    std::string d = fagen_bundle_kernel_name(bundle, plan.kernel_index);
    return d.substr(0, d.find(' '));
  }

  fagen_bundle *bundle = nullptr;
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
