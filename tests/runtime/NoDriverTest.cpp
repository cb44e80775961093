//===- NoDriverTest.cpp - the runtime on a machine without a usable driver -===//
//
// The driver is opened once per process, so this is its own executable. ctest runs it with
// FAGEN_LIBCUDA=/nonexistent and, where the toolkit's stub libcuda.so exists, once more with
// FAGEN_LIBCUDA pointing at the stub. Run by hand it defaults to /nonexistent.
//
//===----------------------------------------------------------------------===//
#include "fagen/fagen.h"
#include "tests/common/TestBundles.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

using fagen::test::testBundleBytes;
using fagen::test::testProblem;

namespace {

bool usingStub() { return std::string(std::getenv("FAGEN_LIBCUDA")).find("stub") != std::string::npos; }

std::string expectedNoDriverStart() {
  if (usingStub())
    return std::string("the CUDA driver library ") + std::getenv("FAGEN_LIBCUDA") +
           " is the CUDA toolkit's stub, not a real driver (cuInit failed: "
           "CUDA_ERROR_STUB_LIBRARY (34))";
  return std::string("no CUDA driver found (dlopen ") + std::getenv("FAGEN_LIBCUDA") + ": ";
}

} // namespace

TEST(NoDriverTest, LoadWorksAndPlanSaysThereIsNoDriver) {
  std::vector<uint8_t> bytes = testBundleBytes();
  fagen_bundle *bundle = nullptr;
  ASSERT_EQ(fagen_bundle_load_memory(bytes.data(), bytes.size(), &bundle), FAGEN_OK)
      << fagen_last_error();
  EXPECT_EQ(fagen_bundle_kernel_count(bundle), 4);

  fagen_fwd_problem p = testProblem();
  fagen_plan plan;
  for (int attempt = 0; attempt < 2; ++attempt) { // the failure is remembered, not retried
    ASSERT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_ERROR_NO_DRIVER);
    std::string error = fagen_last_error();
    EXPECT_EQ(error.find(expectedNoDriverStart()), 0u) << error;
    EXPECT_NE(error.find("fagen needs an NVIDIA driver to run kernels; bundles can still be "
                         "built and inspected without one"),
              std::string::npos)
        << error;
  }

  // Broadcast K/V (zero batch stride) is valid input: the plan gets as far as the driver.
  p.k_strides[0] = p.v_strides[0] = 0;
  EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_ERROR_NO_DRIVER);

  // Kernel matching needs no GPU: an unsupported call says so even here.
  fagen_fwd_problem other = testProblem(FAGEN_DTYPE_BF16, 256, 0);
  EXPECT_EQ(fagen_plan_forward(bundle, &other, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  fagen_bundle_destroy(bundle);
}

TEST(NoDriverTest, RunSaysThereIsNoDriver) {
  fagen_plan plan = {};
  plan.struct_size = sizeof plan;
  plan.abi_tag = FAGEN_ABI_TAG;
  plan.bundle = reinterpret_cast<const fagen_bundle *>(16);
  plan.function = reinterpret_cast<void *>(16);
  alignas(16) char buffer[64] = {};
  float lse[4] = {};
  EXPECT_EQ(fagen_run_forward(&plan, buffer, buffer, buffer, buffer, lse, nullptr),
            FAGEN_ERROR_NO_DRIVER);
  EXPECT_EQ(std::string(fagen_last_error()).find(expectedNoDriverStart()), 0u);
}

TEST(NoDriverTest, BackwardSaysThereIsNoDriver) {
  std::vector<uint8_t> bytes = fagen::serializeBundle(fagen::test::makeVariantBundle());
  fagen_bundle *bundle = nullptr;
  ASSERT_EQ(fagen_bundle_load_memory(bytes.data(), bytes.size(), &bundle), FAGEN_OK)
      << fagen_last_error();
  fagen_fwd_problem p = testProblem();
  fagen_plan plan;
  EXPECT_EQ(fagen_plan_backward(bundle, &p, 0, &plan), FAGEN_ERROR_NO_DRIVER);
  EXPECT_EQ(std::string(fagen_last_error()).find(expectedNoDriverStart()), 0u);
  fagen_bundle_destroy(bundle);

  plan = {};
  plan.struct_size = sizeof plan;
  plan.abi_tag = FAGEN_ABI_TAG;
  plan.bundle = reinterpret_cast<const fagen_bundle *>(16);
  plan.pass = FAGEN_PASS_BACKWARD;
  plan.function = plan.pre_function = plan.post_function = reinterpret_cast<void *>(16);
  alignas(256) char buffer[256] = {};
  float lse[4] = {};
  EXPECT_EQ(fagen_run_backward(&plan, buffer, buffer, buffer, buffer, lse, buffer, buffer, buffer,
                               buffer, nullptr, 0, nullptr, nullptr),
            FAGEN_ERROR_NO_DRIVER);
  EXPECT_EQ(std::string(fagen_last_error()).find(expectedNoDriverStart()), 0u);
}

TEST(NoDriverTest, DecodeAndMergeSayThereIsNoDriver) {
  std::vector<uint8_t> bytes = fagen::serializeBundle(fagen::test::makeDecodeBundle());
  fagen_bundle *bundle = nullptr;
  ASSERT_EQ(fagen_bundle_load_memory(bytes.data(), bytes.size(), &bundle), FAGEN_OK)
      << fagen_last_error();
  fagen_merge_problem m = FAGEN_MERGE_PROBLEM_INIT;
  m.num_states = 2, m.batch = 1, m.heads = 8, m.seqlen = 1, m.head_dim = 128;
  fagen_merge_problem_set_bshd_strides(&m);
  fagen_plan plan;
  EXPECT_EQ(fagen_plan_merge_states(bundle, &m, &plan), FAGEN_ERROR_NO_DRIVER);
  EXPECT_EQ(std::string(fagen_last_error()).find(expectedNoDriverStart()), 0u);
  // The problem and the bundle's kernels are checked before the driver is needed.
  m.head_dim = 64;
  fagen_merge_problem_set_bshd_strides(&m);
  EXPECT_EQ(fagen_plan_merge_states(bundle, &m, &plan), FAGEN_ERROR_NOT_SUPPORTED);
  m.num_states = 0;
  EXPECT_EQ(fagen_plan_merge_states(bundle, &m, &plan), FAGEN_ERROR_INVALID_ARGUMENT);
  fagen_fwd_problem p = testProblem();
  p.seqlen_q = 1;
  fagen_fwd_problem_set_bshd_strides(&p);
  EXPECT_EQ(fagen_plan_forward(bundle, &p, &plan), FAGEN_ERROR_NO_DRIVER);
  fagen_bundle_destroy(bundle);
}

int main(int argc, char **argv) {
  setenv("FAGEN_LIBCUDA", "/nonexistent/libcuda.so.1", /*overwrite=*/0);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
