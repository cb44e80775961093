//===- WriteTestBundle.cpp - writes the test bundles (fuzz seeds, Python tests) -===//
//
// Usage: fagen_write_test_bundle DIR  -> DIR/test.fab (4 kernels, fake cubins), DIR/tiny.fab,
//        DIR/variants.fab (every variant kind, forward and backward), DIR/paged.fab (decode
//        kernels, contiguous and paged)
//
//===----------------------------------------------------------------------===//
#include "tests/common/TestBundles.h"

#include <cstdio>
#include <string>

static bool write(const std::string &path, const std::vector<uint8_t> &bytes) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (f == nullptr)
    return false;
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  if (!write(dir + "/test.fab", fagen::test::testBundleBytes()) ||
      !write(dir + "/tiny.fab", fagen::serializeBundle(fagen::test::makeTinyBundle())) ||
      !write(dir + "/variants.fab", fagen::serializeBundle(fagen::test::makeVariantBundle())) ||
      !write(dir + "/paged.fab", fagen::serializeBundle(fagen::test::makePagedDecodeBundle()))) {
    std::fprintf(stderr, "%s: cannot write to %s\n", argv[0], dir.c_str());
    return 1;
  }
  return 0;
}
