//===- FakeDriverCommon.h - entry points every fake libcuda implements alike -===//
//
// Devices 0 and 1 (a fake's cuDeviceGetCount says how many it shows), each with a primary
// context whose unique id (cuCtxGetId) fake_cuda_reset_context renews, as a device reset
// followed by a new primary context at the same address does; the current context per thread;
// synchronization with nothing to wait for (a fake finishes its work inside each call). Shared
// by tests/runtime/FakeCuda.cpp and tests/tuner/FakeGpu.cpp, which keep what sets them apart.
// It defines the entry points rather than declaring them: include it in one file per fake.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_TESTS_COMMON_FAKEDRIVERCOMMON_H
#define FAGEN_TESTS_COMMON_FAKEDRIVERCOMMON_H

/// An entry point the runtime finds with dlsym (the fakes build with hidden visibility).
#define FAKE_API __attribute__((visibility("default")))

namespace {

using CUresult = int;

struct FakeContext {
  int device;
  unsigned long long uid;
};
FakeContext primaryContexts[2] = {{0, 1}, {1, 2}};
unsigned long long nextContextUid = 3;
thread_local void *currentContext = nullptr;

} // namespace

extern "C" {

FAKE_API CUresult cuDriverGetVersion(int *v) {
  *v = 13000;
  return 0;
}
FAKE_API CUresult cuDeviceGet(int *d, int ordinal) {
  *d = ordinal;
  return ordinal == 0 || ordinal == 1 ? 0 : 101;
}
FAKE_API CUresult cuDevicePrimaryCtxRetain(void **ctx, int device) {
  if (device != 0 && device != 1)
    return 101;
  *ctx = &primaryContexts[device];
  return 0;
}
FAKE_API CUresult cuCtxGetId(void *ctx, unsigned long long *id) {
  if (ctx == nullptr)
    return 201;
  *id = static_cast<FakeContext *>(ctx)->uid;
  return 0;
}
/// For tests: device `device`'s primary context is destroyed and made anew at the same
/// address (another unique id), as after cuDevicePrimaryCtxReset.
FAKE_API void fake_cuda_reset_context(int device) {
  primaryContexts[device].uid = nextContextUid++;
}
FAKE_API CUresult cuCtxGetCurrent(void **ctx) {
  *ctx = currentContext;
  return 0;
}
FAKE_API CUresult cuCtxSetCurrent(void *ctx) {
  currentContext = ctx;
  return 0;
}
FAKE_API CUresult cuCtxGetDevice(int *d) {
  *d = currentContext ? static_cast<FakeContext *>(currentContext)->device : 0;
  return currentContext ? 0 : 201;
}
FAKE_API CUresult cuFuncGetAttribute(int *value, int, void *) {
  *value = 0;
  return 0;
}
FAKE_API CUresult cuCtxSynchronize() { return 0; }
FAKE_API CUresult cuEventSynchronize(void *) { return 0; }
FAKE_API CUresult cuStreamSynchronize(void *) { return 0; }

} // extern "C"

#endif // FAGEN_TESTS_COMMON_FAKEDRIVERCOMMON_H
