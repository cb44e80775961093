//===- FakeCuda.h - what the fake libcuda records, for the test to inspect -===//
#ifndef FAGEN_TESTS_RUNTIME_FAKECUDA_H
#define FAGEN_TESTS_RUNTIME_FAKECUDA_H

#include "fwd_params.h"

#include <atomic>
#include <string>

extern "C" {

struct FakeCudaState {
  std::atomic<int> moduleLoads{0};
  std::atomic<int> moduleUnloads{0};
  std::atomic<int> launches{0};
  int maxDynamicSmem = -1; ///< last value set through cuFuncSetAttribute
  unsigned grid[3], block[3], smem;
  void *stream;
  std::string function;
  fagen_fwd_params params;
};

/// Exported by the fake library; the test finds it with dlsym.
FakeCudaState *fake_cuda_state();
}

#endif // FAGEN_TESTS_RUNTIME_FAKECUDA_H
