// fagen sm90: the warp-specialized kernels' event trace (FAGEN_WS_TRACE_AT), a no-op unless
// the kernel is compiled with -DFAGEN_WS_TRACE (tests/gpu/ws_trace.cu for the forward,
// tests/gpu/bwd_harness.cu --trace for the backward).
#ifndef FAGEN_TEMPLATES_SM90_WS_TRACE_CUH
#define FAGEN_TEMPLATES_SM90_WS_TRACE_CUH

#include "common/types.cuh"

namespace fagen {
namespace sm90 {

#ifdef FAGEN_WS_TRACE
/// Dev instrumentation, compiled only with -DFAGEN_WS_TRACE: thread 0 of each warpgroup (0: the
/// producer, 1..3: consumers) writes clock64() at a work tile's events into
/// ws_trace_buf[((cta * 4 + warpgroup) * kWsTraceTiles + work) * 8 + event], cta the CTA's
/// linear index (blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)), for the
/// CTA's first kWsTraceTiles tiles (kernels without a tile counter: `work` is then the tile's
/// ordinal; the backward records CTA-wide events as work 0 and 1). Never in a bundle's kernels.
__device__ unsigned long long *ws_trace_buf;
constexpr int kWsTraceTiles = 32;
__device__ __forceinline__ void ws_trace(int work, int event, unsigned long long value) {
  const unsigned cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (threadIdx.x % 128 == 0 && work < kWsTraceTiles && ws_trace_buf != nullptr)
    ws_trace_buf[((size_t(cta) * 4 + threadIdx.x / 128) * kWsTraceTiles + work) * 8 + event] =
        value;
}
/// The SM the thread runs on.
__device__ __forceinline__ unsigned ws_smid() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}
/// The GPU's nanosecond timer (comparable across SMs, unlike clock64()).
__device__ __forceinline__ unsigned long long ws_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#define FAGEN_WS_TRACE_AT(work, event) ::fagen::sm90::ws_trace(work, event, clock64())
#define FAGEN_WS_TRACE_VALUE(work, event, value) ::fagen::sm90::ws_trace(work, event, value)
#else
#define FAGEN_WS_TRACE_AT(work, event) ((void)0)
#define FAGEN_WS_TRACE_VALUE(work, event, value) ((void)0)
#endif

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_WS_TRACE_CUH
