//===- RuntimeTest.cpp - the C ABI's host-side paths and the driver loader -===//
//
// Nothing here reaches the process-wide driver (plan stops at validation or kernel matching),
// so it runs the same with or without a GPU. The paths past the driver are tested by
// fagen_runtime_nodriver_test and fagen_runtime_fakedriver_test (tests/runtime/).
//
//===----------------------------------------------------------------------===//
#include "fagen/fagen.h"
#include "Driver.h"
#include "../common/TestBundles.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

using namespace fagen;
using fagen::test::testBundleBytes;
using fagen::test::testProblem;

namespace {

struct BundleFixture : ::testing::Test {
  void SetUp() override {
    std::vector<uint8_t> bytes = testBundleBytes();
    ASSERT_EQ(fagen_bundle_load_memory(bytes.data(), bytes.size(), &bundle), FAGEN_OK)
        << fagen_last_error();
  }
  void TearDown() override { fagen_bundle_destroy(bundle); }

  /// Plans `p` and returns the message; expects `status`.
  std::string planError(const fagen_fwd_problem &p, fagen_status status) {
    fagen_plan plan;
    EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan), status) << fagen_last_error();
    return fagen_last_error();
  }

  fagen_bundle *bundle = nullptr;
};

bool contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

} // namespace

TEST(RuntimeTest, NamesAndVersion) {
  EXPECT_STREQ(fagen_status_name(FAGEN_OK), "FAGEN_OK");
  EXPECT_STREQ(fagen_status_name(FAGEN_ERROR_NO_KERNEL_FOR_GPU), "FAGEN_ERROR_NO_KERNEL_FOR_GPU");
  EXPECT_STREQ(fagen_status_name(fagen_status(99)), "FAGEN_STATUS_UNKNOWN");
  EXPECT_STREQ(fagen_version(), FAGEN_VERSION_STRING);
}

TEST(RuntimeTest, LoadRefusesNullArguments) {
  fagen_bundle *b = reinterpret_cast<fagen_bundle *>(1);
  EXPECT_EQ(fagen_bundle_load_memory(nullptr, 10, &b), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(b, nullptr);
  EXPECT_STREQ(fagen_last_error(), "fagen_bundle_load_memory: data is null");
  EXPECT_EQ(fagen_bundle_load_memory("x", 1, nullptr), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fagen_bundle_load_file(nullptr, &b), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(fagen_bundle_load_file("x.fab", nullptr), FAGEN_ERROR_INVALID_ARGUMENT);
  fagen_bundle_destroy(nullptr);
  EXPECT_EQ(fagen_bundle_kernel_count(nullptr), 0);
  EXPECT_EQ(fagen_bundle_kernel_name(nullptr, 0), nullptr);
  fagen_fwd_problem_set_bshd_strides(nullptr);
  fagen_fwd_problem_set_bhsd_strides(nullptr);
}

TEST(RuntimeTest, LoadReportsIoAndCorruption) {
  fagen_bundle *b = nullptr;
  EXPECT_EQ(fagen_bundle_load_file("/nonexistent/x.fab", &b), FAGEN_ERROR_IO);
  EXPECT_TRUE(contains(fagen_last_error(), "cannot open bundle /nonexistent/x.fab: No such file"))
      << fagen_last_error();
  EXPECT_EQ(fagen_bundle_load_file("/", &b), FAGEN_ERROR_IO);
  EXPECT_TRUE(contains(fagen_last_error(), "cannot read bundle /")) << fagen_last_error();

  std::vector<uint8_t> bytes = testBundleBytes();
  bytes.resize(bytes.size() - 1);
  EXPECT_EQ(fagen_bundle_load_memory(bytes.data(), bytes.size(), &b), FAGEN_ERROR_BUNDLE_INVALID);
  EXPECT_EQ(b, nullptr);
  EXPECT_TRUE(contains(fagen_last_error(), "bundle is truncated")) << fagen_last_error();
}

TEST(RuntimeTest, LoadFileRoundTrip) {
  std::string path = ::testing::TempDir() + "/runtime_test.fab";
  std::vector<uint8_t> bytes = testBundleBytes();
  FILE *f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  fagen_bundle *b = nullptr;
  ASSERT_EQ(fagen_bundle_load_file(path.c_str(), &b), FAGEN_OK) << fagen_last_error();
  EXPECT_EQ(fagen_bundle_kernel_count(b), 4);
  fagen_bundle_destroy(b);

  f = std::fopen(path.c_str(), "wb");
  std::fwrite(bytes.data(), 1, 100, f);
  std::fclose(f);
  EXPECT_EQ(fagen_bundle_load_file(path.c_str(), &b), FAGEN_ERROR_BUNDLE_INVALID);
  EXPECT_EQ(std::string(fagen_last_error()).find(path + ": bundle is truncated"), 0u)
      << fagen_last_error();
  std::remove(path.c_str());
}

TEST_F(BundleFixture, KernelNames) {
  ASSERT_EQ(fagen_bundle_kernel_count(bundle), 4);
  std::string name = fagen_bundle_kernel_name(bundle, 2);
  EXPECT_EQ(name.find("fagen_fwd_fp16_d128_causal_sm90a (fwd sm_90a fp16 head_dim 128/128 mask "
                      "causal tile 128x64"),
            0u)
      << name;
  EXPECT_EQ(fagen_bundle_kernel_name(bundle, 4), nullptr);
  EXPECT_STREQ(fagen_last_error(), "fagen_bundle_kernel_name: index 4 is out of range [0, 4)");
  EXPECT_EQ(fagen_bundle_kernel_name(bundle, -1), nullptr);
}

TEST(RuntimeTest, StrideHelpers) {
  fagen_fwd_problem p = testProblem(); // B=2 Hq=16 Hkv=4 Sq=1000 Sk=577 D=128
  EXPECT_EQ(p.q_strides[0], 1000 * 16 * 128);
  EXPECT_EQ(p.q_strides[1], 128);
  EXPECT_EQ(p.q_strides[2], 16 * 128);
  EXPECT_EQ(p.k_strides[2], 4 * 128);
  p.head_dim_v = 64;
  fagen_fwd_problem_set_bhsd_strides(&p);
  EXPECT_EQ(p.q_strides[0], 16 * 1000 * 128);
  EXPECT_EQ(p.q_strides[1], 1000 * 128);
  EXPECT_EQ(p.q_strides[2], 128);
  EXPECT_EQ(p.v_strides[1], 577 * 64);
  EXPECT_EQ(p.o_strides[0], 16 * 1000 * 64);
}

TEST_F(BundleFixture, PlanRefusesNullArguments) {
  fagen_fwd_problem p = testProblem();
  fagen_plan plan;
  EXPECT_EQ(fagen_plan_forward(nullptr, &p, &plan), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_plan_forward: bundle is null");
  EXPECT_EQ(fagen_plan_forward(bundle, nullptr, &plan), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_plan_forward: problem is null");
  EXPECT_EQ(fagen_plan_forward(bundle, &p, nullptr), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_plan_forward: plan is null");
}

TEST_F(BundleFixture, PlanNamesTheBadField) {
  struct Case {
    void (*edit)(fagen_fwd_problem &);
    const char *message;
  } cases[] = {
      {[](fagen_fwd_problem &p) { p.heads_q = 32, p.heads_kv = 5; },
       "heads_q (32) is not a multiple of heads_kv (5)"},
      {[](fagen_fwd_problem &p) { p.batch = 0; }, "batch (0) must be >= 1"},
      {[](fagen_fwd_problem &p) { p.seqlen_q = 0; }, "seqlen_q (0) must be >= 1"},
      {[](fagen_fwd_problem &p) { p.seqlen_k = -3; }, "seqlen_k (-3) must be >= 1"},
      {[](fagen_fwd_problem &p) { p.heads_kv = 0; }, "heads_kv (0) must be >= 1"},
      {[](fagen_fwd_problem &p) { p.head_dim_v = 0; }, "head_dim_v (0) must be >= 1"},
      {[](fagen_fwd_problem &p) { p.heads_q = p.heads_kv = 70000; },
       "heads_q (70000) exceeds 65535"},
      {[](fagen_fwd_problem &p) { p.batch = 65536; }, "batch (65536) exceeds 65535"},
      {[](fagen_fwd_problem &p) { p.dtype = fagen_dtype(7); },
       "dtype (7) is not FAGEN_DTYPE_FP16 (0) or FAGEN_DTYPE_BF16 (1)"},
      {[](fagen_fwd_problem &p) { p.causal = 2; }, "causal (2) must be 0 or 1"},
      {[](fagen_fwd_problem &p) { p.softmax_scale = NAN; }, "softmax_scale (nan) must be finite"},
      {[](fagen_fwd_problem &p) { p.k_strides[2] = 100; },
       "k_strides[2] (row) is 100 elements, not a multiple of 8"},
      {[](fagen_fwd_problem &p) { p.q_strides[1] = -128; },
       "q_strides[1] (head) is -128: strides must be >= 0"},
      {[](fagen_fwd_problem &p) { p.o_strides[0] = 0; },
       "o_strides[0] (batch) is 0 but the batch extent is 2"},
  };
  for (const Case &c : cases) {
    fagen_fwd_problem p = testProblem();
    c.edit(p);
    std::string error = planError(p, FAGEN_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(error.find(std::string("fagen_plan_forward: ") + c.message), 0u) << error;
  }
}

TEST_F(BundleFixture, PlanListsWhatTheBundleHas) {
  std::string error = planError(testProblem(FAGEN_DTYPE_FP16, 96, 1), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(error, "no forward kernel in the bundle serves fp16 head_dim 96/96 mask causal; the "
                   "bundle has forward kernels for bf16 head_dim 128/128 mask causal, fp16 "
                   "head_dim 128/128 mask causal, fp16 head_dim 64/64 mask none: add a variant "
                   "with dtype fp16, head_dim 96 and mask causal to the spec and rebuild");
  error = planError(testProblem(FAGEN_DTYPE_BF16, 64, 0), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_TRUE(contains(error, "serves bf16 head_dim 64/64 mask none")) << error;
  fagen_fwd_problem p = testProblem(FAGEN_DTYPE_FP16, 128, 1);
  p.head_dim_v = 64;
  fagen_fwd_problem_set_bshd_strides(&p);
  error = planError(p, FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_TRUE(contains(error, "head_dim 128 (head_dim_v 64) and mask causal")) << error;
}

TEST(RuntimeTest, PlanRefusesOtherParamsLayouts) {
  Bundle b = fagen::test::makeTestBundle();
  for (KernelRecord &k : b.kernels)
    k.paramsVersion = 2;
  std::vector<uint8_t> bytes = serializeBundle(b);
  fagen_bundle *bundle = nullptr;
  ASSERT_EQ(fagen_bundle_load_memory(bytes.data(), bytes.size(), &bundle), FAGEN_OK);
  fagen_fwd_problem p = testProblem();
  fagen_plan plan;
  EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_TRUE(contains(fagen_last_error(), "takes parameter layout version 2 but this runtime "
                                           "fills version 1: rebuild the bundle"))
      << fagen_last_error();
  fagen_bundle_destroy(bundle);
}

TEST(RuntimeTest, RunChecksThePlanAndPointers) {
  EXPECT_EQ(fagen_run_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_forward: plan is null");
  fagen_plan plan = {};
  alignas(16) char buffer[64] = {};
  EXPECT_EQ(fagen_run_forward(&plan, buffer, buffer, buffer, buffer, nullptr, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(fagen_last_error(), "not filled by a successful fagen_plan_forward"));
}

TEST(RuntimeTest, DriverLoaderExplainsAMissingLibrary) {
  DriverApi api;
  std::string error;
  EXPECT_FALSE(loadDriver("/nonexistent/libcuda.so.1", api, error));
  EXPECT_EQ(error.find("no CUDA driver found (dlopen /nonexistent/libcuda.so.1: "), 0u) << error;
  EXPECT_TRUE(contains(error, "): fagen needs an NVIDIA driver to run kernels; bundles can still "
                              "be built and inspected without one"))
      << error;
}

TEST(RuntimeTest, DriverLoaderExplainsTheStubLibrary) {
  const char *stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (FILE *f = std::fopen(stub, "rb"))
    std::fclose(f);
  else
    GTEST_SKIP() << stub << " is not on this machine";
  DriverApi api;
  std::string error;
  EXPECT_FALSE(loadDriver(stub, api, error));
  EXPECT_EQ(error, std::string("the CUDA driver library ") + stub +
                       " is the CUDA toolkit's stub, not a real driver (cuInit failed: "
                       "CUDA_ERROR_STUB_LIBRARY (34)): fagen needs an NVIDIA driver to run "
                       "kernels; bundles can still be built and inspected without one");
}

TEST(RuntimeTest, CudaErrorTextWithoutADriver) {
  DriverApi api = {};
  EXPECT_EQ(cudaErrorText(api, 209, "cuModuleLoadData"),
            "cuModuleLoadData failed: CUDA_ERROR_NO_BINARY_FOR_GPU (209)");
  EXPECT_EQ(cudaErrorText(api, 12345, "cuLaunchKernel"), "cuLaunchKernel failed: CUDA error (12345)");
}
