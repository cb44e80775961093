//===- RuntimeTest.cpp - the C ABI's host-side paths and the driver loader -===//
//
// Nothing here reaches the process-wide driver (plan stops at validation or kernel matching),
// so it runs the same with or without a GPU. The paths past the driver are tested by
// fagen_runtime_nodriver_test and fagen_runtime_fakedriver_test (tests/runtime/).
//
//===----------------------------------------------------------------------===//
#include "fagen/fagen.h"
#include "runtime/src/Driver.h"
#include "tests/common/TestBundles.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>

using namespace fagen;
using fagen::test::makeVariantBundle;
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
    k.paramsVersion = 1;
  std::vector<uint8_t> bytes = serializeBundle(b);
  fagen_bundle *bundle = nullptr;
  ASSERT_EQ(fagen_bundle_load_memory(bytes.data(), bytes.size(), &bundle), FAGEN_OK);
  fagen_fwd_problem p = testProblem();
  fagen_plan plan;
  EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_TRUE(contains(fagen_last_error(), "takes parameter layout version 1 but this runtime "
                                           "fills version 5: rebuild the bundle"))
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
  EXPECT_EQ(cudaErrorText(api, 12345, "cuLaunchKernel"),
            "cuLaunchKernel failed: CUDA error (12345)");
}

// bench/fagen_rt.py mirrors these layouts with ctypes (and its test checks the same sizes):
// change both together.
static_assert(sizeof(void *) != 8 || sizeof(fagen_fwd_problem) == 296, "fagen_rt.py _Problem");
static_assert(sizeof(void *) != 8 || offsetof(fagen_fwd_problem, do_strides) == 200, "_Problem");
static_assert(sizeof(void *) != 8 || sizeof(fagen_run_args) == 80, "fagen_rt.py RunArgs");
static_assert(sizeof(void *) != 8 || sizeof(fagen_plan) == 1152, "fagen_rt.py _Plan");
static_assert(sizeof(void *) != 8 || offsetof(fagen_plan, params) == 128, "fagen_rt.py _Plan");

TEST(RuntimeTest, AbiVersion) { EXPECT_EQ(fagen_abi_version(), FAGEN_RUNTIME_ABI_VERSION); }

TEST(RuntimeTest, StrideHelpersFillTheGradientsAndPackVarlen) {
  fagen_fwd_problem p = testProblem(); // B=2 Hq=16 Hkv=4 Sq=1000 Sk=577 D=128
  p.head_dim_v = 64;
  fagen_fwd_problem_set_bshd_strides(&p);
  EXPECT_EQ(p.do_strides[0], 1000 * 16 * 64);
  EXPECT_EQ(p.do_strides[2], 16 * 64);
  EXPECT_EQ(p.dq_strides[2], 16 * 128);
  EXPECT_EQ(p.dk_strides[0], 577 * 4 * 128);
  EXPECT_EQ(p.dv_strides[2], 4 * 64);
  fagen_fwd_problem_set_bhsd_strides(&p);
  EXPECT_EQ(p.dq_strides[1], 1000 * 128);
  EXPECT_EQ(p.dv_strides[1], 577 * 64);
  // Varlen: packed [total, heads, dim] / [heads, total, dim]; the batch stride is unused.
  p.varlen = 1;
  p.total_q = 3000;
  p.total_k = 2000;
  fagen_fwd_problem_set_bhsd_strides(&p);
  EXPECT_EQ(p.q_strides[0], 0);
  EXPECT_EQ(p.q_strides[1], 3000 * 128);
  EXPECT_EQ(p.k_strides[1], 2000 * 128);
  EXPECT_EQ(p.dv_strides[1], 2000 * 64);
  fagen_fwd_problem_set_bshd_strides(&p);
  EXPECT_EQ(p.o_strides[0], 0);
  EXPECT_EQ(p.o_strides[2], 16 * 64);
}

TEST_F(BundleFixture, PlanNamesTheBadVariantField) {
  struct Case {
    void (*edit)(fagen_fwd_problem &);
    const char *message;
  } cases[] = {
      {[](fagen_fwd_problem &p) { p.mask = fagen_mask(7); },
       "mask (7) is not FAGEN_MASK_NONE (0), FAGEN_MASK_CAUSAL (1) or FAGEN_MASK_WINDOW (2)"},
      {[](fagen_fwd_problem &p) { p.mask = FAGEN_MASK_WINDOW; },
       "causal (1) contradicts mask FAGEN_MASK_WINDOW: set causal = 0"},
      {[](fagen_fwd_problem &p) { p.mask_align = fagen_mask_align(2); },
       "mask_align (2) is not FAGEN_MASK_ALIGN_BOTTOM_RIGHT (0) or FAGEN_MASK_ALIGN_TOP_LEFT (1)"},
      {[](fagen_fwd_problem &p) { p.causal = 0, p.mask = FAGEN_MASK_WINDOW, p.window_left = -2; },
       "window_left (-2) must be >= 0, or -1 for unbounded"},
      {[](fagen_fwd_problem &p) { p.window_right = 128; },
       "window_right (128) is set but mask is not FAGEN_MASK_WINDOW: set mask = "
       "FAGEN_MASK_WINDOW for a sliding window"},
      {[](fagen_fwd_problem &p) { p.score_mod = fagen_score_mod(3); },
       "score_mod (3) is not FAGEN_SCORE_MOD_NONE (0)"},
      {[](fagen_fwd_problem &p) { p.score_mod = FAGEN_SCORE_MOD_SOFTCAP; },
       "softcap (0.000000) must be finite and > 0 with FAGEN_SCORE_MOD_SOFTCAP"},
      {[](fagen_fwd_problem &p) { p.score_mod = FAGEN_SCORE_MOD_SOFTCAP, p.softcap = INFINITY; },
       "softcap (inf) must be finite and > 0"},
      {[](fagen_fwd_problem &p) { p.softcap = 30; },
       "softcap (30.000000) is set but score_mod is not FAGEN_SCORE_MOD_SOFTCAP: set score_mod = "
       "FAGEN_SCORE_MOD_SOFTCAP, or softcap = 0"},
      {[](fagen_fwd_problem &p) { p.dropout_p = 1; }, "dropout_p (1.000000) must be in [0, 1)"},
      {[](fagen_fwd_problem &p) { p.dropout_p = -0.1f; },
       "dropout_p (-0.100000) must be in [0, 1)"},
      {[](fagen_fwd_problem &p) { p.dropout_p = NAN; }, "dropout_p (nan) must be in [0, 1)"},
      {[](fagen_fwd_problem &p) { p.varlen = 2; }, "varlen (2) must be 0 or 1"},
      {[](fagen_fwd_problem &p) { p.total_q = 4000; },
       "total_q (4000) is set but varlen is 0: set varlen = 1 for packed sequences"},
      {[](fagen_fwd_problem &p) { p.varlen = 1, p.total_q = 999, p.total_k = 4000; },
       "total_q (999) must be in [seqlen_q (1000), 2^31 - 1]"},
      {[](fagen_fwd_problem &p) { p.varlen = 1, p.total_q = 4000, p.total_k = 0; },
       "total_k (0) must be in [seqlen_k (577), 2^31 - 1]"},
      {[](fagen_fwd_problem &p) { p.sparsity = fagen_sparsity(3); },
       "sparsity (3) is not FAGEN_SPARSITY_NONE (0)"},
      {[](fagen_fwd_problem &p) { p.sparse_block = 128; },
       "sparse_block (128) is set but sparsity is FAGEN_SPARSITY_NONE"},
      {[](fagen_fwd_problem &p) { p.sparsity = FAGEN_SPARSITY_RUNTIME; },
       "sparse_block (0) must be the block size of the runtime block mask"},
      {[](fagen_fwd_problem &p) { p.reserved0 = 1; }, "reserved0 (1) must be 0"},
  };
  for (const Case &c : cases) {
    fagen_fwd_problem p = testProblem();
    c.edit(p);
    std::string error = planError(p, FAGEN_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(error.find(std::string("fagen_plan_forward: ") + c.message), 0u) << error;
  }
}

TEST_F(BundleFixture, VarlenOutputsMayHaveNoBatchStride) {
  fagen_fwd_problem p = testProblem();
  p.varlen = 1;
  p.total_q = 1500;
  p.total_k = 900;
  fagen_fwd_problem_set_bshd_strides(&p);
  EXPECT_EQ(p.o_strides[0], 0);
  // Valid input: the test bundle has no varlen kernel, so the plan stops at the matching.
  std::string error = planError(p, FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_TRUE(contains(error, "serves fp16 head_dim 128/128 mask causal varlen;")) << error;
  EXPECT_TRUE(contains(error, "add a variant with dtype fp16, head_dim 128, mask causal and "
                              "varlen true to the spec"))
      << error;
}

namespace {

struct VariantFixture : ::testing::Test {
  void SetUp() override {
    std::vector<uint8_t> bytes = serializeBundle(makeVariantBundle());
    ASSERT_EQ(fagen_bundle_load_memory(bytes.data(), bytes.size(), &bundle), FAGEN_OK)
        << fagen_last_error();
  }
  void TearDown() override { fagen_bundle_destroy(bundle); }
  fagen_bundle *bundle = nullptr;
};

} // namespace

TEST_F(VariantFixture, KernelNamesSpellTheVariant) {
  EXPECT_EQ(std::string(fagen_bundle_kernel_name(bundle, 0)),
            "fagen_bwd_bf16_hd64_windowtl_softcap_drop_varlen_sm80 (bwd sm_90 bf16 head_dim "
            "64/64 mask window top_left softcap dropout varlen tile 64x128 warps 8 stages 2 smem "
            "81920)");
  EXPECT_TRUE(contains(fagen_bundle_kernel_name(bundle, 2), "mask causal deterministic tile"));
  EXPECT_TRUE(contains(fagen_bundle_kernel_name(bundle, 5),
                       "mask causal block_sparse static 128 layout 0123abcd tile"));
}

TEST_F(VariantFixture, MismatchedVariantsNameWhatTheBundleHas) {
  fagen_fwd_problem p = testProblem(FAGEN_DTYPE_FP16, 128, 0);
  p.mask = FAGEN_MASK_WINDOW;
  p.window_left = 256;
  fagen_plan plan;
  EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(std::string(fagen_last_error()),
            "no forward kernel in the bundle serves fp16 head_dim 128/128 mask window; the bundle "
            "has forward kernels for bf16 head_dim 64/64 mask window top_left softcap dropout "
            "varlen, fp16 head_dim 128/128 mask causal, fp16 head_dim 128/128 mask causal "
            "block_sparse static 128 layout 0123abcd, fp16 head_dim 128/128 mask none alibi "
            "block_sparse runtime 128: add a variant with dtype fp16, head_dim 128 and mask "
            "window to the spec and rebuild");

  // Each feature of the window kernel's variant is part of the match.
  fagen_fwd_problem w = testProblem(FAGEN_DTYPE_BF16, 64, 0);
  w.mask = FAGEN_MASK_WINDOW;
  w.mask_align = FAGEN_MASK_ALIGN_TOP_LEFT;
  w.score_mod = FAGEN_SCORE_MOD_SOFTCAP;
  w.softcap = 30;
  w.dropout_p = 0.1f;
  w.varlen = 1;
  w.total_q = 4000;
  w.total_k = 4000;
  fagen_fwd_problem_set_bshd_strides(&w);
  fagen_fwd_problem bottomRight = w;
  bottomRight.mask_align = FAGEN_MASK_ALIGN_BOTTOM_RIGHT;
  EXPECT_EQ(fagen_plan_forward(bundle, &bottomRight, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_TRUE(contains(fagen_last_error(), "add a variant with dtype bf16, head_dim 64, mask "
                                           "window, score_mod softcap, dropout true and varlen "
                                           "true to the spec"))
      << fagen_last_error();
  fagen_fwd_problem noDropout = w;
  noDropout.dropout_p = 0;
  EXPECT_EQ(fagen_plan_forward(bundle, &noDropout, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_TRUE(contains(fagen_last_error(), "serves bf16 head_dim 64/64 mask window top_left "
                                           "softcap varlen;"))
      << fagen_last_error();

  // A runtime block mask must have the kernel's block size.
  fagen_fwd_problem a = testProblem(FAGEN_DTYPE_FP16, 128, 0);
  a.score_mod = FAGEN_SCORE_MOD_ALIBI;
  a.sparsity = FAGEN_SPARSITY_RUNTIME;
  a.sparse_block = 64;
  EXPECT_EQ(fagen_plan_forward(bundle, &a, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_TRUE(contains(fagen_last_error(),
                       "add a variant with dtype fp16, head_dim 128, mask none, score_mod alibi "
                       "and block_sparse {block: 64, layout: runtime} to the spec"))
      << fagen_last_error();
}

TEST_F(VariantFixture, StaticLayoutsRefuseLongerCalls) {
  fagen_fwd_problem p = testProblem(FAGEN_DTYPE_FP16, 128, 1); // Sq 1000, Sk 577
  p.sparsity = FAGEN_SPARSITY_STATIC;
  p.seqlen_q = 1025;
  fagen_fwd_problem_set_bshd_strides(&p);
  fagen_plan plan;
  EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(std::string(fagen_last_error()),
            "kernel fagen_fwd_fp16_hd128_causal_bs128_0123abcd_sm80's static block layout covers "
            "1024 queries x 2048 keys (8 x 16 blocks of 128); the call has seqlen_q 1025 and "
            "seqlen_k 577: set block_sparse.max_seqlen in the spec to at least 1025 and rebuild");
  EXPECT_EQ(fagen_plan_forward_kernel(bundle, &p, 5, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_TRUE(contains(fagen_last_error(), "covers 1024 queries x 2048 keys"))
      << fagen_last_error();
  p.seqlen_q = 1000;
  p.sparse_hash = 0x12345678; // a layout the bundle does not have
  fagen_fwd_problem_set_bshd_strides(&p);
  EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_TRUE(contains(fagen_last_error(), "serves fp16 head_dim 128/128 mask causal "
                                           "block_sparse static layout 12345678;"))
      << fagen_last_error();
}

TEST_F(VariantFixture, BackwardMatchingAndValidation) {
  fagen_fwd_problem p = testProblem(FAGEN_DTYPE_FP16, 64, 0);
  fagen_plan plan;
  EXPECT_EQ(fagen_plan_backward(bundle, &p, 0, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(std::string(fagen_last_error()),
            "no backward kernel in the bundle serves fp16 head_dim 64/64 mask none; the bundle "
            "has backward kernels for bf16 head_dim 64/64 mask window top_left softcap dropout "
            "varlen, fp16 head_dim 128/128 mask causal, fp16 head_dim 128/128 mask causal "
            "deterministic: add a variant with dtype fp16, head_dim 64, mask none and passes "
            "[fwd, bwd] to the spec and rebuild");
  EXPECT_EQ(fagen_plan_backward(bundle, &p, 2, &plan), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_plan_backward: deterministic (2) must be 0 or 1");

  fagen_fwd_problem zero = testProblem();
  std::memset(zero.do_strides, 0, sizeof zero.do_strides);
  EXPECT_EQ(fagen_plan_backward(bundle, &zero, 0, &plan), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_plan_backward: do_strides are all 0: set them "
                                   "(fagen_fwd_problem_set_bshd_strides or _bhsd_strides fills "
                                   "every tensor's)");
  fagen_fwd_problem shared = testProblem();
  shared.dk_strides[1] = 0;
  EXPECT_EQ(fagen_plan_backward(bundle, &shared, 0, &plan), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_plan_backward: dk_strides[1] (head) is 0 but the head "
                                   "extent is 4: outputs would overwrite each other");
  // The forward does not read the gradients' strides: this one gets as far as the matching.
  fagen_fwd_problem forward = testProblem(FAGEN_DTYPE_FP16, 64, 0);
  std::memset(forward.dq_strides, 0, sizeof forward.dq_strides);
  EXPECT_EQ(fagen_plan_forward(bundle, &forward, &plan), FAGEN_ERROR_NOT_SUPPORTED);

  // A forward kernel is not a backward one.
  fagen_fwd_problem c = testProblem(FAGEN_DTYPE_FP16, 128, 1);
  EXPECT_EQ(fagen_plan_backward_kernel(bundle, &c, 0, 6, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_STREQ(fagen_last_error(), "kernel fagen_fwd_fp16_hd128_causal_sm80 is a fwd kernel for "
                                   "fp16 head_dim 128/128 mask causal; the call is a backward for "
                                   "fp16 head_dim 128/128 mask causal");
  EXPECT_EQ(fagen_plan_backward_kernel(bundle, &c, 1, 1, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  EXPECT_TRUE(contains(fagen_last_error(), "the call is a backward for fp16 head_dim 128/128 mask "
                                           "causal deterministic"))
      << fagen_last_error();
  EXPECT_EQ(fagen_plan_backward_kernel(bundle, &c, 0, 7, &plan), FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_plan_backward_kernel: kernel_index 7 is out of range "
                                   "[0, 7)");
}

TEST(RuntimeTest, BackwardParamsVersionIsChecked) {
  Bundle b = makeVariantBundle();
  b.kernels[1].paramsVersion = FAGEN_FWD_PARAMS_VERSION; // a bwd kernel with the fwd's version
  b.kernels[2].paramsVersion = FAGEN_FWD_PARAMS_VERSION;
  std::vector<uint8_t> bytes = serializeBundle(b);
  fagen_bundle *bundle = nullptr;
  ASSERT_EQ(fagen_bundle_load_memory(bytes.data(), bytes.size(), &bundle), FAGEN_OK);
  fagen_fwd_problem p = testProblem();
  fagen_plan plan;
  EXPECT_EQ(fagen_plan_backward(bundle, &p, 0, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  static_assert(FAGEN_FWD_PARAMS_VERSION != FAGEN_BWD_PARAMS_VERSION, "the test needs them apart");
  const std::string expected = "takes parameter layout version " +
                               std::to_string(FAGEN_FWD_PARAMS_VERSION) +
                               " but this runtime fills version " +
                               std::to_string(FAGEN_BWD_PARAMS_VERSION);
  EXPECT_TRUE(contains(fagen_last_error(), expected.c_str())) << fagen_last_error();
  fagen_bundle_destroy(bundle);
}

TEST(RuntimeTest, RunChecksTheVariantsArguments) {
  // A plan as fagen_plan_* leaves it; nothing here reaches the driver or the bundle.
  fagen_plan plan = {};
  plan.bundle = reinterpret_cast<const fagen_bundle *>(16);
  plan.function = reinterpret_cast<void *>(16);
  plan.run_args = FAGEN_RUN_ARG_ALIBI_SLOPES | FAGEN_RUN_ARG_DROPOUT_SEED;
  alignas(16) char buf[64] = {};
  float lse[4] = {};
  EXPECT_EQ(fagen_run_forward(&plan, buf, buf, buf, buf, lse, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_forward: the plan's variant reads run-time "
                                   "arguments (alibi_slopes, dropout_seed/_offset): call "
                                   "fagen_run_forward_with_args with a fagen_run_args");
  EXPECT_EQ(fagen_run_forward_with_args(&plan, buf, buf, buf, buf, lse, nullptr, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_forward_with_args: args is null but the plan's "
                                   "variant reads alibi_slopes, dropout_seed/_offset");
  fagen_run_args args = {};
  EXPECT_EQ(fagen_run_forward_with_args(&plan, buf, buf, buf, buf, lse, &args, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_forward_with_args: args->alibi_slopes is null");
  args.alibi_slopes = lse;
  args.alibi_batch_stride = -1;
  EXPECT_EQ(fagen_run_forward_with_args(&plan, buf, buf, buf, buf, lse, &args, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(fagen_last_error(), "args->alibi_batch_stride (-1) must be >= 0"));

  plan.run_args = FAGEN_RUN_ARG_CU_SEQLENS | FAGEN_RUN_ARG_BLOCK_MASK;
  args.block_mask = reinterpret_cast<const uint8_t *>(buf);
  args.block_mask_row_stride = -3;
  EXPECT_EQ(fagen_run_forward_with_args(&plan, buf, buf, buf, buf, lse, &args, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(fagen_last_error(), "args->block_mask_row_stride (-3) must be >= 0"));
  args.block_mask_row_stride = 8;
  int32_t cu[4] = {};
  args.cu_seqlens_q = cu;
  args.cu_seqlens_k = reinterpret_cast<const int32_t *>(buf + 2);
  EXPECT_EQ(fagen_run_forward_with_args(&plan, buf, buf, buf, buf, lse, &args, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(),
               "fagen_run_forward_with_args: args->cu_seqlens_k is not 4-byte aligned");

  // Plans of one pass do not run as the other.
  EXPECT_EQ(fagen_run_backward(&plan, buf, buf, buf, buf, lse, buf, buf, buf, buf, buf, &args,
                               nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_backward: the plan is a forward plan; make it with "
                                   "fagen_plan_backward");
  plan.pass = FAGEN_PASS_BACKWARD;
  EXPECT_EQ(fagen_run_forward(&plan, buf, buf, buf, buf, lse, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_forward: the plan is a backward plan; make it with "
                                   "fagen_plan_forward");
  EXPECT_EQ(fagen_run_backward(&plan, buf, buf, buf, buf, lse, buf, buf, buf, buf, buf, &args,
                               nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_backward: the plan was not filled by a successful "
                                   "fagen_plan_backward");
  plan.pre_function = plan.post_function = reinterpret_cast<void *>(16);
  plan.workspace_bytes = 4096;
  EXPECT_EQ(fagen_run_backward(&plan, buf, buf, buf, buf, lse, buf, buf, buf + 8, buf, buf,
                               &args, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_backward: dk is not 16-byte aligned");
  EXPECT_EQ(fagen_run_backward(&plan, buf, buf, buf, buf, lse, buf, buf, buf, buf, nullptr,
                               &args, nullptr),
            FAGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(fagen_last_error(), "fagen_run_backward: workspace is null (it must hold "
                                   "plan->workspace_bytes = 4096 bytes of device memory)");
}
