//===- FakeCuda.h - what the fake libcuda records, for the test to inspect -===//
#ifndef FAGEN_TESTS_RUNTIME_FAKECUDA_H
#define FAGEN_TESTS_RUNTIME_FAKECUDA_H

#include "templates/abi/decode_params.h"

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

extern "C" {

/// One cuLaunchKernel or cuLaunchKernelEx call.
struct FakeLaunch {
  std::string function;
  unsigned grid[3], block[3], smem;
  void *stream;
  std::vector<unsigned char> params; ///< the parameter block as launched (decode kernels: the
                                     ///< whole fagen_decode_params / fagen_merge_params)
  std::vector<unsigned char> tmaMaps; ///< kernels named *_sm90ws_*: their second argument
  /// Launched by cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION set.
  bool programmaticDependent = false;
};

/// One cuMemsetD32Async call; `launchesBefore`: cuLaunchKernel calls made before it.
struct FakeMemset {
  unsigned long long dst;
  unsigned value;
  size_t count;
  void *stream;
  int launchesBefore;
};

/// One cuTensorMapEncodeTiled call.
struct FakeTensorMap {
  int dataType, swizzle, oobFill;
  unsigned rank;
  const void *address;
  unsigned long long dims[5], strides[4];
  unsigned box[5];
};

struct FakeCudaState {
  std::atomic<int> moduleLoads{0};
  std::atomic<int> moduleUnloads{0};
  std::atomic<int> launches{0};
  int maxDynamicSmem = -1; ///< last value set through cuFuncSetAttribute
  unsigned grid[3], block[3], smem;
  void *stream;
  std::string function;
  fagen_fwd_params params; ///< the last launch's block (of a backward or a decode kernel: its
                           ///< forward part; a merge's is in launchLog only)
  /// sizeof(fagen_bwd_params), set by the test: the fake, built without templates/ on its
  /// include path, cannot see bwd_params.h. Launches of kernels named fagen_bwd_* record this
  /// many bytes (0: only the forward part, which leads the backward's block).
  size_t bwdParamsBytes = 0;
  std::vector<FakeLaunch> launchLog; ///< every launch, in order
  /// Every cuTensorMapEncodeTiled call, in order ($FAKE_CUDA_TMA_ERROR: fail with that code).
  /// The map it writes holds the global address in its first 8 bytes.
  std::vector<FakeTensorMap> tensorMaps;
  /// Every cuMemsetD32Async call, in order ($FAKE_CUDA_MEMSET_ERROR: fail with that code).
  std::vector<FakeMemset> memsetLog;
};

/// Exported by the fake library; the test finds it with dlsym.
FakeCudaState *fake_cuda_state();
}

#endif // FAGEN_TESTS_RUNTIME_FAKECUDA_H
