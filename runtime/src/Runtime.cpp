//===- Runtime.cpp - the C ABI: load a bundle, plan a call, run it --------===//
//
// plan = validate the problem (host only), pick a kernel (needs the device's compute
// capability and shared-memory limit), load its module once per context, fill the parameter
// block. run = copy the block, fill the pointers, cuLaunchKernel. A bundle is immutable after
// load except for its module cache, which a mutex guards.
//
//===----------------------------------------------------------------------===//
#include "fagen/fagen.h"

#include "Bundle.h"
#include "Driver.h"
#include "fwd_params.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <utility>

static_assert(sizeof(fagen_fwd_params) <= sizeof(fagen_plan{}.params),
              "fagen_plan::params must hold the forward parameter block");

using namespace fagen;

struct fagen_bundle {
  Bundle bundle;
  std::vector<std::string> descriptions; ///< fagen_bundle_kernel_name, one per kernel
  std::mutex mutex;                      ///< guards the two caches
  std::map<std::pair<CUcontext, uint32_t>, CUmodule> modules;   ///< (context, cubin)
  std::map<std::pair<CUcontext, int>, CUfunction> functions;    ///< (context, kernel)
};

namespace {

thread_local std::string lastError;

fagen_status fail(fagen_status status, std::string message) {
  lastError = std::move(message);
  return status;
}

std::string describe(const KernelRecord &k) {
  return k.name + " (" + k.pass + " " + k.arch + " " + k.dtype + " head_dim " +
         std::to_string(k.headDimQK) + "/" + std::to_string(k.headDimV) + " mask " + k.mask +
         " tile " + std::to_string(k.blockM) + "x" + std::to_string(k.blockN) + " warps " +
         std::to_string(k.warps) + " stages " + std::to_string(k.stages) + " smem " +
         std::to_string(k.smemBytes) + ")";
}

fagen_status adopt(Bundle parsed, fagen_bundle **out) {
  auto *b = new fagen_bundle;
  b->bundle = std::move(parsed);
  for (const KernelRecord &k : b->bundle.kernels)
    b->descriptions.push_back(describe(k));
  *out = b;
  return FAGEN_OK;
}

//===--- Problem validation (no GPU needed) --------------------------------===//

/// The dtype as the caller passed it: a C caller may pass any int, which must not be loaded
/// as the enum (undefined behaviour for values outside it).
int32_t rawDtype(const fagen_fwd_problem &p) {
  static_assert(sizeof(fagen_dtype) == sizeof(int32_t), "fagen_dtype is a 32-bit enum");
  int32_t raw;
  std::memcpy(&raw, &p.dtype, sizeof raw);
  return raw;
}

const char *dtypeName(const fagen_fwd_problem &p) {
  return rawDtype(p) == FAGEN_DTYPE_BF16 ? "bf16" : "fp16";
}
const char *maskName(const fagen_fwd_problem &p) { return p.causal ? "causal" : "none"; }

bool checkStrides(const char *tensor, const int64_t strides[3], const int32_t extents[3],
                  bool isOutput, std::string &error) {
  static const char *kDims[3] = {"batch", "head", "row"};
  for (int i = 0; i < 3; ++i) {
    std::string which = std::string(tensor) + "_strides[" + std::to_string(i) + "] (" +
                        kDims[i] + ")";
    std::string value = std::to_string(strides[i]);
    if (strides[i] < 0) {
      error = which + " is " + value + ": strides must be >= 0";
      return false;
    }
    if (strides[i] % 8 != 0) {
      error = which + " is " + value +
              " elements, not a multiple of 8: every row must start 16-byte aligned for vector "
              "loads (the head dim is assumed contiguous); pad or copy the tensor";
      return false;
    }
    if (isOutput && strides[i] == 0 && extents[i] > 1) {
      error = which + " is 0 but the " + kDims[i] + " extent is " + std::to_string(extents[i]) +
              ": outputs would overwrite each other";
      return false;
    }
  }
  return true;
}

bool validateProblem(const fagen_fwd_problem &p, std::string &error) {
  struct Positive {
    const char *name;
    int32_t value;
  };
  for (Positive f : {Positive{"batch", p.batch}, {"heads_q", p.heads_q},
                     {"heads_kv", p.heads_kv}, {"seqlen_q", p.seqlen_q},
                     {"seqlen_k", p.seqlen_k}, {"head_dim_qk", p.head_dim_qk},
                     {"head_dim_v", p.head_dim_v}}) {
    if (f.value < 1) {
      error = std::string(f.name) + " (" + std::to_string(f.value) + ") must be >= 1";
      return false;
    }
  }
  if (p.heads_q % p.heads_kv != 0) {
    error = "heads_q (" + std::to_string(p.heads_q) + ") is not a multiple of heads_kv (" +
            std::to_string(p.heads_kv) + ")";
    return false;
  }
  // The grid is (query tiles, heads_q, batch); CUDA limits grid y and z to 65535.
  if (p.heads_q > 65535 || p.batch > 65535) {
    error = std::string(p.heads_q > 65535 ? "heads_q (" + std::to_string(p.heads_q)
                                          : "batch (" + std::to_string(p.batch)) +
            ") exceeds 65535, the CUDA grid limit; split the call";
    return false;
  }
  if (rawDtype(p) != FAGEN_DTYPE_FP16 && rawDtype(p) != FAGEN_DTYPE_BF16) {
    error = "dtype (" + std::to_string(rawDtype(p)) +
            ") is not FAGEN_DTYPE_FP16 (0) or FAGEN_DTYPE_BF16 (1)";
    return false;
  }
  if (p.causal != 0 && p.causal != 1) {
    error = "causal (" + std::to_string(p.causal) + ") must be 0 or 1";
    return false;
  }
  if (!std::isfinite(p.softmax_scale)) {
    error = "softmax_scale (" + std::to_string(p.softmax_scale) +
            ") must be finite (0 means 1/sqrt(head_dim_qk))";
    return false;
  }
  int32_t qExtents[3] = {p.batch, p.heads_q, p.seqlen_q};
  int32_t kvExtents[3] = {p.batch, p.heads_kv, p.seqlen_k};
  return checkStrides("q", p.q_strides, qExtents, false, error) &&
         checkStrides("k", p.k_strides, kvExtents, false, error) &&
         checkStrides("v", p.v_strides, kvExtents, false, error) &&
         checkStrides("o", p.o_strides, qExtents, true, error);
}

//===--- Kernel choice -----------------------------------------------------===//

/// Whether kernel k computes this call. Tuned kernels serve the seqlen range they were tuned
/// for (on max(seqlen_q, seqlen_k)); untuned ones serve every seqlen.
bool servesProblem(const KernelRecord &k, const fagen_fwd_problem &p) {
  int64_t seqlen = std::max(p.seqlen_q, p.seqlen_k);
  return k.pass == "fwd" && k.dtype == dtypeName(p) && k.headDimQK == p.head_dim_qk &&
         k.headDimV == p.head_dim_v && k.mask == maskName(p) && k.seqlenMin <= seqlen &&
         seqlen <= k.seqlenMax;
}

std::string variantText(const std::string &dtype, int dqk, int dv, const std::string &mask) {
  return dtype + " head_dim " + std::to_string(dqk) + "/" + std::to_string(dv) + " mask " + mask;
}

std::string notServedMessage(const Bundle &bundle, const fagen_fwd_problem &p) {
  std::set<std::string> offered;
  for (const KernelRecord &k : bundle.kernels)
    if (k.pass == "fwd")
      offered.insert(variantText(k.dtype, k.headDimQK, k.headDimV, k.mask));
  std::string have;
  for (const std::string &v : offered)
    have += (have.empty() ? "" : ", ") + v;
  return "no forward kernel in the bundle serves " +
         variantText(dtypeName(p), p.head_dim_qk, p.head_dim_v, maskName(p)) +
         "; the bundle has " + (have.empty() ? "no forward kernels" : "forward kernels for " + have) +
         ": add a variant with dtype " + dtypeName(p) + ", head_dim " +
         std::to_string(p.head_dim_qk) +
         (p.head_dim_v == p.head_dim_qk ? "" : " (head_dim_v " + std::to_string(p.head_dim_v) + ")") +
         " and mask " + maskName(p) + " to the spec and rebuild";
}

/// Higher is better: an 'a' kernel built for exactly this GPU, then a plain one for this
/// GPU, then a plain one for an older minor version of the same major.
int archRank(const std::string &arch, int major, int minor) {
  if (arch.back() == 'a')
    return 3;
  return archComputeCapability(arch) == major * 10 + minor ? 2 : 1;
}

struct Device {
  CUcontext context = nullptr;
  CUdevice device = 0;
  int major = 0, minor = 0, smemOptin = 0;
  std::string name;
  std::string arch() const { return "sm_" + std::to_string(major * 10 + minor); }
};

/// The primary context of device 0, retained once per process.
CUresult primaryContext(const DriverApi &api, CUcontext &ctx) {
  static std::once_flag once;
  static CUcontext primary = nullptr;
  static CUresult result = CUDA_SUCCESS;
  std::call_once(once, [&api] {
    CUdevice dev = 0;
    result = api.cuDeviceGet(&dev, 0);
    if (result == CUDA_SUCCESS)
      result = api.cuDevicePrimaryCtxRetain(&primary, dev);
  });
  ctx = primary;
  return result;
}

fagen_status currentDevice(const DriverApi &api, Device &d) {
  if (CUresult r = api.cuCtxGetCurrent(&d.context); r != CUDA_SUCCESS)
    return fail(FAGEN_ERROR_CUDA, cudaErrorText(api, r, "cuCtxGetCurrent"));
  if (d.context == nullptr) {
    int count = 0;
    if (CUresult r = api.cuDeviceGetCount(&count); r != CUDA_SUCCESS || count == 0)
      return fail(FAGEN_ERROR_NO_DRIVER, "the CUDA driver sees no GPU: check nvidia-smi and "
                                         "CUDA_VISIBLE_DEVICES");
    if (CUresult r = primaryContext(api, d.context); r != CUDA_SUCCESS)
      return fail(FAGEN_ERROR_CUDA, cudaErrorText(api, r, "cuDevicePrimaryCtxRetain(device 0)"));
    if (CUresult r = api.cuCtxSetCurrent(d.context); r != CUDA_SUCCESS)
      return fail(FAGEN_ERROR_CUDA, cudaErrorText(api, r, "cuCtxSetCurrent"));
  }
  if (CUresult r = api.cuCtxGetDevice(&d.device); r != CUDA_SUCCESS)
    return fail(FAGEN_ERROR_CUDA, cudaErrorText(api, r, "cuCtxGetDevice"));
  struct {
    int *out;
    int attribute;
  } queries[] = {{&d.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
                 {&d.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR},
                 {&d.smemOptin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN}};
  for (auto &q : queries)
    if (CUresult r = api.cuDeviceGetAttribute(q.out, q.attribute, d.device); r != CUDA_SUCCESS)
      return fail(FAGEN_ERROR_CUDA, cudaErrorText(api, r, "cuDeviceGetAttribute"));
  char name[256] = {};
  if (api.cuDeviceGetName(name, sizeof name - 1, d.device) == CUDA_SUCCESS)
    d.name = name;
  return FAGEN_OK;
}

/// Among the kernels that serve the problem, the best one that runs on this device.
fagen_status chooseKernel(const Bundle &bundle, const std::vector<int> &candidates,
                          const Device &d, int &chosen) {
  std::set<std::string> archs;
  int bestRank = 0;
  int64_t bestSpan = 0;
  const KernelRecord *tooBig = nullptr;
  chosen = -1;
  for (int i : candidates) {
    const KernelRecord &k = bundle.kernels[i];
    archs.insert(k.arch);
    if (!archRunsOn(k.arch, d.major, d.minor))
      continue;
    if (k.smemBytes > d.smemOptin) {
      tooBig = &k;
      continue;
    }
    // The best arch match first, then the narrowest tuned seqlen range.
    int rank = archRank(k.arch, d.major, d.minor);
    int64_t span = k.seqlenMax - k.seqlenMin;
    if (rank > bestRank || (rank == bestRank && chosen >= 0 && span < bestSpan)) {
      bestRank = rank;
      bestSpan = span;
      chosen = i;
    }
  }
  if (chosen >= 0)
    return FAGEN_OK;
  std::string gpu = "this GPU (" + (d.name.empty() ? "device " + std::to_string(d.device) : d.name) +
                    ") is " + d.arch();
  std::string suggestion = d.arch() + (d.major >= 9 ? " (or " + d.arch() + "a)" : "");
  if (tooBig != nullptr)
    return fail(FAGEN_ERROR_NO_KERNEL_FOR_GPU,
                "kernel " + tooBig->name + " needs " + std::to_string(tooBig->smemBytes) +
                    " bytes of shared memory per block; " + gpu + " and allows " +
                    std::to_string(d.smemOptin) + ": rebuild with --arch " + suggestion +
                    " so that the planner fits the tiles to this GPU");
  std::string have;
  for (const std::string &a : archs)
    have += (have.empty() ? "" : ", ") + a;
  return fail(FAGEN_ERROR_NO_KERNEL_FOR_GPU,
              "bundle has kernels for " + have + " for this call; " + gpu +
                  ": rebuild with --arch " + suggestion);
}

/// The kernel's function in the current context, loading its module on first use.
fagen_status loadFunction(const DriverApi &api, fagen_bundle &b, const Device &d, int index,
                          CUfunction &function) {
  std::lock_guard<std::mutex> lock(b.mutex);
  if (auto it = b.functions.find({d.context, index}); it != b.functions.end()) {
    function = it->second;
    return FAGEN_OK;
  }
  const KernelRecord &k = b.bundle.kernels[index];
  CUmodule &module = b.modules[{d.context, k.cubinSection}];
  if (module == nullptr) {
    CUresult r = api.cuModuleLoadData(&module, b.bundle.cubins[k.cubinSection].data());
    if (r != CUDA_SUCCESS) {
      module = nullptr;
      b.modules.erase({d.context, k.cubinSection});
      std::string what = cudaErrorText(api, r, "cuModuleLoadData") + " for kernel " + k.name +
                         " (" + k.arch + ")";
      if (r == CUDA_ERROR_NO_BINARY_FOR_GPU)
        return fail(FAGEN_ERROR_NO_KERNEL_FOR_GPU,
                    what + ": this GPU is " + d.arch() + "; rebuild with --arch " + d.arch());
      return fail(FAGEN_ERROR_CUDA, what);
    }
  }
  if (CUresult r = api.cuModuleGetFunction(&function, module, k.name.c_str()); r != CUDA_SUCCESS)
    return fail(FAGEN_ERROR_BUNDLE_INVALID,
                cudaErrorText(api, r, "cuModuleGetFunction") + ": cubin section " +
                    std::to_string(k.cubinSection + 1) + " has no kernel named " + k.name +
                    " as the manifest says: rebuild the bundle");
  if (CUresult r = api.cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          k.smemBytes);
      r != CUDA_SUCCESS)
    return fail(FAGEN_ERROR_CUDA, cudaErrorText(api, r, "cuFuncSetAttribute") +
                                      " (max dynamic shared memory " +
                                      std::to_string(k.smemBytes) + ") for kernel " + k.name);
  b.functions[{d.context, index}] = function;
  return FAGEN_OK;
}

void fillParams(const fagen_fwd_problem &p, fagen_fwd_params &fp) {
  std::memset(&fp, 0, sizeof fp);
  int64_t *strides[4][3] = {
      {&fp.q_batch_stride, &fp.q_head_stride, &fp.q_row_stride},
      {&fp.k_batch_stride, &fp.k_head_stride, &fp.k_row_stride},
      {&fp.v_batch_stride, &fp.v_head_stride, &fp.v_row_stride},
      {&fp.o_batch_stride, &fp.o_head_stride, &fp.o_row_stride}};
  const int64_t *given[4] = {p.q_strides, p.k_strides, p.v_strides, p.o_strides};
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 3; ++i)
      *strides[t][i] = given[t][i];
  fp.batch = p.batch;
  fp.heads_q = p.heads_q;
  fp.heads_kv = p.heads_kv;
  fp.seqlen_q = p.seqlen_q;
  fp.seqlen_k = p.seqlen_k;
  fp.group_size = p.heads_q / p.heads_kv;
  double scale = p.softmax_scale != 0.0f ? p.softmax_scale : 1.0 / std::sqrt(double(p.head_dim_qk));
  fp.softmax_scale = float(scale);
  fp.scale_log2 = float(scale * 1.4426950408889634); // log2(e)
}

fagen_status checkPlanArguments(const char *function, const fagen_bundle *bundle,
                                const fagen_fwd_problem *problem, fagen_plan *plan) {
  if (bundle == nullptr || problem == nullptr || plan == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": " +
                    (bundle == nullptr ? "bundle" : problem == nullptr ? "problem" : "plan") +
                    " is null");
  std::memset(plan, 0, sizeof *plan);
  std::string error;
  if (!validateProblem(*problem, error))
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) + ": " + error);
  return FAGEN_OK;
}

fagen_status paramsVersionMismatch(const KernelRecord &k) {
  return fail(FAGEN_ERROR_NOT_SUPPORTED,
              "kernel " + k.name + " takes parameter layout version " +
                  std::to_string(k.paramsVersion) + " but this runtime fills version " +
                  std::to_string(FAGEN_FWD_PARAMS_VERSION) +
                  ": rebuild the bundle with the fagen that matches this runtime");
}

/// Picks the best of `candidates` (kernels that serve the problem) for the current device,
/// loads it and fills the plan.
fagen_status planAmong(const fagen_bundle &bundle, const fagen_fwd_problem &problem,
                       const std::vector<int> &candidates, fagen_plan &plan) {
  std::string error;
  const DriverApi *api = getDriver(error);
  if (api == nullptr)
    return fail(FAGEN_ERROR_NO_DRIVER, error);
  Device device;
  if (fagen_status s = currentDevice(*api, device); s != FAGEN_OK)
    return s;
  int chosen = -1;
  if (fagen_status s = chooseKernel(bundle.bundle, candidates, device, chosen); s != FAGEN_OK)
    return s;
  CUfunction function = nullptr;
  // The cache is the one mutable part of a loaded bundle; the mutex makes this thread-safe.
  auto &mutableBundle = const_cast<fagen_bundle &>(bundle);
  if (fagen_status s = loadFunction(*api, mutableBundle, device, chosen, function); s != FAGEN_OK)
    return s;

  const KernelRecord &k = bundle.bundle.kernels[chosen];
  plan.bundle = &bundle;
  plan.kernel_index = chosen;
  plan.grid[0] = int32_t((int64_t(problem.seqlen_q) + k.blockM - 1) / k.blockM);
  plan.grid[1] = problem.heads_q;
  plan.grid[2] = problem.batch;
  plan.block[0] = k.threads;
  plan.block[1] = 1;
  plan.block[2] = 1;
  plan.smem_bytes = k.smemBytes;
  plan.function = function;
  fagen_fwd_params params;
  fillParams(problem, params);
  std::memcpy(plan.params, &params, sizeof params);
  plan.workspace_bytes = 0;
  return FAGEN_OK;
}

void setStrides(fagen_fwd_problem *p, bool bshd) {
  auto fill = [bshd](int64_t s[3], int64_t seq, int64_t heads, int64_t dim) {
    s[0] = seq * heads * dim;
    s[1] = bshd ? dim : seq * dim;
    s[2] = bshd ? heads * dim : dim;
  };
  fill(p->q_strides, p->seqlen_q, p->heads_q, p->head_dim_qk);
  fill(p->k_strides, p->seqlen_k, p->heads_kv, p->head_dim_qk);
  fill(p->v_strides, p->seqlen_k, p->heads_kv, p->head_dim_v);
  fill(p->o_strides, p->seqlen_q, p->heads_q, p->head_dim_v);
}

} // namespace

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
  }
  return "FAGEN_STATUS_UNKNOWN";
}

const char *fagen_version(void) { return FAGEN_VERSION_STRING; }

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
  std::string ignored;
  const DriverApi *api = bundle->modules.empty() ? nullptr : getDriver(ignored);
  if (api != nullptr) {
    // A module belongs to its context; unload each with its context current, then restore.
    CUcontext previous = nullptr;
    api->cuCtxGetCurrent(&previous);
    for (const auto &[key, module] : bundle->modules) {
      if (api->cuCtxSetCurrent(key.first) == CUDA_SUCCESS)
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
  if (fagen_status s = checkPlanArguments("fagen_plan_forward", bundle, problem, plan);
      s != FAGEN_OK)
    return s;
  const Bundle &b = bundle->bundle;
  std::vector<int> candidates;
  const KernelRecord *otherParams = nullptr;
  for (size_t i = 0; i < b.kernels.size(); ++i) {
    if (!servesProblem(b.kernels[i], *problem))
      continue;
    if (b.kernels[i].paramsVersion != FAGEN_FWD_PARAMS_VERSION) {
      otherParams = &b.kernels[i];
      continue;
    }
    candidates.push_back(int(i));
  }
  if (candidates.empty() && otherParams != nullptr)
    return paramsVersionMismatch(*otherParams);
  if (candidates.empty())
    return fail(FAGEN_ERROR_NOT_SUPPORTED, notServedMessage(b, *problem));
  return planAmong(*bundle, *problem, candidates, *plan);
}

fagen_status fagen_plan_forward_kernel(const fagen_bundle *bundle,
                                       const fagen_fwd_problem *problem, int kernel_index,
                                       fagen_plan *plan) {
  if (fagen_status s = checkPlanArguments("fagen_plan_forward_kernel", bundle, problem, plan);
      s != FAGEN_OK)
    return s;
  const Bundle &b = bundle->bundle;
  if (kernel_index < 0 || size_t(kernel_index) >= b.kernels.size())
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                "fagen_plan_forward_kernel: kernel_index " + std::to_string(kernel_index) +
                    " is out of range [0, " + std::to_string(b.kernels.size()) + ")");
  const KernelRecord &k = b.kernels[kernel_index];
  if (int64_t seqlen = std::max(problem->seqlen_q, problem->seqlen_k);
      seqlen < k.seqlenMin || seqlen > k.seqlenMax)
    return fail(FAGEN_ERROR_NOT_SUPPORTED,
                "kernel " + k.name + " is tuned for max(seqlen_q, seqlen_k) in " +
                    std::to_string(k.seqlenMin) + ".." + std::to_string(k.seqlenMax) +
                    "; the call has " + std::to_string(seqlen) +
                    ": plan without pinning a kernel, or pick one whose range holds the call");
  if (!servesProblem(k, *problem))
    return fail(FAGEN_ERROR_NOT_SUPPORTED,
                "kernel " + k.name + " is a " + k.pass + " kernel for " +
                    variantText(k.dtype, k.headDimQK, k.headDimV, k.mask) +
                    "; the call is a forward for " +
                    variantText(dtypeName(*problem), problem->head_dim_qk,
                                problem->head_dim_v, maskName(*problem)));
  if (k.paramsVersion != FAGEN_FWD_PARAMS_VERSION)
    return paramsVersionMismatch(k);
  return planAmong(*bundle, *problem, {kernel_index}, *plan);
}

fagen_status fagen_run_forward(const fagen_plan *plan, const void *q, const void *k,
                               const void *v, void *o, float *lse, void *stream) {
  if (plan == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, "fagen_run_forward: plan is null");
  if (plan->bundle == nullptr || plan->function == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                "fagen_run_forward: the plan was not filled by a successful fagen_plan_forward");
  struct Pointer {
    const char *name;
    const void *ptr;
    uintptr_t align;
  };
  for (Pointer p : {Pointer{"q", q, 16}, {"k", k, 16}, {"v", v, 16}, {"o", o, 16}, {"lse", lse, 4}}) {
    if (p.ptr == nullptr)
      return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                  std::string("fagen_run_forward: ") + p.name + " is null");
    if (reinterpret_cast<uintptr_t>(p.ptr) % p.align != 0)
      return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                  std::string("fagen_run_forward: ") + p.name + " is not " +
                      std::to_string(p.align) + "-byte aligned");
  }
  std::string error;
  const DriverApi *api = getDriver(error);
  if (api == nullptr)
    return fail(FAGEN_ERROR_NO_DRIVER, error);

  fagen_fwd_params params;
  std::memcpy(&params, plan->params, sizeof params);
  params.q = q;
  params.k = k;
  params.v = v;
  params.o = o;
  params.lse = lse;
  void *args[] = {&params};
  CUresult r = api->cuLaunchKernel(static_cast<CUfunction>(plan->function), unsigned(plan->grid[0]),
                                   unsigned(plan->grid[1]), unsigned(plan->grid[2]),
                                   unsigned(plan->block[0]), unsigned(plan->block[1]),
                                   unsigned(plan->block[2]), unsigned(plan->smem_bytes),
                                   static_cast<CUstream>(stream), args, nullptr);
  if (r != CUDA_SUCCESS)
    return fail(FAGEN_ERROR_CUDA, cudaErrorText(*api, r, "cuLaunchKernel") + " for kernel " +
                                      plan->bundle->bundle.kernels[plan->kernel_index].name);
  return FAGEN_OK;
}

} // extern "C"
