//===- DeviceMemory.h - host-side device memory over the runtime's driver --===//
//
// The device layer that `fagen check` and `fagen tune` share: device allocations freed on scope
// exit, uploads and downloads, and driver failures as errors. The driver itself is the one the
// runtime loads (runtime/src/Driver.h).
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_DEVICE_DEVICEMEMORY_H
#define FAGEN_DEVICE_DEVICEMEMORY_H

#include "runtime/src/Driver.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace fagen {
namespace device {

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
  /// Exactly `bytes` of device memory into `out`, for callers that report the driver's result
  /// themselves; freed with the rest on success.
  CUresult alloc(CUdeviceptr &out, size_t bytes);
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

} // namespace device
} // namespace fagen

#endif // FAGEN_DEVICE_DEVICEMEMORY_H
