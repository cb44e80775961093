//===- NoDriverWrapperTest.cpp - fagen.hpp without a driver ----------------===//
#include "fagen/fagen.hpp"
#include "tests/common/TestBundleBytes.h"

#include <gtest/gtest.h>

#include <string>

TEST(NoDriverTest, CppWrapperThrowsTheStatusAndMessage) {
  std::vector<uint8_t> bytes = fagenTestBundleBytes();
  fagen::Bundle bundle = fagen::Bundle::fromMemory(bytes.data(), bytes.size());
  EXPECT_EQ(bundle.kernelCount(), 4);
  try {
    bundle.planForward(fagenTestProblem(FAGEN_DTYPE_FP16, 128, 1));
    FAIL() << "planForward did not throw";
  } catch (const fagen::Error &e) {
    EXPECT_EQ(e.status(), FAGEN_ERROR_NO_DRIVER);
    EXPECT_EQ(std::string(e.what()).find("FAGEN_ERROR_NO_DRIVER: "), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("fagen needs an NVIDIA driver"), std::string::npos);
  }
  try {
    fagen::Bundle::load("/nonexistent.fab");
    FAIL() << "load did not throw";
  } catch (const fagen::Error &e) {
    EXPECT_EQ(e.status(), FAGEN_ERROR_IO);
  }
  EXPECT_THROW(bundle.kernelName(99), fagen::Error);
}
