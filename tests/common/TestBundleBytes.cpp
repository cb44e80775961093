#include "TestBundleBytes.h"
#include "TestBundles.h"

std::vector<uint8_t> fagenTestBundleBytes() { return fagen::test::testBundleBytes(); }

fagen_fwd_problem fagenTestProblem(fagen_dtype dtype, int headDim, int causal) {
  return fagen::test::testProblem(dtype, headDim, causal);
}
