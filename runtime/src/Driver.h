//===- Driver.h - the CUDA driver, opened at run time ----------------------===//
//
// The runtime and the tools (`fagen check`) reach the GPU only through this table of driver
// entry points, filled by dlopen("libcuda.so.1") + dlsym. Nothing here needs the CUDA toolkit
// headers: the few driver types and constants are declared below with their values from
// cuda.h (CUDA 13.0). Without a driver, getDriver() returns null with a message, never crashes.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_RUNTIME_DRIVER_H
#define FAGEN_RUNTIME_DRIVER_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace fagen {

// Driver API types, ABI-compatible with cuda.h.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
using CUevent = struct CUevent_st *;

// CUresult values (cuda.h, enum cudaError_enum).
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
constexpr CUresult CUDA_ERROR_DEINITIALIZED = 4;
constexpr CUresult CUDA_ERROR_STUB_LIBRARY = 34;
constexpr CUresult CUDA_ERROR_INSUFFICIENT_DRIVER = 35;
constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
constexpr CUresult CUDA_ERROR_INVALID_CONTEXT = 201;
constexpr CUresult CUDA_ERROR_NO_BINARY_FOR_GPU = 209;

// CUfunction_attribute / CUdevice_attribute values used by fagen.
constexpr int CU_FUNC_ATTRIBUTE_NUM_REGS = 4;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;

// CUevent_flags.
constexpr unsigned CU_EVENT_DEFAULT = 0;

// cuLaunchKernelEx's configuration (cuda.h: CUlaunchAttribute_st, CUlaunchConfig_st), with the
// one attribute fagen sets: CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (value: an
// int, nonzero = the kernel may start before the previous one in the stream ends, as its
// programmatic dependent; sm_90+).
constexpr int CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;
struct CUlaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int programmaticStreamSerializationAllowed;
  } value;
};
struct CUlaunchConfig {
  unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute *attrs;
  unsigned numAttrs;
};
static_assert(sizeof(CUlaunchAttribute) == 72 && sizeof(CUlaunchConfig) == 56,
              "CUlaunchAttribute / CUlaunchConfig must match cuda.h's layout");

/// The driver entry points fagen uses. Every pointer is non-null in a table getDriver returns,
/// except those marked optional.
struct DriverApi {
  CUresult (*cuInit)(unsigned flags);
  CUresult (*cuDriverGetVersion)(int *version);
  CUresult (*cuDeviceGet)(CUdevice *device, int ordinal);
  CUresult (*cuDeviceGetCount)(int *count);
  CUresult (*cuDeviceGetName)(char *name, int length, CUdevice device);
  CUresult (*cuDeviceGetAttribute)(int *value, int attribute, CUdevice device);
  CUresult (*cuCtxGetCurrent)(CUcontext *ctx);
  CUresult (*cuCtxSetCurrent)(CUcontext ctx);
  CUresult (*cuCtxGetDevice)(CUdevice *device);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice device);
  CUresult (*cuModuleLoadData)(CUmodule *module, const void *image);
  CUresult (*cuModuleGetFunction)(CUfunction *function, CUmodule module, const char *name);
  CUresult (*cuModuleUnload)(CUmodule module);
  CUresult (*cuFuncSetAttribute)(CUfunction function, int attribute, int value);
  CUresult (*cuFuncGetAttribute)(int *value, int attribute, CUfunction function);
  CUresult (*cuLaunchKernel)(CUfunction f, unsigned gridX, unsigned gridY, unsigned gridZ,
                             unsigned blockX, unsigned blockY, unsigned blockZ,
                             unsigned sharedMemBytes, CUstream stream, void **kernelParams,
                             void **extra);
  CUresult (*cuGetErrorName)(CUresult error, const char **name);
  CUresult (*cuGetErrorString)(CUresult error, const char **text);
  // For tools: memory, events, synchronization.
  CUresult (*cuMemAlloc)(CUdeviceptr *ptr, size_t bytes);                    // cuMemAlloc_v2
  CUresult (*cuMemFree)(CUdeviceptr ptr);                                    // cuMemFree_v2
  CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void *src, size_t bytes);  // _v2
  CUresult (*cuMemcpyDtoH)(void *dst, CUdeviceptr src, size_t bytes);        // _v2
  CUresult (*cuMemsetD8)(CUdeviceptr dst, unsigned char value, size_t count); // _v2
  CUresult (*cuMemsetD32Async)(CUdeviceptr dst, unsigned value, size_t count, CUstream stream);
  CUresult (*cuEventCreate)(CUevent *event, unsigned flags);
  CUresult (*cuEventRecord)(CUevent event, CUstream stream);
  CUresult (*cuEventSynchronize)(CUevent event);
  /// cuEventElapsedTime_v2 where the driver has it (>= 12.8), else cuEventElapsedTime.
  CUresult (*cuEventElapsedTime)(float *ms, CUevent start, CUevent end);
  CUresult (*cuEventDestroy)(CUevent event);                                 // _v2
  CUresult (*cuStreamSynchronize)(CUstream stream);
  /// Optional (null when the driver lacks it, before CUDA 12.0): the TMA kernels' tensor maps
  /// (TmaMaps.h).
  CUresult (*cuTensorMapEncodeTiled)(void *map, int dataType, unsigned rank, void *address,
                                     const uint64_t *dims, const uint64_t *strides,
                                     const uint32_t *box, const uint32_t *elementStrides,
                                     int interleave, int swizzle, int l2Promotion, int oobFill);
  /// Optional (CUDA >= 12.0): launches with attributes (programmatic dependent launches); the
  /// runtime launches with cuLaunchKernel where it is null.
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                               void **extra);
  /// Optional (CUDA >= 12.0): a context's process-unique id, which a context created where a
  /// destroyed one was does not share (the module cache's key).
  CUresult (*cuCtxGetId)(CUcontext ctx, unsigned long long *id);

  int driverVersion = 0; ///< from cuDriverGetVersion, e.g. 13000
  std::string path;      ///< the library that was opened
};

/// The process-wide driver: opened once (thread-safe) from $FAGEN_LIBCUDA or "libcuda.so.1",
/// with cuInit(0) done. Returns null and sets `error` if there is no usable driver or no device;
/// the outcome is fixed for the life of the process.
const DriverApi *getDriver(std::string &error);

/// Opens the driver library at `path` and runs cuInit(0), without caching: for tests and tools
/// that want to probe a specific library. The library stays loaded. Returns false with a message
/// on failure.
bool loadDriver(const char *path, DriverApi &api, std::string &error);

/// "cuModuleLoadData failed: CUDA_ERROR_NO_BINARY_FOR_GPU (209): no kernel image is available
/// for execution on the device".
std::string cudaErrorText(const DriverApi &api, int result, const char *call);

} // namespace fagen

#endif // FAGEN_RUNTIME_DRIVER_H
