//===- FakeDriverCommon.h - entry points every fake libcuda implements alike -===//
//
// One device (ordinal 0) with a primary context, the current context per thread, and
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
  int id;
} primaryContext{1};
thread_local void *currentContext = nullptr;

} // namespace

extern "C" {

FAKE_API CUresult cuDriverGetVersion(int *v) {
  *v = 13000;
  return 0;
}
FAKE_API CUresult cuDeviceGet(int *d, int ordinal) {
  *d = ordinal;
  return ordinal == 0 ? 0 : 101;
}
FAKE_API CUresult cuDevicePrimaryCtxRetain(void **ctx, int) {
  *ctx = &primaryContext;
  return 0;
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
  *d = 0;
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
