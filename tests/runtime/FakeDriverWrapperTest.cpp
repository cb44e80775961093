//===- FakeDriverWrapperTest.cpp - fagen.hpp against the fake driver -------===//
#include "fagen/fagen.hpp"
#include "FakeCuda.h"
#include "../common/TestBundleBytes.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <dlfcn.h>

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
  try {
    b.planForward(fagenTestProblem(FAGEN_DTYPE_FP16, 96, 1));
    FAIL() << "no exception";
  } catch (const fagen::Error &e) {
    EXPECT_EQ(e.status(), FAGEN_ERROR_NOT_SUPPORTED);
  }
  fagen::Bundle moved = std::move(b);
  EXPECT_EQ(moved.kernelCount(), 4);
}
