//===- FakeGpu.cpp - a simulated libcuda for running `fagen tune` on a CPU -===//
//
// Enough of the driver API for the tuner's whole path: device memory is host memory, a kernel
// launch computes its pass with the CPU reference (the forward; the backward's dQ, dK and dV
// in its main kernel, _pre and _post only tick; a decode kernel's O and LSE in its main kernel,
// NAME_combine and NAME_merge only tick), for the small shapes of the numerics check
// (larger launches only advance the clock), and events read a simulated GPU clock that each
// launch advances by a deterministic, config-dependent time, so that the tuner finds a winner.
// Forward kernels whose name contains $FAKE_GPU_WRONG (default "_e25"), and backward kernels
// whose name contains $FAKE_GPU_WRONG_BWD (default "w4s1"), produce wrong output, to exercise
// the numerics gate. One device: "Fake GPU", cc 9.0, 132 SMs, 1 MB L2.
// The context and synchronization entry points, alike in every fake, are in
// tests/common/FakeDriverCommon.h.
//
//===----------------------------------------------------------------------===//

#include "check/Reference.h"
#include "tests/common/FakeDriverCommon.h"
#include "templates/abi/bwd_params.h"
#include "templates/abi/decode_params.h"
#include "templates/abi/fwd_params.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace {

namespace ref = fagen::reference;

std::mutex mutex;
double gpuClockMs = 0;                  ///< the simulated GPU timeline
std::map<void *, double> eventTimes;    ///< event -> clock when recorded
std::map<std::string, std::string> functions; ///< stable storage for function handles

/// The simulated run time of a kernel: a deterministic function of its name (config).
double kernelMs(const std::string &name) {
  size_t h = std::hash<std::string>()(name);
  return 1.0 + double(h % 1000) / 1000.0;
}

bool wrongOutput(const std::string &name) {
  const bool backward = name.rfind("fagen_bwd", 0) == 0;
  const char *wrong = std::getenv(backward ? "FAKE_GPU_WRONG_BWD" : "FAKE_GPU_WRONG");
  return name.find(wrong && *wrong ? wrong : backward ? "w4s1" : "_e25") != std::string::npos;
}

/// Whether a launch is a numerics check's (computed) rather than a timing launch (only the
/// clock matters).
bool computed(const fagen_fwd_params &p) {
  return double(p.batch) * p.heads_q * p.seqlen_q * double(p.seqlen_k) <= 4e6;
}

/// The reference's problem of kernel `name` (dense, none or causal) with parameters `p`.
ref::FwdProblem problemOf(const std::string &name, const fagen_fwd_params &p) {
  ref::FwdProblem pb;
  pb.Params = p;
  int headDim = 0;
  std::sscanf(name.c_str() + name.find("_hd") + 3, "%d", &headDim);
  pb.HeadDim = headDim;
  pb.Type = name.find("_bf16_") != std::string::npos ? ref::ElementType::BF16
                                                      : ref::ElementType::F16;
  pb.Mask = name.find("_causal_") != std::string::npos ? fagen::Mask::Causal : fagen::Mask::None;
  return pb;
}

/// Computes the forward pass of `p` for kernel `name` on the host, like the real kernel.
void runForward(const std::string &name, const fagen_fwd_params &p) {
  if (!computed(p))
    return;
  const ref::FwdProblem pb = problemOf(name, p);
  const int headDim = pb.HeadDim;
  ref::FwdResult r = ref::forwardFloat64(pb);
  bool wrong = wrongOutput(name);
  uint16_t *o = static_cast<uint16_t *>(p.o);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h)
      for (int i = 0; i < p.seqlen_q; ++i) {
        size_t row = (size_t(b) * p.heads_q + h) * p.seqlen_q + i;
        p.lse[row] = float(r.Lse[row]);
        for (int x = 0; x < headDim; ++x)
          o[b * p.o_batch_stride + h * p.o_head_stride + i * p.o_row_stride + x] =
              ref::fromFloat(float(r.O[row * headDim + x] + (wrong ? 0.125 : 0.0)), pb.Type);
      }
}

/// Writes rows of `values` (a BwdResult tensor, `width` wide) into a strided gradient.
void storeRows(const std::vector<double> &values, int width, void *out, int64_t batchStride,
               int64_t headStride, int64_t rowStride, int batch, int heads, int rows,
               ref::ElementType type, bool wrong) {
  uint16_t *o = static_cast<uint16_t *>(out);
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < rows; ++i) {
        size_t row = (size_t(b) * heads + h) * rows + i;
        for (int x = 0; x < width; ++x)
          o[b * batchStride + h * headStride + i * rowStride + x] =
              ref::fromFloat(float(values[row * width + x] + (wrong ? 0.125 : 0.0)), type);
      }
}

/// Computes the backward's dQ, dK and dV of `p` for main kernel `name` on the host.
void runBackward(const std::string &name, const fagen_bwd_params &p) {
  const fagen_fwd_params &f = p.fwd;
  if (!computed(f))
    return;
  ref::BwdProblem bp;
  bp.Fwd = problemOf(name, f);
  bp.DOut = {p.dout, p.do_batch_stride, p.do_head_stride, p.do_row_stride};
  const ref::BwdResult r = ref::backwardFloat64(bp);
  const bool wrong = wrongOutput(name);
  const int d = bp.Fwd.HeadDim;
  storeRows(r.DQ, d, p.dq, p.dq_batch_stride, p.dq_head_stride, p.dq_row_stride, f.batch,
            f.heads_q, f.seqlen_q, bp.Fwd.Type, wrong);
  storeRows(r.DK, d, p.dk, p.dk_batch_stride, p.dk_head_stride, p.dk_row_stride, f.batch,
            f.heads_kv, f.seqlen_k, bp.Fwd.Type, wrong);
  storeRows(r.DV, d, p.dv, p.dv_batch_stride, p.dv_head_stride, p.dv_row_stride, f.batch,
            f.heads_kv, f.seqlen_k, bp.Fwd.Type, false);
}

bool endsWith(const std::string &s, const char *suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

} // namespace

extern "C" {

FAKE_API CUresult cuInit(unsigned) { return 0; }
FAKE_API CUresult cuDeviceGetCount(int *n) {
  *n = 1;
  return 0;
}
FAKE_API CUresult cuDeviceGetName(char *name, int length, int) {
  std::strncpy(name, "Fake GPU", size_t(length));
  return 0;
}
FAKE_API CUresult cuDeviceGetAttribute(int *value, int attribute, int) {
  switch (attribute) {
  case 75: // compute capability major
    *value = 9;
    return 0;
  case 76: // minor
    *value = 0;
    return 0;
  case 97: // max shared memory per block, opt-in
    *value = 232448;
    return 0;
  case 16: // multiprocessors
    *value = 132;
    return 0;
  case 38: // L2 bytes
    *value = 1 << 20;
    return 0;
  }
  return 1;
}
FAKE_API CUresult cuModuleLoadData(void **module, const void *image) {
  *module = const_cast<void *>(image);
  return 0;
}
FAKE_API CUresult cuModuleGetFunction(void **function, void *, const char *name) {
  std::lock_guard<std::mutex> lock(mutex);
  *function = &functions.emplace(name, name).first->second;
  return 0;
}
FAKE_API CUresult cuModuleUnload(void *) { return 0; }
FAKE_API CUresult cuFuncSetAttribute(void *, int, int) { return 0; }
FAKE_API CUresult cuLaunchKernel(void *f, unsigned, unsigned, unsigned, unsigned, unsigned,
                                 unsigned, unsigned, void *, void **params, void **) {
  const std::string &name = *static_cast<std::string *>(f);
  if (name.find("_sm80decode_") != std::string::npos) {
    // A decode kernel computes O and LSE itself, whatever its split count; NAME_combine and
    // NAME_merge only tick.
    if (!endsWith(name, "_combine") && !endsWith(name, "_merge")) {
      fagen_decode_params p;
      std::memcpy(&p, params[0], sizeof p);
      runForward(name, p.fwd);
    }
  } else if (name.rfind("fagen_bwd", 0) != 0) {
    fagen_fwd_params p;
    std::memcpy(&p, params[0], sizeof p);
    runForward(name, p);
  } else if (!endsWith(name, "_pre") && !endsWith(name, "_post")) {
    fagen_bwd_params p; // _pre and _post only tick: the main kernel computes every gradient
    std::memcpy(&p, params[0], sizeof p);
    runBackward(name, p);
  }
  std::lock_guard<std::mutex> lock(mutex);
  gpuClockMs += kernelMs(name);
  return 0;
}
FAKE_API CUresult cuGetErrorName(CUresult, const char **name) {
  *name = "CUDA_ERROR_FAKE";
  return 0;
}
FAKE_API CUresult cuGetErrorString(CUresult, const char **text) {
  *text = "fake error";
  return 0;
}
FAKE_API CUresult cuMemAlloc_v2(unsigned long long *p, size_t bytes) {
  void *mem = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  *p = reinterpret_cast<unsigned long long>(mem);
  return mem ? 0 : 2;
}
FAKE_API CUresult cuMemFree_v2(unsigned long long p) {
  std::free(reinterpret_cast<void *>(p));
  return 0;
}
FAKE_API CUresult cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t bytes) {
  std::memcpy(reinterpret_cast<void *>(dst), src, bytes);
  return 0;
}
FAKE_API CUresult cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t bytes) {
  std::memcpy(dst, reinterpret_cast<const void *>(src), bytes);
  return 0;
}
FAKE_API CUresult cuMemsetD8_v2(unsigned long long dst, unsigned char value, size_t count) {
  if (count <= (size_t(16) << 20)) // the L2 flush only advances the clock
    std::memset(reinterpret_cast<void *>(dst), value, count);
  std::lock_guard<std::mutex> lock(mutex);
  gpuClockMs += 0.05;
  return 0;
}
FAKE_API CUresult cuMemsetD32Async(unsigned long long dst, unsigned value, size_t count, void *) {
  auto *words = reinterpret_cast<unsigned *>(dst);
  for (size_t i = 0; i < count; ++i)
    words[i] = value;
  return 0;
}
FAKE_API CUresult cuEventCreate(void **e, unsigned) {
  *e = std::malloc(1);
  return 0;
}
FAKE_API CUresult cuEventRecord(void *e, void *) {
  std::lock_guard<std::mutex> lock(mutex);
  eventTimes[e] = gpuClockMs;
  return 0;
}
FAKE_API CUresult cuEventElapsedTime(float *ms, void *start, void *end) {
  std::lock_guard<std::mutex> lock(mutex);
  if (!eventTimes.count(start) || !eventTimes.count(end))
    return 600; // CUDA_ERROR_NOT_READY
  *ms = float(eventTimes[end] - eventTimes[start]);
  return 0;
}
FAKE_API CUresult cuEventDestroy_v2(void *e) {
  std::lock_guard<std::mutex> lock(mutex);
  eventTimes.erase(e);
  std::free(e);
  return 0;
}

} // extern "C"
