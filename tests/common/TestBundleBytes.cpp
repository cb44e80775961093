#include "TestBundleBytes.h"
#include "TestBundles.h"

std::vector<uint8_t> fagenTestBundleBytes() { return fagen::test::testBundleBytes(); }

std::vector<uint8_t> fagenVariantBundleBytes() {
  return fagen::serializeBundle(fagen::test::makeVariantBundle());
}

std::vector<uint8_t> fagenDecodeBundleBytes() {
  return fagen::serializeBundle(fagen::test::makeDecodeBundle());
}

std::vector<uint8_t> fagenPagedDecodeBundleBytes() {
  return fagen::serializeBundle(fagen::test::makePagedDecodeBundle());
}

fagen_fwd_problem fagenTestProblem(fagen_dtype dtype, int headDim, int causal) {
  return fagen::test::testProblem(dtype, headDim, causal);
}
