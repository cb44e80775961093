//===- TestBundleBytes.h - the test bundle as bytes, without Bundle.h ------===//
//
// For tests of the C++ wrapper (fagen.hpp), whose fagen::Bundle cannot share a translation
// unit with the data model's fagen::Bundle (compiler/bundle/Bundle.h).
#ifndef FAGEN_TESTS_COMMON_TESTBUNDLEBYTES_H
#define FAGEN_TESTS_COMMON_TESTBUNDLEBYTES_H

#include "fagen/fagen.h"

#include <cstdint>
#include <vector>

/// fagen::test::testBundleBytes(), serializeBundle(makeVariantBundle()),
/// serializeBundle(makeDecodeBundle()) and fagen::test::testProblem(), defined in
/// TestBundleBytes.cpp.
std::vector<uint8_t> fagenTestBundleBytes();
std::vector<uint8_t> fagenVariantBundleBytes();
std::vector<uint8_t> fagenDecodeBundleBytes();
std::vector<uint8_t> fagenPagedDecodeBundleBytes(); // serializeBundle(makePagedDecodeBundle())
fagen_fwd_problem fagenTestProblem(fagen_dtype dtype, int headDim, int causal);

#endif // FAGEN_TESTS_COMMON_TESTBUNDLEBYTES_H
