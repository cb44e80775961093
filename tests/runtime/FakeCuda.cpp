//===- FakeCuda.cpp - a stand-in libcuda for testing the runtime without a GPU -===//
//
// Implements the driver entry points the runtime binds, with one device whose compute
// capability ($FAKE_CUDA_CC, default 90) and opt-in shared memory ($FAKE_CUDA_SMEM, default
// 232448) are read on every call, so that one test process can play several GPUs. Records
// module loads and every launch (function, geometry, parameter block) for the test to inspect
// through fake_cuda_state(); fake_cuda_launch_count() and fake_cuda_launch() serve callers
// without C++ (the Python binding's test). The
// context and synchronization entry points, alike in every fake, are in
// tests/common/FakeDriverCommon.h.
//
//===----------------------------------------------------------------------===//
#include "FakeCuda.h"

#include "tests/common/FakeDriverCommon.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

namespace {

struct FakeFunction {
  std::string name;
};

int envInt(const char *name, int fallback) {
  const char *v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

} // namespace

extern "C" {

__attribute__((visibility("default"))) FakeCudaState *fake_cuda_state() {
  static FakeCudaState state;
  return &state;
}

/// For ctypes: how many launches were logged, and launch i's function name, grid and the
/// first `bytes` bytes of its parameter block (fewer if the block is shorter). Returns 0 on
/// success, 1 if there is no launch i.
__attribute__((visibility("default"))) int fake_cuda_launch_count() {
  return int(fake_cuda_state()->launchLog.size());
}
__attribute__((visibility("default"))) int fake_cuda_launch(int i, char *name, size_t nameBytes,
                                                            unsigned grid[3], unsigned block[3],
                                                            void *params, size_t bytes) {
  const std::vector<FakeLaunch> &log = fake_cuda_state()->launchLog;
  if (i < 0 || size_t(i) >= log.size())
    return 1;
  const FakeLaunch &l = log[i];
  std::snprintf(name, nameBytes, "%s", l.function.c_str());
  for (int d = 0; d < 3; ++d)
    grid[d] = l.grid[d], block[d] = l.block[d];
  std::memcpy(params, l.params.data(), std::min(bytes, l.params.size()));
  return 0;
}

FAKE_API CUresult cuInit(unsigned) { return envInt("FAKE_CUDA_INIT_ERROR", 0); }
FAKE_API CUresult cuDeviceGetCount(int *n) {
  *n = envInt("FAKE_CUDA_DEVICES", 1);
  return 0;
}
FAKE_API CUresult cuDeviceGetName(char *name, int length, int) {
  std::strncpy(name, "Fake H200", size_t(length));
  return 0;
}
FAKE_API CUresult cuDeviceGetAttribute(int *value, int attribute, int) {
  int cc = envInt("FAKE_CUDA_CC", 90);
  switch (attribute) {
  case 75:
    *value = cc / 10;
    return 0;
  case 76:
    *value = cc % 10;
    return 0;
  case 97:
    *value = envInt("FAKE_CUDA_SMEM", 232448);
    return 0;
  case 16:
    *value = 132;
    return 0;
  }
  return 1;
}
FAKE_API CUresult cuModuleLoadData(void **module, const void *image) {
  if (std::memcmp(image, "\x7f" "ELF", 4) != 0)
    return 200; // CUDA_ERROR_INVALID_IMAGE
  if (std::strstr(static_cast<const char *>(image) + 4, "nobinary") != nullptr)
    return 209; // CUDA_ERROR_NO_BINARY_FOR_GPU
  fake_cuda_state()->moduleLoads++;
  *module = const_cast<void *>(image);
  return 0;
}
FAKE_API CUresult cuModuleGetFunction(void **function, void *, const char *name) {
  if (std::strstr(name, "missing") != nullptr)
    return 500; // CUDA_ERROR_NOT_FOUND
  static std::mutex mutex;
  static std::map<std::string, FakeFunction> functions; // stable addresses, freed at exit
  std::lock_guard<std::mutex> lock(mutex);
  *function = &functions.emplace(name, FakeFunction{name}).first->second;
  return 0;
}
FAKE_API CUresult cuModuleUnload(void *) {
  fake_cuda_state()->moduleUnloads++;
  return 0;
}
FAKE_API CUresult cuFuncSetAttribute(void *, int attribute, int value) {
  if (attribute == 8)
    fake_cuda_state()->maxDynamicSmem = value;
  return 0;
}
FAKE_API CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned smem, void *stream,
                                 void **params, void **extra) {
  if (envInt("FAKE_CUDA_LAUNCH_ERROR", 0) != 0)
    return envInt("FAKE_CUDA_LAUNCH_ERROR", 0);
  FakeCudaState *s = fake_cuda_state();
  s->grid[0] = gx, s->grid[1] = gy, s->grid[2] = gz;
  s->block[0] = bx, s->block[1] = by, s->block[2] = bz;
  s->smem = smem;
  s->stream = stream;
  s->function = static_cast<FakeFunction *>(f)->name;
  auto endsWith = [&](const char *suffix) {
    const std::string x = suffix;
    return s->function.size() >= x.size() &&
           s->function.compare(s->function.size() - x.size(), x.size(), x) == 0;
  };
  // A decode kernel's merges take a fagen_merge_params, its main kernel a fagen_decode_params
  // (which starts with the forward's block); every other kernel's block starts with that too.
  // A paged forward (chunked prefill, "_pagedN_" of template sm80) takes a fagen_decode_params.
  const bool decode = s->function.find("_sm80decode_") != std::string::npos;
  const bool pagedForward = !decode && s->function.find("_paged") != std::string::npos;
  // A paged decode kernel's NAME_append takes a fagen_kv_append_params.
  const bool merge = decode && (endsWith("_combine") || endsWith("_merge"));
  const bool append = decode && endsWith("_append");
  if (!merge && !append)
    std::memcpy(&s->params, params[0], sizeof s->params);
  FakeLaunch launch{s->function, {gx, gy, gz}, {bx, by, bz}, smem, stream, {}};
  size_t bytes = merge    ? sizeof(fagen_merge_params)
                 : append ? sizeof(fagen_kv_append_params)
                 : decode || pagedForward ? sizeof(fagen_decode_params)
                 : s->function.rfind("fagen_bwd", 0) == 0 && s->bwdParamsBytes != 0
                     ? s->bwdParamsBytes
                     : sizeof(fagen_fwd_params);
  const auto *block = static_cast<const unsigned char *>(params[0]);
  launch.params.assign(block, block + bytes);
  // TMA kernels take their maps second (a backward's _pre and _post take none).
  if (s->function.find("_sm90ws_") != std::string::npos && params[1] != nullptr) {
    const auto *maps = static_cast<const unsigned char *>(params[1]);
    launch.tmaMaps.assign(maps, maps + 4 * 128);
  }
  s->launchLog.push_back(std::move(launch));
  s->launches++;
  return extra == nullptr ? 0 : 1;
}
// cuda.h's CUlaunchAttribute_st and CUlaunchConfig_st.
struct FakeLaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int value;
  } value;
};
struct FakeLaunchConfig {
  unsigned gx, gy, gz, bx, by, bz, smem;
  void *stream;
  FakeLaunchAttribute *attrs;
  unsigned numAttrs;
};
/// cuLaunchKernel with attributes: also records whether the launch is a programmatic dependent.
FAKE_API CUresult cuLaunchKernelEx(const FakeLaunchConfig *c, void *f, void **params,
                                   void **extra) {
  bool programmatic = false;
  for (unsigned i = 0; i < c->numAttrs; ++i)
    if (c->attrs[i].id == 6) // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
      programmatic = c->attrs[i].value.value != 0;
  const CUresult r = cuLaunchKernel(f, c->gx, c->gy, c->gz, c->bx, c->by, c->bz, c->smem,
                                    c->stream, params, extra);
  FakeCudaState *s = fake_cuda_state();
  if (r == 0 && !s->launchLog.empty())
    s->launchLog.back().programmaticDependent = programmatic;
  return r;
}
FAKE_API CUresult cuTensorMapEncodeTiled(void *map, int dataType, unsigned rank, void *address,
                                         const unsigned long long *dims,
                                         const unsigned long long *strides, const unsigned *box,
                                         const unsigned *, int, int swizzle, int, int oobFill) {
  if (envInt("FAKE_CUDA_TMA_ERROR", 0) != 0)
    return envInt("FAKE_CUDA_TMA_ERROR", 0);
  FakeTensorMap m = {dataType, swizzle, oobFill, rank, address, {}, {}, {}};
  for (unsigned d = 0; d < rank && d < 5; ++d) {
    m.dims[d] = dims[d];
    m.box[d] = box[d];
    if (d + 1 < rank)
      m.strides[d] = strides[d];
  }
  fake_cuda_state()->tensorMaps.push_back(m);
  std::memset(map, 0, 128);
  std::memcpy(map, &address, sizeof address);
  return 0;
}
FAKE_API CUresult cuGetErrorName(CUresult error, const char **name) {
  switch (error) {
  case 209:
    *name = "CUDA_ERROR_NO_BINARY_FOR_GPU";
    return 0;
  case 500:
    *name = "CUDA_ERROR_NOT_FOUND";
    return 0;
  case 701:
    *name = "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    return 0;
  }
  return 1;
}
FAKE_API CUresult cuGetErrorString(CUresult error, const char **text) {
  *text = "fake error text";
  return 0;
}
FAKE_API CUresult cuMemAlloc_v2(unsigned long long *p, size_t) {
  *p = 0;
  return 2;
}
FAKE_API CUresult cuMemFree_v2(unsigned long long) { return 0; }
FAKE_API CUresult cuMemcpyHtoD_v2(unsigned long long, const void *, size_t) { return 0; }
/// "Device" memory is host memory here: the runtime's FAGEN_VALIDATE reads arrays the test made.
FAKE_API CUresult cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t bytes) {
  std::memcpy(dst, reinterpret_cast<const void *>(src), bytes);
  return 0;
}
FAKE_API CUresult cuMemsetD8_v2(unsigned long long, unsigned char, size_t) { return 0; }
FAKE_API CUresult cuMemsetD32Async(unsigned long long dst, unsigned value, size_t count,
                                   void *stream) {
  if (envInt("FAKE_CUDA_MEMSET_ERROR", 0) != 0)
    return envInt("FAKE_CUDA_MEMSET_ERROR", 0);
  FakeCudaState *s = fake_cuda_state();
  s->memsetLog.push_back({dst, value, count, stream, s->launches.load()});
  return 0;
}
FAKE_API CUresult cuEventCreate(void **e, unsigned) {
  *e = nullptr;
  return 0;
}
FAKE_API CUresult cuEventRecord(void *, void *) { return 0; }
FAKE_API CUresult cuEventElapsedTime(float *ms, void *, void *) {
  *ms = 0;
  return 0;
}
FAKE_API CUresult cuEventDestroy_v2(void *) { return 0; }

} // extern "C"
