// fagen sm90: the warp-specialized forward's event trace (FAGEN_WS_TRACE_AT), a no-op unless
// the kernel is compiled with -DFAGEN_WS_TRACE (tests/gpu/ws_trace.cu).
#ifndef FAGEN_TEMPLATES_SM90_WS_TRACE_CUH
#define FAGEN_TEMPLATES_SM90_WS_TRACE_CUH

#include "common/types.cuh"

namespace fagen {
namespace sm90 {

#ifdef FAGEN_WS_TRACE
/// Dev instrumentation, compiled only with -DFAGEN_WS_TRACE (tests/gpu/ws_trace.cu): thread 0 of
/// each warpgroup (0: the producer, 1..3: consumers) writes clock64() at a work tile's events
/// into ws_trace_buf[((blockIdx.x * 4 + warpgroup) * kWsTraceTiles + work) * 8 + event], for
/// the CTA's first kWsTraceTiles tiles (kernels without a tile counter: `work` is then the
/// tile's ordinal). Never in a bundle's kernels.
__device__ unsigned long long *ws_trace_buf;
constexpr int kWsTraceTiles = 32;
__device__ __forceinline__ void ws_trace(int work, int event, unsigned long long value) {
  if (threadIdx.x % 128 == 0 && work < kWsTraceTiles && ws_trace_buf != nullptr)
    ws_trace_buf[((blockIdx.x * 4 + threadIdx.x / 128) * kWsTraceTiles + work) * 8 + event] =
        value;
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
