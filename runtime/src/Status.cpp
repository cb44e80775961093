//===- Status.cpp - the C ABI: last error and status names ------------------===//
#include "runtime/src/RuntimeInternal.h"

using namespace fagen;
using namespace fagen::rt;

namespace fagen::rt {

thread_local std::string lastError;

fagen_status fail(fagen_status status, std::string message) {
  lastError = std::move(message);
  return status;
}

std::string str(int64_t v) { return std::to_string(v); }

} // namespace fagen::rt

extern "C" {

const char *fagen_last_error(void) { return lastError.c_str(); }

const char *fagen_status_name(fagen_status status) {
  switch (status) {
  case FAGEN_OK:
    return "FAGEN_OK";
  case FAGEN_ERROR_INVALID_ARGUMENT:
    return "FAGEN_ERROR_INVALID_ARGUMENT";
  case FAGEN_ERROR_IO:
    return "FAGEN_ERROR_IO";
  case FAGEN_ERROR_BUNDLE_INVALID:
    return "FAGEN_ERROR_BUNDLE_INVALID";
  case FAGEN_ERROR_NOT_SUPPORTED:
    return "FAGEN_ERROR_NOT_SUPPORTED";
  case FAGEN_ERROR_NO_DRIVER:
    return "FAGEN_ERROR_NO_DRIVER";
  case FAGEN_ERROR_NO_KERNEL_FOR_GPU:
    return "FAGEN_ERROR_NO_KERNEL_FOR_GPU";
  case FAGEN_ERROR_CUDA:
    return "FAGEN_ERROR_CUDA";
  case FAGEN_ERROR_ABI_MISMATCH:
    return "FAGEN_ERROR_ABI_MISMATCH";
  }
  return "FAGEN_STATUS_UNKNOWN";
}

const char *fagen_version(void) { return FAGEN_VERSION_STRING; }

int fagen_abi_version(void) { return FAGEN_RUNTIME_ABI_VERSION; }

} // extern "C"
