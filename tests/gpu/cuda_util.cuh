// fagen GPU dev harnesses: what every harness needs from CUDA (the forward harnesses through
// harness_common.cuh, the backward harness directly).
#ifndef FAGEN_TESTS_GPU_CUDA_UTIL_CUH
#define FAGEN_TESTS_GPU_CUDA_UTIL_CUH

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

/// Exits with the call, its place and CUDA's message when a runtime call fails.
#define CUDA_CHECK(expr)                                                                           \
  do {                                                                                             \
    cudaError_t err_ = (expr);                                                                     \
    if (err_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,                    \
                   cudaGetErrorString(err_));                                                      \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)

/// Timing inputs: n bf16 values uniform in [-1.7, 1.7), a hash of (index, seed).
__global__ void fill_random(uint16_t *x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 16, h *= 0x7feb352du, h ^= h >> 15, h *= 0x846ca68bu, h ^= h >> 16;
    float u = (h & 0xffffff) * (1.f / 16777216.f) * 2.f - 1.f; // uniform [-1, 1)
    x[i] = uint16_t(__float_as_uint(u * 1.7f) >> 16);           // bf16, truncated
  }
}

#ifdef FAGEN_RUNTIME_TMAMAPS_H // the TMA harnesses include runtime/src/TmaMaps.h first
/// cuTensorMapEncodeTiled from the driver, through the CUDA runtime.
static fagen::TensorMapEncodeTiledFn tensor_map_encoder() {
  static fagen::TensorMapEncodeTiledFn fn = [] {
    void *f = nullptr;
    cudaDriverEntryPointQueryResult found;
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                                cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || f == nullptr) {
      std::fprintf(stderr, "cuTensorMapEncodeTiled not found in the driver\n");
      std::exit(2);
    }
    return reinterpret_cast<fagen::TensorMapEncodeTiledFn>(f);
  }();
  return fn;
}
#endif

#endif // FAGEN_TESTS_GPU_CUDA_UTIL_CUH
