//===- BundleSeeds.cpp - bundle fuzzer seeds at the manifest's semantic edges -===//
//
// Usage: fagen_bundle_semantic_seeds DIR -> DIR/buckets.fab: one kernel in two seqlen buckets
// (a name that may repeat with another range, one step from a duplicated record) and the
// extreme head dims 32 and 256 (one step from impossible ones), so that mutations reach the
// reader's semantic checks.
//
//===----------------------------------------------------------------------===//
#include "tests/common/TestBundles.h"

#include <cstdio>
#include <string>

int main(int argc, char **argv) {
  using namespace fagen;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  Bundle b;
  b.fagenVersion = "0.1.0";
  b.toolchain = "nvcc 13.0.88";
  b.archs = {"sm_80"};
  b.cubins = {test::fakeCubin("short"), test::fakeCubin("long")};
  KernelRecord shortSeqs = test::testKernel("fagen_fwd_bf16_d32_none_sm80", "sm_80", "bf16", 32,
                                            "none", 0);
  shortSeqs.seqlenMin = 1;
  shortSeqs.seqlenMax = 4096;
  KernelRecord longSeqs = shortSeqs;
  longSeqs.seqlenMin = 4097;
  longSeqs.seqlenMax = kSeqlenUnbounded;
  longSeqs.cubinSection = 1;
  b.kernels = {shortSeqs, longSeqs,
               test::testKernel("fagen_fwd_fp16_d256_causal_sm80", "sm_80", "fp16", 256, "causal",
                                1)};
  std::vector<uint8_t> bytes = serializeBundle(b);
  std::string path = std::string(argv[1]) + "/buckets.fab";
  FILE *f = std::fopen(path.c_str(), "wb");
  bool ok = f && std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (f == nullptr || std::fclose(f) != 0 || !ok) {
    std::fprintf(stderr, "%s: cannot write %s\n", argv[0], path.c_str());
    return 1;
  }
  return 0;
}
