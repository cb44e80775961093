//===- Select.cpp - the C ABI: variants, kernel choice, plan ----------------===//
#include "runtime/src/RuntimeInternal.h"

using namespace fagen;
using namespace fagen::rt;

namespace fagen::rt {

//===--- Variants: one vocabulary for kernels and calls -------------------===//

int32_t effectiveMask(const fagen_fwd_problem &p) {
  return raw(p.mask) == FAGEN_MASK_NONE && p.causal ? int32_t(FAGEN_MASK_CAUSAL) : raw(p.mask);
}

std::string hashText(uint32_t hash) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", hash);
  return buf;
}

/// The call's variant (core/Variant.h). The problem has been validated: its enum fields hold
/// values of their enums, whose values core's enums share.
Variant callVariant(const fagen_fwd_problem &p, fagen_pass pass, bool deterministic) {
  Variant v;
  v.pass = pass == FAGEN_PASS_BACKWARD ? Pass::Backward : Pass::Forward;
  v.dtype = raw(p.dtype) == FAGEN_DTYPE_BF16 ? DType::BF16 : DType::FP16;
  v.headDimQK = p.head_dim_qk;
  v.headDimV = p.head_dim_v;
  v.mask = static_cast<Mask>(effectiveMask(p));
  v.maskAlign =
      raw(p.mask_align) == FAGEN_MASK_ALIGN_TOP_LEFT ? MaskAlign::TopLeft : MaskAlign::BottomRight;
  v.scoreMod = static_cast<ScoreMod>(raw(p.score_mod));
  v.dropout = p.dropout_p > 0;
  v.varlen = p.varlen != 0;
  v.sparsity = static_cast<Sparsity>(raw(p.sparsity));
  v.sparseBlock = p.sparse_block;
  v.sparseHash = p.sparse_hash ? hashText(p.sparse_hash) : "";
  v.deterministic = deterministic;
  return v;
}

/// Why kernel k, of the call's variant, cannot take this call's shape; "" if it can.
bool takesTmaMaps(const KernelRecord &k);

/// Why the tensor maps of TMA kernel k cannot describe the call's Q, K and V, and O where k
/// stores it with TMA ("" if they can): a stride must be nonzero where its dimension has more
/// than one index (no broadcast; an output never has such a stride: checkStrides refuses it)
/// and below 2^39 elements (cuTensorMapEncodeTiled's 2^40 bytes).
std::string tmaLayoutProblem(const KernelRecord &k, const fagen_fwd_problem &p) {
  struct Tensor {
    const char *name;
    const int64_t *strides;
    int64_t heads, seqlen;
    const char *verb;
  };
  const char *dims[3] = {"batch", "head", "row"};
  // Varlen: packed tensors, whose batch stride is unused and whose rows are all sequences'.
  const int64_t rowsQ = p.varlen ? p.total_q : p.seqlen_q;
  const int64_t rowsK = p.varlen ? p.total_k : p.seqlen_k;
  // The backward (sm90ws) loads dO where the forward may store O.
  const Tensor all[4] = {{"q", p.q_strides, p.heads_q, rowsQ, "loads"},
                         {"k", p.k_strides, p.heads_kv, rowsK, "loads"},
                         {"v", p.v_strides, p.heads_kv, rowsK, "loads"},
                         k.isBackward() ? Tensor{"do", p.do_strides, p.heads_q, rowsQ, "loads"}
                                        : Tensor{"o", p.o_strides, p.heads_q, rowsQ, "stores"}};
  for (int i = 0; i < (k.tmaStoreO || k.isBackward() ? 4 : 3); ++i) { // O or dO last
    const Tensor &t = all[i];
    // A paged kernel loads K and V by TMA from the pages, or gathers them (cp.async). By TMA,
    // their batch stride is the page stride, a dimension of the map (the pages'), never 0.
    const bool pages = k.isPaged() && i > 0;
    if (pages && FAGEN_PAGED_TMA_BOX_ROWS(k.pageSize, k.blockN) == 0)
      break;
    if (pages && t.strides[0] == 0)
      return "kernel " + k.name + " loads " + t.name + " through TMA page by page: " + t.name +
             "_strides[0] (the page stride) is 0; pass the caches' page, head and row strides "
             "(fagen_fwd_problem_set_paged_strides)";
    const int64_t extents[3] = {p.varlen ? 1 : p.batch, t.heads, t.seqlen};
    for (int d = 0; d < 3; ++d) {
      if (extents[d] > 1 && t.strides[d] == 0)
        return "kernel " + k.name + " " + t.verb + " " + t.name +
               " through TMA, which cannot broadcast: " + t.name + "_strides[" + str(d) + "] (" +
               dims[d] + ") is 0 with " + str(extents[d]) +
               " indices; pass a materialized tensor or build the variant " +
               "with tile: {template: sm80}";
      if (t.strides[d] >= (int64_t(1) << 39))
        return "kernel " + k.name + " " + t.verb + " " + t.name +
               " through TMA, whose strides must be below 2^39 elements: " + t.name +
               "_strides[" + str(d) + "] is " + str(t.strides[d]) +
               "; pass a compact tensor or build the variant with tile: {template: sm80}";
    }
  }
  return "";
}

std::string shapeProblem(const KernelRecord &k, const fagen_fwd_problem &p) {
  if (isDecodeKernel(k) && p.seqlen_q > k.qTokens)
    return "kernel " + k.name + " decodes up to " + str(k.qTokens) +
           " query tokens per sequence (spec decode.q_tokens); the call has seqlen_q " +
           str(p.seqlen_q) + ": raise decode.q_tokens (at most " +
           str(FAGEN_DECODE_MAX_Q_TOKENS) + "), or add fwd to the variant's passes";
  if (isDecodeKernel(k) &&
      fagen_merge_blocks(int64_t(p.batch) * p.heads_q * p.seqlen_q, p.head_dim_v,
                         FAGEN_COMBINE_STATE_LANES) >= (int64_t(1) << 31))
    return "kernel " + k.name + "'s combine takes " + str(FAGEN_COMBINE_STATE_LANES) +
           " threads per 8 columns of O in a 1-D grid " +
           "below 2^31 blocks; the call has batch x heads_q x seqlen_q = " +
           str(int64_t(p.batch) * p.heads_q * p.seqlen_q) + " rows: split the batch";
  if (takesTmaMaps(k))
    if (std::string why = tmaLayoutProblem(k, p); !why.empty())
      return why;
  if (k.sparsity != Sparsity::Static)
    return "";
  int64_t rows = int64_t(k.sparseRows) * k.sparseBlock,
          cols = int64_t(k.sparseCols) * k.sparseBlock;
  if (p.seqlen_q <= rows && p.seqlen_k <= cols)
    return "";
  return "kernel " + k.name + "'s static block layout covers " + str(rows) + " queries x " +
         str(cols) + " keys (" + str(k.sparseRows) + " x " + str(k.sparseCols) + " blocks of " +
         str(k.sparseBlock) + "); the call has seqlen_q " + str(p.seqlen_q) + " and seqlen_k " +
         str(p.seqlen_k) + ": set block_sparse.max_seqlen in the spec to at least " +
         str(std::max(p.seqlen_q, p.seqlen_k)) + " and rebuild";
}

bool inSeqlenRange(const KernelRecord &k, const fagen_fwd_problem &p) {
  int64_t seqlen = std::max(p.seqlen_q, p.seqlen_k);
  return k.seqlenMin <= seqlen && seqlen <= k.seqlenMax;
}

/// Whether kernel k takes a second argument, its tensor maps (abi/tma_params.h), and a 1-D
/// grid over its work tiles (wsGridSize; templates/sm90/ws_tile_scheduler.cuh).
bool takesTmaMaps(const KernelRecord &k) { return k.templ == "sm90ws"; }

/// Whether backward kernel k adds whole query tiles to dq_accum, padding rows included (its
/// varlen sequences then start at fagen_bwd_dq_tile_row0: templates/abi/bwd_params.h).
bool addsWholeDqTiles(const KernelRecord &k) { return k.templ == "sm90ws"; }

/// Floats per dq_accum row: the sm90ws backward's tile head dim (ws_bwd_dim: hd 96 in 128
/// columns, 192 in 256), else the head dim.
int64_t dqAccumCols(const KernelRecord &k, int headDimQK) {
  return k.templ == "sm90ws" ? ws_bwd_dim(headDimQK) : headDimQK;
}

/// CTAs of a sm90ws launch: one per SM for a persistent kernel (the plan's choice, measured:
/// compiler/plan/Plan.cpp finalizePlan) and for a kernel that takes its tiles from the forward
/// workspace's counter (`counter`: the call has a workspace), else one per work tile.
int64_t wsGridSize(const KernelRecord &k, int64_t tiles, int sms, bool counter) {
  const bool oneCtaPerSm = k.persistent || (counter && k.tileCounter);
  return oneCtaPerSm ? std::min<int64_t>(tiles, std::max(sms, 1)) : tiles;
}

/// Bytes of the forward workspace of a kernel with a tile counter: one int32 counter.
constexpr size_t kFwdWorkspaceBytes = 4;

/// Why a sm90ws launch of this size would overflow the kernel's 32-bit counters ("" if it
/// does not): its work tiles (and a 1-D grid of them) and the key tiles one CTA walks.
std::string wsSizeProblem(const KernelRecord &k, const fagen_fwd_problem &p, int sms) {
  const int64_t tiles = (p.seqlen_q + k.blockM - 1) / k.blockM * p.heads_q * p.batch;
  // A kernel with a tile counter keeps its K/V tile count modulo 2 kStages (any CTA may take
  // any number of tiles): only a work tile's own key tiles count.
  const int64_t grid = k.tileCounter ? tiles : wsGridSize(k, tiles, sms, false);
  const int64_t keyTiles = (tiles + grid - 1) / grid * ((p.seqlen_k + k.blockN - 1) / k.blockN);
  if (tiles <= (int64_t(1) << 30) && keyTiles <= (int64_t(1) << 30))
    return "";
  return "kernel " + k.name + " counts work tiles and key tiles in 32 bits; the call has " +
         str(tiles) + " work tiles of " + str(k.blockM) + " queries and up to " + str(keyTiles) +
         " key tiles per thread block (limit 2^30): split the batch";
}

int expectedParamsVersion(const KernelRecord &k) {
  // A paged forward (chunked prefill) takes the decode block's paged fields around its own.
  return k.isBackward()                     ? FAGEN_BWD_PARAMS_VERSION
         : isDecodeKernel(k) || k.isPaged() ? FAGEN_DECODE_PARAMS_VERSION
                                            : FAGEN_FWD_PARAMS_VERSION;
}

fagen_status paramsVersionMismatch(const KernelRecord &k) {
  return fail(FAGEN_ERROR_NOT_SUPPORTED,
              "kernel " + k.name + " takes parameter layout version " + str(k.paramsVersion) +
                  " but this runtime fills version " + str(expectedParamsVersion(k)) +
                  ": rebuild the bundle with the fagen that matches this runtime");
}

/// The spec keys that build a kernel for `c`: "dtype fp16, head_dim 96 and mask causal".
std::string notServedMessage(const Bundle &bundle, const Variant &c) {
  const char *passName = c.isBackward() ? "backward" : "forward";
  std::set<std::string> offered;
  for (const KernelRecord &k : bundle.kernels)
    if (k.pass == c.pass)
      offered.insert(k.text());
  std::string have;
  for (const std::string &v : offered)
    have += (have.empty() ? "" : ", ") + v;
  return std::string("no ") + passName + " kernel in the bundle serves " + c.text() +
         "; the bundle has " +
         (have.empty() ? std::string("no ") + passName + " kernels"
                       : std::string(passName) + " kernels for " + have) +
         ": add a variant with " + c.specKeys() + " to the spec and rebuild";
}

std::string describe(const KernelRecord &k) {
  std::string variant = k.text(); // "fp16 head_dim 128/128 mask causal ..."
  return k.name + " (" + toText(k.pass) + " " + k.arch + " " + variant + " tile " + str(k.blockM) +
         "x" + str(k.blockN) + " warps " + str(k.warps) + " stages " + str(k.stages) + " smem " +
         str(k.smemBytes) + ")";
}

fagen_status adopt(Bundle parsed, fagen_bundle **out) {
  auto *b = new fagen_bundle;
  b->bundle = std::move(parsed);
  b->id = registerBundle(b);
  for (const KernelRecord &k : b->bundle.kernels)
    b->descriptions.push_back(describe(k));
  *out = b;
  return FAGEN_OK;
}


//===--- Kernel choice -----------------------------------------------------===//

/// Higher is better: an 'a' kernel built for exactly this GPU, then a plain one for this
/// GPU, then a plain one for an older minor version of the same major.
int archRank(const std::string &arch, int major, int minor) {
  if (arch.back() == 'a')
    return 3;
  return archComputeCapability(arch) == major * 10 + minor ? 2 : 1;
}

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
  d.contextId = contextId(api, d.context);
  struct {
    int *out;
    int attribute;
  } queries[] = {{&d.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
                 {&d.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR},
                 {&d.smemOptin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN},
                 {&d.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT}};
  for (auto &q : queries)
    if (CUresult r = api.cuDeviceGetAttribute(q.out, q.attribute, d.device); r != CUDA_SUCCESS)
      return fail(FAGEN_ERROR_CUDA, cudaErrorText(api, r, "cuDeviceGetAttribute"));
  char name[256] = {};
  if (api.cuDeviceGetName(name, sizeof name - 1, d.device) == CUDA_SUCCESS)
    d.name = name;
  return FAGEN_OK;
}

/// Among the kernels that serve the problem, the best one that runs on this device: a decode
/// kernel over any other (candidates hold one only for calls of at most its q_tokens), the one
/// of the fewest q_tokens among them (the smallest packed tile that holds the call), a
/// nondeterministic backward over a deterministic one (faster, and the call did not ask for
/// bitwise repeatability, or only deterministic kernels serve it), then the best arch match,
/// then the narrowest tuned seqlen range.
fagen_status chooseKernel(const Bundle &bundle, const std::vector<int> &candidates,
                          const Device &d, int &chosen) {
  std::set<std::string> archs;
  std::tuple<bool, int, int, int, int64_t> best;
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
    std::tuple<bool, int, int, int, int64_t> rank{isDecodeKernel(k), -k.qTokens, !k.deterministic,
                                                  archRank(k.arch, d.major, d.minor),
                                                  -(k.seqlenMax - k.seqlenMin)};
    if (chosen < 0 || rank > best) {
      best = rank;
      chosen = i;
    }
  }
  if (chosen >= 0)
    return FAGEN_OK;
  std::string gpu = "this GPU (" + (d.name.empty() ? "device " + str(d.device) : d.name) +
                    ") is " + d.arch();
  std::string suggestion = d.arch() + (d.major >= 9 ? " (or " + d.arch() + "a)" : "");
  if (tooBig != nullptr)
    return fail(FAGEN_ERROR_NO_KERNEL_FOR_GPU,
                "kernel " + tooBig->name + " needs " + str(tooBig->smemBytes) +
                    " bytes of shared memory per block; " + gpu + " and allows " +
                    str(d.smemOptin) + ": rebuild with --arch " + suggestion +
                    " so that the planner fits the tiles to this GPU");
  std::string have;
  for (const std::string &a : archs)
    have += (have.empty() ? "" : ", ") + a;
  return fail(FAGEN_ERROR_NO_KERNEL_FOR_GPU,
              "bundle has kernels for " + have + " for this call; " + gpu +
                  ": rebuild with --arch " + suggestion);
}

const char *partSuffix(Part part) {
  switch (part) {
  case Part::kPre:
    return "_pre";
  case Part::kPost:
    return "_post";
  case Part::kCombine:
    return "_combine";
  case Part::kMerge:
    return "_merge";
  case Part::kAppend:
    return "_append";
  default:
    return "";
  }
}

/// One entry point of the kernel in the current context, loading its module on first use.
fagen_status loadFunction(const DriverApi &api, fagen_bundle &b, const Device &d, int index,
                          Part part, CUfunction &function) {
  std::lock_guard<std::mutex> lock(b.mutex);
  if (auto it = b.functions.find({d.context, d.contextId, index, int(part)});
      it != b.functions.end()) {
    function = it->second;
    return FAGEN_OK;
  }
  const KernelRecord &k = b.bundle.kernels[index];
  CUmodule &module = b.modules[{d.context, d.contextId, k.cubinSection}];
  if (module == nullptr) {
    CUresult r = api.cuModuleLoadData(&module, b.bundle.cubins[k.cubinSection].data());
    if (r != CUDA_SUCCESS) {
      module = nullptr;
      b.modules.erase({d.context, d.contextId, k.cubinSection});
      std::string what = cudaErrorText(api, r, "cuModuleLoadData") + " for kernel " + k.name +
                         " (" + k.arch + ")";
      if (r == CUDA_ERROR_NO_BINARY_FOR_GPU)
        return fail(FAGEN_ERROR_NO_KERNEL_FOR_GPU,
                    what + ": this GPU is " + d.arch() + "; rebuild with --arch " + d.arch());
      return fail(FAGEN_ERROR_CUDA, what);
    }
  }
  std::string symbol = k.name + partSuffix(part);
  if (CUresult r = api.cuModuleGetFunction(&function, module, symbol.c_str()); r != CUDA_SUCCESS)
    return fail(FAGEN_ERROR_BUNDLE_INVALID,
                cudaErrorText(api, r, "cuModuleGetFunction") + ": cubin section " +
                    str(k.cubinSection + 1) + " has no kernel named " + symbol +
                    " as the manifest says: rebuild the bundle");
  if (part == Part::kMain) {
    if (CUresult r = api.cuFuncSetAttribute(
            function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k.smemBytes);
        r != CUDA_SUCCESS)
      return fail(FAGEN_ERROR_CUDA, cudaErrorText(api, r, "cuFuncSetAttribute") +
                                        " (max dynamic shared memory " + str(k.smemBytes) +
                                        ") for kernel " + k.name);
  }
  b.functions[{d.context, d.contextId, index, int(part)}] = function;
  return FAGEN_OK;
}

void copyStrides(const int64_t from[3], int64_t &batch, int64_t &head, int64_t &row) {
  batch = from[0];
  head = from[1];
  row = from[2];
}

/// The forward parameter block of a validated problem, pointers left null (run fills them).
void fillForwardParams(const fagen_fwd_problem &p, fagen_fwd_params &fp) {
  std::memset(&fp, 0, sizeof fp);
  copyStrides(p.q_strides, fp.q_batch_stride, fp.q_head_stride, fp.q_row_stride);
  copyStrides(p.k_strides, fp.k_batch_stride, fp.k_head_stride, fp.k_row_stride);
  copyStrides(p.v_strides, fp.v_batch_stride, fp.v_head_stride, fp.v_row_stride);
  copyStrides(p.o_strides, fp.o_batch_stride, fp.o_head_stride, fp.o_row_stride);
  // LSE: [batch, heads_q, seqlen_q] contiguous; varlen [heads_q, total_q].
  fp.lse_batch_stride = p.varlen ? 0 : int64_t(p.heads_q) * p.seqlen_q;
  fp.lse_head_stride = p.varlen ? p.total_q : p.seqlen_q;
  fp.batch = p.batch;
  fp.heads_q = p.heads_q;
  fp.heads_kv = p.heads_kv;
  fp.seqlen_q = p.seqlen_q;
  fp.seqlen_k = p.seqlen_k;
  fp.group_size = p.heads_q / p.heads_kv;
  double scale = p.softmax_scale != 0.0f ? p.softmax_scale : 1.0 / std::sqrt(double(p.head_dim_qk));
  fp.softmax_scale = float(scale);
  fp.scale_log2 = float(scale * 1.4426950408889634); // log2(e)
  if (raw(p.mask) == FAGEN_MASK_WINDOW) {
    fp.window_left = capWindowBound(p.window_left, p.seqlen_q, p.seqlen_k);
    fp.window_right = capWindowBound(p.window_right, p.seqlen_q, p.seqlen_k);
  }
  if (raw(p.score_mod) == FAGEN_SCORE_MOD_SOFTCAP)
    fp.softcap = p.softcap;
  if (p.varlen) { // <= 2^31 - 1 (validateVarlenAndSparsity)
    fp.total_q = int32_t(p.total_q);
    fp.total_k = int32_t(p.total_k);
  }
  if (p.dropout_p > 0) { // quantized to 1/256 by the keep rule (philox.h)
    fp.dropout_p = p.dropout_p;
    fp.dropout_threshold = fagen::dropout_threshold(p.dropout_p);
    fp.dropout_rescale = fagen::dropout_rescale(fp.dropout_threshold);
  }
}

/// A dropout kernel's parameters for dropout_p = 0: threshold 0 (no byte is below it) and
/// rescale 1, so that every element is kept unscaled.
void setKeepAll(fagen_fwd_params &fp) {
  fp.dropout_p = 0;
  fp.dropout_threshold = 0;
  fp.dropout_rescale = fagen::dropout_rescale(0);
}

/// The run-time arguments kernel k reads (FAGEN_RUN_ARG_*).
uint32_t runArgsOf(const KernelRecord &k) {
  return (k.scoreMod == ScoreMod::Alibi ? FAGEN_RUN_ARG_ALIBI_SLOPES : 0u) |
         (k.sparsity == Sparsity::Runtime ? FAGEN_RUN_ARG_BLOCK_MASK : 0u) |
         (k.varlen ? FAGEN_RUN_ARG_CU_SEQLENS : 0u) | (k.dropout ? FAGEN_RUN_ARG_DROPOUT_SEED : 0u);
}

fagen_status checkPlanArguments(const char *function, const fagen_bundle *bundle,
                                const fagen_fwd_problem *problem, fagen_plan *plan,
                                fagen_pass pass, int32_t deterministic) {
  if (fagen_status s = checkPlanCall(function, bundle, problem, plan, "fagen_fwd_problem",
                                     "FAGEN_FWD_PROBLEM_INIT");
      s != FAGEN_OK)
    return s;
  if (deterministic != 0 && deterministic != 1)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) + ": deterministic (" +
                                                  str(deterministic) + ") must be 0 or 1");
  std::string error;
  if (!validateProblem(*problem, error) ||
      (pass == FAGEN_PASS_BACKWARD && !validateGradientStrides(*problem, error)))
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) + ": " + error);
  return FAGEN_OK;
}

/// The kernels of the call's variant that take its shape. On none, the most specific reason.
/// The kernels of `b` that serve the call; `shapeReason` gets why the first kernel of the
/// call's variant that cannot take this shape was left out ("" if none was).
fagen_status findCandidates(const Bundle &b, const fagen_fwd_problem &p, const Variant &call,
                            std::vector<int> &candidates, std::string &shapeReason) {
  const KernelRecord *otherParams = nullptr, *outOfRange = nullptr;
  std::set<std::string> staticLayouts;
  for (size_t i = 0; i < b.kernels.size(); ++i) {
    const KernelRecord &k = b.kernels[i];
    if (!servesCall(k, call))
      continue;
    if (std::string why = shapeProblem(k, p); !why.empty()) {
      shapeReason = shapeReason.empty() ? why : shapeReason;
      continue;
    }
    if (!inSeqlenRange(k, p)) {
      outOfRange = outOfRange ? outOfRange : &k;
      continue;
    }
    if (k.paramsVersion != expectedParamsVersion(k)) {
      otherParams = otherParams ? otherParams : &k;
      continue;
    }
    if (k.sparsity == Sparsity::Static)
      staticLayouts.insert(k.sparseHash);
    candidates.push_back(int(i));
  }
  if (staticLayouts.size() > 1) {
    std::string list;
    for (const std::string &h : staticLayouts)
      list += (list.empty() ? "" : ", ") + h;
    return fail(FAGEN_ERROR_NOT_SUPPORTED,
                "the bundle has " + str(int64_t(staticLayouts.size())) +
                    " static block layouts for " + call.text() + " (sparse_hash " + list +
                    "): set the problem's sparse_hash to the layout the call means");
  }
  if (!candidates.empty())
    return FAGEN_OK;
  if (!shapeReason.empty())
    return fail(FAGEN_ERROR_NOT_SUPPORTED, shapeReason);
  if (otherParams != nullptr)
    return paramsVersionMismatch(*otherParams);
  if (outOfRange != nullptr)
    return fail(FAGEN_ERROR_NOT_SUPPORTED,
                "the kernels for " + call.text() + " are tuned for max(seqlen_q, seqlen_k) in " +
                    "ranges without " + str(std::max(p.seqlen_q, p.seqlen_k)) + " (e.g. " +
                    outOfRange->name + ": " + str(outOfRange->seqlenMin) + ".." +
                    str(outOfRange->seqlenMax) + "): rebuild with the default kernel as well");
  return fail(FAGEN_ERROR_NOT_SUPPORTED, notServedMessage(b, call));
}

/// Why pinned kernel k cannot take the call; FAGEN_OK if it can.
fagen_status checkPinnedKernel(const Bundle &b, const char *function, const fagen_fwd_problem &p,
                               const Variant &call, int kernelIndex) {
  if (kernelIndex < 0 || size_t(kernelIndex) >= b.kernels.size())
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": kernel_index " + str(kernelIndex) +
                    " is out of range [0, " + str(int64_t(b.kernels.size())) + ")");
  const KernelRecord &k = b.kernels[kernelIndex];
  if (!inSeqlenRange(k, p))
    return fail(FAGEN_ERROR_NOT_SUPPORTED,
                "kernel " + k.name + " is tuned for max(seqlen_q, seqlen_k) in " +
                    str(k.seqlenMin) + ".." + str(k.seqlenMax) + "; the call has " +
                    str(std::max(p.seqlen_q, p.seqlen_k)) +
                    ": plan without pinning a kernel, or pick one whose range holds the call");
  if (!servesCall(k, call))
    return fail(FAGEN_ERROR_NOT_SUPPORTED, "kernel " + k.name + " is a " + toText(k.pass) +
                                               " kernel for " + k.text() + "; the call is a " +
                                               (call.isBackward() ? "backward" : "forward") +
                                               " for " + call.text());
  if (std::string why = shapeProblem(k, p); !why.empty())
    return fail(FAGEN_ERROR_NOT_SUPPORTED, why);
  if (k.paramsVersion != expectedParamsVersion(k))
    return paramsVersionMismatch(k);
  return FAGEN_OK;
}

void setGrid(int32_t out[3], int64_t x, int32_t y, int32_t z) {
  out[0] = int32_t(x);
  out[1] = y;
  out[2] = z;
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The backward's parameter block and workspace (bwd_params.h) for kernel k.
void fillBackwardPlan(const fagen_fwd_problem &p, const KernelRecord &k, fagen_plan &plan) {
  fagen_bwd_params bp;
  std::memset(&bp, 0, sizeof bp);
  fillForwardParams(p, bp.fwd);
  copyStrides(p.do_strides, bp.do_batch_stride, bp.do_head_stride, bp.do_row_stride);
  copyStrides(p.dq_strides, bp.dq_batch_stride, bp.dq_head_stride, bp.dq_row_stride);
  copyStrides(p.dk_strides, bp.dk_batch_stride, bp.dk_head_stride, bp.dk_row_stride);
  copyStrides(p.dv_strides, bp.dv_batch_stride, bp.dv_head_stride, bp.dv_row_stride);
  const int64_t rowsQ = p.varlen ? p.total_q : int64_t(p.batch) * p.seqlen_q;
  const int64_t rowsPerHead = p.varlen ? p.total_q : p.seqlen_q;
  const int32_t mBlocks = int32_t(ceilDiv(p.seqlen_q, k.blockM));
  // dq_accum [batch, heads_q, whole query tiles, head_dim_qk] and D like the LSE; varlen: the
  // batch index is folded into the packed row (sm90ws: each sequence's rows in whole tiles).
  const int64_t dqRowsPerHead =
      p.varlen && addsWholeDqTiles(k)
          ? fagen_bwd_dq_tiled_rows(p.total_q, p.batch, k.blockM)
          : fagen_bwd_dq_rows(p.varlen, p.seqlen_q, p.total_q, k.blockM);
  const int64_t dqCols = dqAccumCols(k, p.head_dim_qk);
  bp.dq_accum_batch_stride = p.varlen ? 0 : int64_t(p.heads_q) * dqRowsPerHead * dqCols;
  bp.dq_accum_head_stride = dqRowsPerHead * dqCols;
  bp.d_batch_stride = p.varlen ? 0 : int64_t(p.heads_q) * p.seqlen_q;
  bp.d_head_stride = rowsPerHead;
  bp.semaphore_batch_stride = int64_t(p.heads_q) * mBlocks;
  bp.semaphore_head_stride = mBlocks;
  bp.m_blocks = mBlocks;
  // sm90ws causal kernels: the key tiles of 2^g kv heads interleaved (bwd_params.h).
  const int64_t keyTiles = ceilDiv(p.seqlen_k, k.blockN);
  const bool grouped = takesTmaMaps(k) && fagen_bwd_ws_groups_kv_heads(k.mask == Mask::Causal,
                                                                       k.deterministic ? 1 : 0);
  bp.tile_group_log2 = grouped ? fagen_bwd_tile_group_log2(p.seqlen_q, bp.fwd.group_size,
                                                           p.head_dim_qk, p.head_dim_v,
                                                           int32_t(dqCols), p.heads_kv, keyTiles)
                               : 0;
  std::memcpy(plan.params, &bp, sizeof bp);

  const int64_t dqRows = p.varlen ? dqRowsPerHead : int64_t(p.batch) * dqRowsPerHead;
  const int32_t dqSlots = fagen_bwd_dq_slots(k.deterministic ? 1 : 0,
                                             k.mask == Mask::None && k.sparsity == Sparsity::None);
  fagen_bwd_workspace w = fagen_bwd_workspace_layout(rowsQ, dqRows, p.heads_q, int32_t(dqCols),
                                                     p.batch, mBlocks, k.deterministic ? 1 : 0,
                                                     dqSlots);
  plan.workspace_bytes = size_t(w.total_bytes);
  plan.workspace_offsets[0] = w.dq_accum_offset;
  plan.workspace_offsets[1] = w.d_offset;
  plan.workspace_offsets[2] = w.semaphore_offset;
  const fagen_bwd_grid grid =
      fagen_bwd_main_grid(keyTiles, p.heads_kv, p.batch, bp.tile_group_log2);
  setGrid(plan.grid, grid.x, grid.y, grid.z);
  setGrid(plan.pre_post_grid, mBlocks, p.heads_q, p.batch);
  setGrid(plan.pre_post_block, k.prePostThreads, 1, 1);
}

/// Picks the best of `candidates` (kernels that serve the problem) for the current device,
/// loads it and fills the plan.
fagen_status planAmong(const fagen_bundle &bundle, const fagen_fwd_problem &problem,
                       fagen_pass pass, const std::vector<int> &candidates, fagen_plan &plan,
                       const fagen_paged_kv *paged) {
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
  // The cache is the one mutable part of a loaded bundle; the mutex makes this thread-safe.
  auto &mutableBundle = const_cast<fagen_bundle &>(bundle);
  const KernelRecord &k = bundle.bundle.kernels[chosen];
  // Slots: main, pre, post (a decode kernel's combine in post, a paged one's append in pre).
  CUfunction functions[3] = {};
  const std::pair<Part, int> parts[] = {{Part::kMain, 0}, {Part::kPre, 1}, {Part::kPost, 2},
                                        {Part::kCombine, 2}};
  for (auto [part, slot] : parts) {
    const bool needed = part == Part::kMain ||
                        (pass == FAGEN_PASS_BACKWARD && (part == Part::kPre || part == Part::kPost)) ||
                        (isDecodeKernel(k) && part == Part::kCombine);
    if (!needed)
      continue;
    if (fagen_status s = loadFunction(*api, mutableBundle, device, chosen, part, functions[slot]);
        s != FAGEN_OK)
      return s;
  }
  // A paged decode kernel's NAME_append (decode params version 1004 on).
  if (isDecodeKernel(k) && k.isPaged())
    if (fagen_status s =
            loadFunction(*api, mutableBundle, device, chosen, Part::kAppend, functions[1]);
        s != FAGEN_OK)
      return s;

  if (takesTmaMaps(k) && api->cuTensorMapEncodeTiled == nullptr)
    return fail(FAGEN_ERROR_NOT_SUPPORTED,
                "kernel " + k.name + " loads through TMA, and the CUDA driver (" + api->path +
                    ") has no cuTensorMapEncodeTiled: install a driver for CUDA 12.0 or newer, "
                    "or build the bundle for sm_90 instead of sm_90a");
  if (takesTmaMaps(k) && pass == FAGEN_PASS_FORWARD)
    if (std::string why = wsSizeProblem(k, problem, device.sms); !why.empty())
      return fail(FAGEN_ERROR_NOT_SUPPORTED, why);
  plan.struct_size = sizeof(fagen_plan);
  plan.abi_tag = FAGEN_ABI_TAG;
  plan.bundle = &bundle;
  plan.bundle_id = bundle.id;
  plan.context = device.context;
  plan.context_id = device.contextId;
  plan.device = device.device;
  plan.kernel_index = chosen;
  plan.pass = pass;
  setGrid(plan.block, k.threads, 1, 1);
  plan.smem_bytes = k.smemBytes;
  plan.run_args = runArgsOf(k);
  // A dropout kernel serving dropout_p = 0 (planCall) keeps every element; it reads no seed.
  const bool dropoutOff = k.dropout && problem.dropout_p == 0;
  if (dropoutOff)
    plan.run_args &= ~FAGEN_RUN_ARG_DROPOUT_SEED;
  plan.function = functions[0];
  plan.pre_function = functions[1];
  plan.post_function = functions[2];
  if (pass == FAGEN_PASS_BACKWARD) {
    fillBackwardPlan(problem, k, plan);
    if (dropoutOff) {
      fagen_bwd_params bp;
      std::memcpy(&bp, plan.params, sizeof bp);
      setKeepAll(bp.fwd);
      std::memcpy(plan.params, &bp, sizeof bp);
    }
    return FAGEN_OK;
  }
  if (isDecodeKernel(k)) {
    fillDecodePlan(problem, paged, k, device.sms, plan);
    return FAGEN_OK;
  }
  if (k.isPaged() && paged != nullptr) {
    fillPagedForwardPlan(problem, *paged, device.sms, k, plan);
    return FAGEN_OK;
  }
  const int64_t tiles = ceilDiv(problem.seqlen_q, k.blockM) * problem.heads_q * problem.batch;
  // sm90ws: a 1-D grid over the work tiles (templates/sm90/ws_tile_scheduler.cuh), the size of a
  // call with a workspace (runForward launches one CTA per tile when a call has none).
  if (takesTmaMaps(k))
    setGrid(plan.grid, wsGridSize(k, tiles, device.sms, true), 1, 1);
  else
    setGrid(plan.grid, ceilDiv(problem.seqlen_q, k.blockM), problem.heads_q, problem.batch);
  fagen_fwd_params params;
  fillForwardParams(problem, params);
  if (k.tileCounter)
    params.work_tiles = int32_t(tiles); // < 2^30 (wsSizeProblem)
  if (dropoutOff)
    setKeepAll(params);
  std::memcpy(plan.params, &params, sizeof params);
  plan.workspace_bytes = k.tileCounter ? kFwdWorkspaceBytes : 0;
  return FAGEN_OK;
}

/// Plans the best kernel for the call, or (pinned) kernel `kernelIndex`.
fagen_status planCall(const char *function, const fagen_bundle *bundle,
                      const fagen_fwd_problem *problem, fagen_pass pass, int32_t deterministic,
                      bool pinned, int kernelIndex, fagen_plan *plan,
                      const fagen_paged_kv *paged) {
  if (fagen_status s =
          checkPlanArguments(function, bundle, problem, plan, pass, deterministic);
      s != FAGEN_OK)
    return s;
  if (paged != nullptr)
    if (fagen_status s = checkPagedKv(function, *problem, paged); s != FAGEN_OK)
      return s;
  Variant call = callVariant(*problem, pass, deterministic != 0);
  call.pageSize = paged != nullptr ? paged->page_size : 0;
  std::vector<int> candidates;
  // dropout_p = 0 runs without dropout (docs/spec.md): a kernel without dropout, else one of
  // the same variant with dropout, which then keeps every element.
  if (pinned && problem->dropout_p == 0 && kernelIndex >= 0 &&
      size_t(kernelIndex) < bundle->bundle.kernels.size())
    call.dropout = bundle->bundle.kernels[kernelIndex].dropout;
  if (pinned) {
    if (fagen_status s = checkPinnedKernel(bundle->bundle, function, *problem, call, kernelIndex);
        s != FAGEN_OK)
      return s;
    candidates.push_back(kernelIndex);
    return planAmong(*bundle, *problem, pass, candidates, *plan, paged);
  }
  std::string leftOut;
  if (fagen_status s = findCandidates(bundle->bundle, *problem, call, candidates, leftOut);
      s != FAGEN_OK) {
    // Only where no kernel of the variant without dropout exists: otherwise its reason stands.
    auto served = [&](const Variant &v) {
      for (const KernelRecord &k : bundle->bundle.kernels)
        if (servesCall(k, v))
          return true;
      return false;
    };
    Variant withDropout = call;
    withDropout.dropout = true;
    if (problem->dropout_p != 0 || served(call) || !served(withDropout))
      return s;
    std::string withoutDropout = lastError;
    candidates.clear();
    leftOut.clear();
    if (findCandidates(bundle->bundle, *problem, withDropout, candidates, leftOut) != FAGEN_OK)
      return fail(s, withoutDropout); // the message of the call as made
  }
  // A kernel that cannot take the shape matters most when the others do not run here.
  fagen_status s = planAmong(*bundle, *problem, pass, candidates, *plan, paged);
  if (s == FAGEN_ERROR_NO_KERNEL_FOR_GPU && !leftOut.empty())
    return fail(FAGEN_ERROR_NOT_SUPPORTED, leftOut + "; and " + lastError);
  return s;
}

} // namespace fagen::rt
