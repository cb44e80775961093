//===- Runtime.cpp - the C ABI: bundles and plan entry points ---------------===//
#include "runtime/src/RuntimeInternal.h"

using namespace fagen;
using namespace fagen::rt;

namespace fagen::rt {

namespace {
std::mutex registryMutex;
std::map<const fagen_bundle *, uint64_t> liveBundles; ///< bundle -> its id
uint64_t nextBundleId = 1;
} // namespace

uint64_t registerBundle(const fagen_bundle *b) {
  std::lock_guard<std::mutex> lock(registryMutex);
  uint64_t id = nextBundleId++;
  liveBundles[b] = id;
  return id;
}

void unregisterBundle(const fagen_bundle *b) {
  std::lock_guard<std::mutex> lock(registryMutex);
  liveBundles.erase(b);
}

bool bundleIsLive(const fagen_bundle *b, uint64_t id) {
  std::lock_guard<std::mutex> lock(registryMutex);
  auto it = liveBundles.find(b);
  return it != liveBundles.end() && it->second == id;
}

fagen_status checkWorkspaceBytes(const char *function, size_t given, const fagen_plan &plan,
                                 const char *fix) {
  if (given >= plan.workspace_bytes)
    return FAGEN_OK;
  return fail(FAGEN_ERROR_INVALID_ARGUMENT,
              std::string(function) + ": workspace_bytes (" + str(int64_t(given)) +
                  ") is less than plan->workspace_bytes (" + str(int64_t(plan.workspace_bytes)) +
                  "): " + fix);
}

fagen_status checkAbiHeader(const char *function, const char *what, const char *type,
                            uint32_t size, uint32_t tag, size_t expectedSize,
                            const char *initMacro) {
  if (size == expectedSize && tag == FAGEN_ABI_TAG)
    return FAGEN_OK;
  char tagText[16];
  std::snprintf(tagText, sizeof tagText, "0x%08x", tag);
  std::string why =
      tag == FAGEN_ABI_TAG
          ? std::string(" but the tag is this ABI's: set struct_size = sizeof(") + type + ")"
      : (tag & 0xffff0000u) == (FAGEN_ABI_TAG & 0xffff0000u)
          ? ": the caller was built against the fagen.h of ABI " + str(tag & 0xffffu) +
                "; rebuild it against this library's header"
          : std::string(": the caller was built against an older fagen.h (ABI 1 or 2, whose "
                        "structs carry no size and tag) or did not initialize the struct: "
                        "rebuild it against this library's header and initialize ") +
                what + " with " + initMacro;
  return fail(FAGEN_ERROR_ABI_MISMATCH,
              std::string(function) + ": " + what + "->struct_size is " + str(size) +
                  " and abi_tag " + tagText + "; this library (ABI " +
                  str(FAGEN_RUNTIME_ABI_VERSION) + ") takes a " + type + " of " +
                  str(int64_t(expectedSize)) + " bytes tagged FAGEN_ABI_TAG" + why);
}

uint64_t contextId(const DriverApi &api, CUcontext ctx) {
  unsigned long long id = 0;
  if (api.cuCtxGetId == nullptr || api.cuCtxGetId(ctx, &id) != CUDA_SUCCESS)
    return 0;
  return id;
}

void setStrides(fagen_fwd_problem *p, bool bshd) {
  // Varlen tensors are packed [total, heads, dim] (BSHD) or [heads, total, dim] (BHSD).
  const int64_t seqQ = p->varlen ? p->total_q : p->seqlen_q;
  const int64_t seqK = p->varlen ? p->total_k : p->seqlen_k;
  auto fill = [p, bshd](int64_t s[3], int64_t seq, int64_t heads, int64_t dim) {
    s[0] = p->varlen ? 0 : seq * heads * dim;
    s[1] = bshd ? dim : seq * dim;
    s[2] = bshd ? heads * dim : dim;
  };
  fill(p->q_strides, seqQ, p->heads_q, p->head_dim_qk);
  fill(p->k_strides, seqK, p->heads_kv, p->head_dim_qk);
  fill(p->v_strides, seqK, p->heads_kv, p->head_dim_v);
  fill(p->o_strides, seqQ, p->heads_q, p->head_dim_v);
  fill(p->do_strides, seqQ, p->heads_q, p->head_dim_v);
  fill(p->dq_strides, seqQ, p->heads_q, p->head_dim_qk);
  fill(p->dk_strides, seqK, p->heads_kv, p->head_dim_qk);
  fill(p->dv_strides, seqK, p->heads_kv, p->head_dim_v);
}

} // namespace fagen::rt

extern "C" {

fagen_status fagen_bundle_load_memory(const void *data, size_t size, fagen_bundle **out) {
  if (out == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, "fagen_bundle_load_memory: out is null");
  *out = nullptr;
  if (data == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, "fagen_bundle_load_memory: data is null");
  Bundle parsed;
  std::string error;
  if (!parseBundle(static_cast<const uint8_t *>(data), size, parsed, error))
    return fail(FAGEN_ERROR_BUNDLE_INVALID, error);
  return adopt(std::move(parsed), out);
}

fagen_status fagen_bundle_load_file(const char *path, fagen_bundle **out) {
  if (out == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, "fagen_bundle_load_file: out is null");
  *out = nullptr;
  if (path == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, "fagen_bundle_load_file: path is null");
  FILE *file = std::fopen(path, "rb");
  if (file == nullptr)
    return fail(FAGEN_ERROR_IO, std::string("cannot open bundle ") + path + ": " +
                                    std::strerror(errno));
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  size_t n = 0;
  while ((n = std::fread(chunk, 1, sizeof chunk, file)) > 0)
    bytes.insert(bytes.end(), chunk, chunk + n);
  bool readError = std::ferror(file) != 0;
  int readErrno = errno;
  std::fclose(file);
  if (readError)
    return fail(FAGEN_ERROR_IO, std::string("cannot read bundle ") + path + ": " +
                                    std::strerror(readErrno));
  Bundle parsed;
  std::string error;
  if (!parseBundle(bytes.data(), bytes.size(), parsed, error))
    return fail(FAGEN_ERROR_BUNDLE_INVALID, std::string(path) + ": " + error);
  return adopt(std::move(parsed), out);
}

void fagen_bundle_destroy(fagen_bundle *bundle) {
  if (bundle == nullptr)
    return;
  unregisterBundle(bundle);
  std::string ignored;
  const DriverApi *api = bundle->modules.empty() ? nullptr : getDriver(ignored);
  if (api != nullptr) {
    // A module belongs to its context; unload each with its context current, then restore.
    // A module of a destroyed context went with it: where the context's id says that the
    // context now at that address is another one, there is nothing to unload.
    CUcontext previous = nullptr;
    api->cuCtxGetCurrent(&previous);
    for (const auto &[key, module] : bundle->modules) {
      auto [context, id, cubin] = key;
      if (api->cuCtxSetCurrent(context) == CUDA_SUCCESS && contextId(*api, context) == id)
        api->cuModuleUnload(module);
    }
    api->cuCtxSetCurrent(previous);
  }
  delete bundle;
}

int fagen_bundle_kernel_count(const fagen_bundle *bundle) {
  if (bundle == nullptr) {
    fail(FAGEN_ERROR_INVALID_ARGUMENT, "fagen_bundle_kernel_count: bundle is null");
    return 0;
  }
  return int(bundle->bundle.kernels.size());
}

const char *fagen_bundle_kernel_name(const fagen_bundle *bundle, int index) {
  if (bundle == nullptr) {
    fail(FAGEN_ERROR_INVALID_ARGUMENT, "fagen_bundle_kernel_name: bundle is null");
    return nullptr;
  }
  if (index < 0 || size_t(index) >= bundle->descriptions.size()) {
    fail(FAGEN_ERROR_INVALID_ARGUMENT,
         "fagen_bundle_kernel_name: index " + std::to_string(index) + " is out of range [0, " +
             std::to_string(bundle->descriptions.size()) + ")");
    return nullptr;
  }
  return bundle->descriptions[index].c_str();
}

void fagen_fwd_problem_init(fagen_fwd_problem *problem) {
  if (problem == nullptr)
    return;
  *problem = fagen_fwd_problem FAGEN_FWD_PROBLEM_INIT;
}

void fagen_run_args_init(fagen_run_args *args) {
  if (args == nullptr)
    return;
  *args = fagen_run_args FAGEN_RUN_ARGS_INIT;
}

void fagen_fwd_problem_set_bshd_strides(fagen_fwd_problem *problem) {
  if (problem != nullptr)
    setStrides(problem, true);
}

void fagen_fwd_problem_set_bhsd_strides(fagen_fwd_problem *problem) {
  if (problem != nullptr)
    setStrides(problem, false);
}

fagen_status fagen_plan_forward(const fagen_bundle *bundle, const fagen_fwd_problem *problem,
                                fagen_plan *plan) {
  return planCall("fagen_plan_forward", bundle, problem, FAGEN_PASS_FORWARD, 0, false, 0, plan);
}

fagen_status fagen_plan_forward_kernel(const fagen_bundle *bundle,
                                       const fagen_fwd_problem *problem, int kernel_index,
                                       fagen_plan *plan) {
  return planCall("fagen_plan_forward_kernel", bundle, problem, FAGEN_PASS_FORWARD, 0, true,
                  kernel_index, plan);
}

fagen_status fagen_plan_backward(const fagen_bundle *bundle, const fagen_fwd_problem *problem,
                                 int32_t deterministic, fagen_plan *plan) {
  return planCall("fagen_plan_backward", bundle, problem, FAGEN_PASS_BACKWARD, deterministic,
                  false, 0, plan);
}

fagen_status fagen_plan_backward_kernel(const fagen_bundle *bundle,
                                        const fagen_fwd_problem *problem, int32_t deterministic,
                                        int kernel_index, fagen_plan *plan) {
  return planCall("fagen_plan_backward_kernel", bundle, problem, FAGEN_PASS_BACKWARD,
                  deterministic, true, kernel_index, plan);
}

} // extern "C"
