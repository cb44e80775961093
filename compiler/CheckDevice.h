//===- CheckDevice.h - `fagen check`: a case's device memory (internal) ----===//
//
// Shared by the forward (CheckForward.cpp) and backward (CheckBackward.cpp) cases: device
// allocations freed on scope exit, the upload of a case's tensors and run-time arguments, and
// the forward run whose O and LSE both use.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_COMPILER_CHECKDEVICE_H
#define FAGEN_COMPILER_CHECKDEVICE_H

#include "Check.h"

#include "llvm/Support/Error.h"

#include <vector>

namespace fagen {
namespace check {

/// A failed driver call as an error ("cuMemAlloc failed: CUDA_ERROR_...").
llvm::Error cudaError(const DriverApi &api, CUresult rc, const char *call);

/// Device allocations, freed when this goes out of scope.
class DeviceMemory {
public:
  explicit DeviceMemory(const DriverApi &api) : Api(api) {}
  DeviceMemory(const DeviceMemory &) = delete;
  DeviceMemory &operator=(const DeviceMemory &) = delete;
  ~DeviceMemory();

  /// `bytes` of device memory (256-byte aligned; at least 256 bytes, so never null).
  llvm::Expected<CUdeviceptr> alloc(size_t bytes);
  /// A device copy of `host`; 0 for an empty vector.
  template <class T> llvm::Expected<CUdeviceptr> upload(const std::vector<T> &host) {
    return uploadBytes(host.data(), host.size() * sizeof(T));
  }
  /// Fills `count` bytes at `ptr` with `value`.
  llvm::Error fill(CUdeviceptr ptr, unsigned char value, size_t count);
  /// Copies `host.size()` elements from `ptr` into `host`.
  template <class T> llvm::Error download(std::vector<T> &host, CUdeviceptr ptr) {
    return downloadBytes(host.data(), ptr, host.size() * sizeof(T));
  }
  llvm::Error synchronize();
  const DriverApi &api() const { return Api; }

private:
  llvm::Expected<CUdeviceptr> uploadBytes(const void *data, size_t bytes);
  llvm::Error downloadBytes(void *data, CUdeviceptr ptr, size_t bytes);

  const DriverApi &Api;
  std::vector<CUdeviceptr> Blocks;
};

inline void *devicePointer(CUdeviceptr p) { return reinterpret_cast<void *>(uintptr_t(p)); }

/// A case's inputs on the device: Q, K, V, O, LSE and the run-time arguments.
struct DeviceCase {
  CUdeviceptr q = 0, k = 0, v = 0, o = 0, lse = 0;
  fagen_run_args args{};
};

/// Uploads Q, K, V and the run-time arguments of `in` and allocates O and LSE.
llvm::Error uploadCase(DeviceMemory &memory, const CaseInputs &in, DeviceCase &d);

/// Launches the forward `plan` (fagen_run_forward for a dense kernel, else with the run-time
/// arguments; with `workspace` nonzero, fagen_run_forward_with_workspace).
fagen_status launchForward(const fagen_plan &plan, bool dense, const DeviceCase &d,
                           CUdeviceptr workspace);

/// Poisons O and LSE (0xFF bytes: NaN in fp16, bf16 and fp32), runs the forward `plan` (with
/// fagen_run_forward for a dense kernel, else with the run-time arguments) and waits. Then, on
/// grids of more than 3 CTAs: a `persistent` kernel's plan (at most one CTA per SM, walking the
/// static deal of work tiles) runs again on 3 CTAs (many tiles each); a plan with a workspace
/// (a tile counter) runs with one (poisoned) on the plan's grid and on 3 CTAs. Every run must
/// give the first one's bits; O and LSE are then the last run's. Returns "" or the runtime's
/// failure (or the disagreement); an error for a failed driver call.
llvm::Expected<std::string> runForward(DeviceMemory &memory, const fagen_plan &plan,
                                       bool dense, const CaseInputs &in, const DeviceCase &d,
                                       bool persistent = false);

/// "plan: FAGEN_ERROR_...: message" for a failed runtime call.
std::string runtimeFailure(const char *what, fagen_status status);

} // namespace check
} // namespace fagen

#endif // FAGEN_COMPILER_CHECKDEVICE_H
