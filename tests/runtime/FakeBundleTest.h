//===- FakeBundleTest.h - a test fixture over one bundle and the fake libcuda -===//
//
// The fixture of the fake-driver tests (FakeDriverTest.cpp, FakeDecodeTest.cpp,
// FakePagedTest.cpp): the fake's state, its FAKE_CUDA_* variables cleared, a bundle loaded from
// memory, destroyed after the test.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_TESTS_RUNTIME_FAKEBUNDLETEST_H
#define FAGEN_TESTS_RUNTIME_FAKEBUNDLETEST_H

#include "FakeCuda.h"
#include "compiler/bundle/Bundle.h"
#include "fagen/fagen.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <dlfcn.h>
#include <string>
#include <vector>

namespace fagen::test {

/// The fake libcuda's state (tests/runtime/FakeCuda.h), from the library the runtime loads
/// (FAGEN_LIBCUDA).
inline FakeCudaState &fake() {
  static FakeCudaState *state = [] {
    void *lib = dlopen(std::getenv("FAGEN_LIBCUDA"), RTLD_NOW | RTLD_LOCAL);
    auto get = reinterpret_cast<FakeCudaState *(*)()>(dlsym(lib, "fake_cuda_state"));
    return get();
  }();
  return *state;
}

/// Loads `initial()` before each test (the fake's device as it starts: no FAKE_CUDA_CC,
/// FAKE_CUDA_SMEM or FAKE_CUDA_LAUNCH_ERROR); `load` replaces it.
struct FakeBundleTest : ::testing::Test {
  virtual Bundle initial() const = 0;
  void SetUp() override {
    unsetenv("FAKE_CUDA_CC");
    unsetenv("FAKE_CUDA_SMEM");
    unsetenv("FAKE_CUDA_LAUNCH_ERROR");
    load(initial());
  }
  void TearDown() override { fagen_bundle_destroy(bundle); }

  void load(const Bundle &b) {
    fagen_bundle_destroy(bundle);
    std::vector<uint8_t> bytes = serializeBundle(b);
    ASSERT_EQ(fagen_bundle_load_memory(bytes.data(), bytes.size(), &bundle), FAGEN_OK)
        << fagen_last_error();
  }

  /// The name of the kernel a plan chose (the bundle's kernel name, up to its first space).
  std::string chosenKernel(const fagen_plan &plan) const {
    std::string d = fagen_bundle_kernel_name(bundle, plan.kernel_index);
    return d.substr(0, d.find(' '));
  }

  fagen_bundle *bundle = nullptr;
};

} // namespace fagen::test

#endif // FAGEN_TESTS_RUNTIME_FAKEBUNDLETEST_H
