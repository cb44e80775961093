//===- Driver.cpp - open libcuda at run time -------------------------------===//
#include "runtime/src/Driver.h"

#include <cstdlib>
#include <dlfcn.h>
#include <mutex>

namespace fagen {
namespace {

constexpr const char *kNoDriverHint =
    "fagen needs an NVIDIA driver to run kernels; bundles can still be built and inspected "
    "without one";

/// Names for the codes fagen explains itself, used when the driver cannot name them (the stub
/// library cannot).
const char *knownErrorName(int result) {
  switch (result) {
  case CUDA_SUCCESS:
    return "CUDA_SUCCESS";
  case CUDA_ERROR_NOT_INITIALIZED:
    return "CUDA_ERROR_NOT_INITIALIZED";
  case CUDA_ERROR_DEINITIALIZED:
    return "CUDA_ERROR_DEINITIALIZED";
  case CUDA_ERROR_STUB_LIBRARY:
    return "CUDA_ERROR_STUB_LIBRARY";
  case CUDA_ERROR_INSUFFICIENT_DRIVER:
    return "CUDA_ERROR_INSUFFICIENT_DRIVER";
  case CUDA_ERROR_NO_DEVICE:
    return "CUDA_ERROR_NO_DEVICE";
  case CUDA_ERROR_INVALID_CONTEXT:
    return "CUDA_ERROR_INVALID_CONTEXT";
  case CUDA_ERROR_NO_BINARY_FOR_GPU:
    return "CUDA_ERROR_NO_BINARY_FOR_GPU";
  default:
    return nullptr;
  }
}

template <typename Fn> bool bind(void *lib, const char *symbol, Fn &slot, std::string &missing) {
  slot = reinterpret_cast<Fn>(dlsym(lib, symbol));
  if (slot == nullptr && missing.empty())
    missing = symbol;
  return slot != nullptr;
}

bool bindAll(void *lib, DriverApi &api, std::string &missing) {
  bind(lib, "cuInit", api.cuInit, missing);
  bind(lib, "cuDriverGetVersion", api.cuDriverGetVersion, missing);
  bind(lib, "cuDeviceGet", api.cuDeviceGet, missing);
  bind(lib, "cuDeviceGetCount", api.cuDeviceGetCount, missing);
  bind(lib, "cuDeviceGetName", api.cuDeviceGetName, missing);
  bind(lib, "cuDeviceGetAttribute", api.cuDeviceGetAttribute, missing);
  bind(lib, "cuCtxGetCurrent", api.cuCtxGetCurrent, missing);
  bind(lib, "cuCtxSetCurrent", api.cuCtxSetCurrent, missing);
  bind(lib, "cuCtxGetDevice", api.cuCtxGetDevice, missing);
  bind(lib, "cuCtxSynchronize", api.cuCtxSynchronize, missing);
  bind(lib, "cuDevicePrimaryCtxRetain", api.cuDevicePrimaryCtxRetain, missing);
  bind(lib, "cuModuleLoadData", api.cuModuleLoadData, missing);
  bind(lib, "cuModuleGetFunction", api.cuModuleGetFunction, missing);
  bind(lib, "cuModuleUnload", api.cuModuleUnload, missing);
  bind(lib, "cuFuncSetAttribute", api.cuFuncSetAttribute, missing);
  bind(lib, "cuFuncGetAttribute", api.cuFuncGetAttribute, missing);
  bind(lib, "cuLaunchKernel", api.cuLaunchKernel, missing);
  bind(lib, "cuGetErrorName", api.cuGetErrorName, missing);
  bind(lib, "cuGetErrorString", api.cuGetErrorString, missing);
  bind(lib, "cuMemAlloc_v2", api.cuMemAlloc, missing);
  bind(lib, "cuMemFree_v2", api.cuMemFree, missing);
  bind(lib, "cuMemcpyHtoD_v2", api.cuMemcpyHtoD, missing);
  bind(lib, "cuMemcpyDtoH_v2", api.cuMemcpyDtoH, missing);
  bind(lib, "cuMemsetD8_v2", api.cuMemsetD8, missing);
  bind(lib, "cuMemsetD32Async", api.cuMemsetD32Async, missing);
  bind(lib, "cuEventCreate", api.cuEventCreate, missing);
  bind(lib, "cuEventRecord", api.cuEventRecord, missing);
  bind(lib, "cuEventSynchronize", api.cuEventSynchronize, missing);
  bind(lib, "cuEventDestroy_v2", api.cuEventDestroy, missing);
  bind(lib, "cuStreamSynchronize", api.cuStreamSynchronize, missing);
  std::string optional;
  bind(lib, "cuTensorMapEncodeTiled", api.cuTensorMapEncodeTiled, optional);
  bind(lib, "cuCtxGetId", api.cuCtxGetId, optional);
  bind(lib, "cuLaunchKernelEx", api.cuLaunchKernelEx, optional);
  if (!bind(lib, "cuEventElapsedTime_v2", api.cuEventElapsedTime, optional))
    bind(lib, "cuEventElapsedTime", api.cuEventElapsedTime, missing);
  return missing.empty();
}

std::string initFailure(const DriverApi &api, int result, const char *path) {
  std::string call = cudaErrorText(api, result, "cuInit");
  if (result == CUDA_ERROR_STUB_LIBRARY)
    return std::string("the CUDA driver library ") + path +
           " is the CUDA toolkit's stub, not a real driver (" + call + "): " + kNoDriverHint;
  if (result == CUDA_ERROR_NO_DEVICE)
    return "the CUDA driver sees no GPU (" + call +
           "): check nvidia-smi and CUDA_VISIBLE_DEVICES; bundles can still be built and "
           "inspected without a GPU";
  if (result == CUDA_ERROR_INSUFFICIENT_DRIVER)
    return "the NVIDIA driver is older than this CUDA version needs (" + call +
           "): update the driver";
  return "the CUDA driver failed to initialize (" + call + "): " + kNoDriverHint;
}

} // namespace

bool loadDriver(const char *path, DriverApi &api, std::string &error) {
  api = DriverApi();
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char *why = dlerror();
    error = std::string("no CUDA driver found (dlopen ") + path + ": " +
            (why ? why : "unknown error") + "): " + kNoDriverHint;
    return false;
  }
  api.path = path;
  std::string missing;
  if (!bindAll(lib, api, missing)) {
    error = std::string("the CUDA driver ") + path + " lacks the entry point " + missing +
            ": the NVIDIA driver is too old for fagen; update it";
    return false;
  }
  if (CUresult r = api.cuInit(0); r != CUDA_SUCCESS) {
    error = initFailure(api, r, path);
    return false;
  }
  if (CUresult r = api.cuDriverGetVersion(&api.driverVersion); r != CUDA_SUCCESS) {
    error = cudaErrorText(api, r, "cuDriverGetVersion") + ": " + kNoDriverHint;
    return false;
  }
  return true;
}

const DriverApi *getDriver(std::string &error) {
  static std::once_flag once;
  static DriverApi api;
  static bool loaded = false;
  static std::string loadError;
  std::call_once(once, [] {
    const char *path = std::getenv("FAGEN_LIBCUDA");
    loaded = loadDriver(path && *path ? path : "libcuda.so.1", api, loadError);
  });
  if (!loaded) {
    error = loadError;
    return nullptr;
  }
  return &api;
}

std::string cudaErrorText(const DriverApi &api, int result, const char *call) {
  const char *name = nullptr, *text = nullptr;
  if (api.cuGetErrorName == nullptr || api.cuGetErrorName(result, &name) != CUDA_SUCCESS)
    name = nullptr;
  if (api.cuGetErrorString == nullptr || api.cuGetErrorString(result, &text) != CUDA_SUCCESS)
    text = nullptr;
  if (name == nullptr)
    name = knownErrorName(result);
  std::string out = std::string(call) + " failed: " + (name ? name : "CUDA error") + " (" +
                    std::to_string(result) + ")";
  if (text != nullptr)
    out += std::string(": ") + text;
  return out;
}

} // namespace fagen
