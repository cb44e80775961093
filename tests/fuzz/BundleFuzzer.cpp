//===- BundleFuzzer.cpp - libFuzzer target for the bundle loader -----------===//
//
// parseBundle must turn any bytes into either a bundle or a message, never a crash, a leak or
// undefined behaviour; and it accepts only the canonical encoding: an accepted input is exactly
// what serializeBundle writes for the parsed bundle. Built with
// FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION, under which the loader skips checksum comparison
// so that mutations reach the section and manifest checks; checksum fields are therefore
// left out of the byte comparison. An accepted manifest must also keep the semantic rules
// (possible head dims, no kernel recorded twice). Seeds are written at build time by
// fagen_bundle_fuzz_seeds and fagen_bundle_semantic_seeds (tests/fuzz/BundleSeeds.cpp).
// Run: build-fuzz/tests/fuzz/fagen_bundle_fuzzer -dict=tests/fuzz/bundle.dict NEW_CORPUS_DIR
// build-fuzz/tests/fuzz/bundle_seeds
//
//===----------------------------------------------------------------------===//
#include "compiler/bundle/Bundle.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace fagen;

namespace {

[[noreturn]] void fail(const char *what) {
  std::fprintf(stderr, "bundle fuzzer: invariant violated: %s\n", what);
  std::abort();
}

/// Zeroes the header checksum and every section checksum of a well-formed bundle.
void clearChecksums(std::vector<uint8_t> &b) {
  uint32_t count = 0;
  std::memcpy(&count, b.data() + 12, 4); // little-endian host, as the format
  std::memset(b.data() + 16, 0, 8);
  for (uint32_t i = 0; i < count; ++i)
    std::memset(b.data() + 24 + 32 * size_t(i) + 24, 0, 8);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Bundle bundle;
  std::string error;
  if (!parseBundle(data, size, bundle, error)) {
    if (error.empty())
      fail("refused without a message");
    return 0;
  }
  if (!error.empty())
    fail("accepted but left a message");
  // The semantic rules, checked apart from the reader: head dims a template exists for, and
  // no kernel (name, arch, seqlen range) twice.
  for (size_t i = 0; i < bundle.kernels.size(); ++i) {
    const KernelRecord &k = bundle.kernels[i];
    for (int dim : {k.headDimQK, k.headDimV})
      if (dim % 8 != 0 || dim < 32 || dim > 256)
        fail("accepted an impossible head dim");
    for (size_t j = 0; j < i; ++j) {
      const KernelRecord &o = bundle.kernels[j];
      if (o.name == k.name && o.arch == k.arch && o.seqlenMin == k.seqlenMin &&
          o.seqlenMax == k.seqlenMax)
        fail("accepted a kernel recorded twice");
    }
  }
  std::vector<uint8_t> written = serializeBundle(bundle);
  std::vector<uint8_t> input(data, data + size);
  clearChecksums(written);
  clearChecksums(input);
  if (written != input)
    fail("accepted a non-canonical encoding");
  return 0;
}
