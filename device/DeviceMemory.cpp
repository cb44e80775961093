//===- DeviceMemory.cpp - host-side device memory over the runtime's driver ===//

#include "device/DeviceMemory.h"

#include <algorithm>

namespace fagen {
namespace device {

llvm::Error cudaError(const DriverApi &api, CUresult rc, const char *call) {
  if (rc == CUDA_SUCCESS)
    return llvm::Error::success();
  return llvm::createStringError(std::errc::io_error, "%s",
                                 cudaErrorText(api, rc, call).c_str());
}

DeviceMemory::~DeviceMemory() {
  for (CUdeviceptr p : Blocks)
    Api.cuMemFree(p);
}

llvm::Expected<CUdeviceptr> DeviceMemory::alloc(size_t bytes) {
  CUdeviceptr p = 0;
  if (llvm::Error e = cudaError(Api, Api.cuMemAlloc(&p, std::max<size_t>(bytes, 256)),
                                "cuMemAlloc"))
    return e;
  Blocks.push_back(p);
  return p;
}

CUresult DeviceMemory::alloc(CUdeviceptr &out, size_t bytes) {
  CUresult r = Api.cuMemAlloc(&out, bytes);
  if (r == CUDA_SUCCESS)
    Blocks.push_back(out);
  return r;
}

llvm::Expected<CUdeviceptr> DeviceMemory::uploadBytes(const void *data, size_t bytes) {
  if (bytes == 0)
    return CUdeviceptr(0);
  llvm::Expected<CUdeviceptr> p = alloc(bytes);
  if (!p)
    return p.takeError();
  if (llvm::Error e = cudaError(Api, Api.cuMemcpyHtoD(*p, data, bytes), "cuMemcpyHtoD"))
    return e;
  return *p;
}

llvm::Error DeviceMemory::fill(CUdeviceptr ptr, unsigned char value, size_t count) {
  return cudaError(Api, Api.cuMemsetD8(ptr, value, count), "cuMemsetD8");
}

llvm::Error DeviceMemory::downloadBytes(void *data, CUdeviceptr ptr, size_t bytes) {
  return cudaError(Api, Api.cuMemcpyDtoH(data, ptr, bytes), "cuMemcpyDtoH");
}

llvm::Error DeviceMemory::synchronize() {
  return cudaError(Api, Api.cuCtxSynchronize(), "cuCtxSynchronize");
}

} // namespace device
} // namespace fagen
