//===- Runtime.cpp - the C ABI: load a bundle, plan a call, run it --------===//
//
// plan = validate the problem (host only), find the kernels built for the call's variant, pick
// the best for the device (compute capability, shared-memory limit), load its module once per
// context, fill the parameter block. run = copy the block, fill the pointers, cuLaunchKernel
// (three launches for the backward: _pre, main, _post). A bundle is immutable after load
// except for its module cache, which a mutex guards.
//
//===----------------------------------------------------------------------===//
#include "fagen/fagen.h"

#include "compiler/bundle/Bundle.h"
#include "runtime/src/Driver.h"
#include "runtime/src/TmaMaps.h"
#include "templates/abi/bwd_params.h"
#include "templates/common/philox.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

static_assert(sizeof(fagen_fwd_params) <= sizeof(fagen_plan{}.params),
              "fagen_plan::params must hold the forward parameter block");
static_assert(sizeof(fagen_bwd_params) <= sizeof(fagen_plan{}.params),
              "fagen_plan::params must hold the backward parameter block");

namespace {
/// A forward plan's rows of the packed varlen tensors (0 when dense), kept in fagen_plan::params
/// after the parameter block: the tensor maps of a TMA kernel need them, the kernels do not.
struct PlanVarlenRows {
  int64_t total_q, total_k;
};
constexpr size_t kPlanVarlenRowsOffset = (sizeof(fagen_fwd_params) + 7) / 8 * 8;
static_assert(kPlanVarlenRowsOffset + sizeof(PlanVarlenRows) <= sizeof(fagen_plan{}.params),
              "fagen_plan::params must hold the forward parameter block and the varlen rows");
} // namespace
static_assert(sizeof(fagen_dtype) == 4 && sizeof(fagen_mask) == 4 &&
                  sizeof(fagen_mask_align) == 4 && sizeof(fagen_score_mod) == 4 &&
                  sizeof(fagen_sparsity) == 4 && sizeof(fagen_pass) == 4,
              "the C ABI's enums are 32-bit");

using namespace fagen;

struct fagen_bundle {
  Bundle bundle;
  std::vector<std::string> descriptions; ///< fagen_bundle_kernel_name, one per kernel
  std::mutex mutex;                      ///< guards the two caches
  std::map<std::pair<CUcontext, uint32_t>, CUmodule> modules;       ///< (context, cubin)
  std::map<std::tuple<CUcontext, int, int>, CUfunction> functions;  ///< (context, kernel, part)
};

namespace {

thread_local std::string lastError;

fagen_status fail(fagen_status status, std::string message) {
  lastError = std::move(message);
  return status;
}

std::string str(int64_t v) { return std::to_string(v); }

//===--- Variants: one vocabulary for kernels and calls -------------------===//

/// Every choice that decides whether a kernel computes a call, in the manifest's words.
struct VariantKey {
  std::string pass = "fwd";
  std::string dtype;
  int headDimQK = 0, headDimV = 0;
  std::string mask = "none", maskAlign = "bottom_right", scoreMod = "none";
  bool dropout = false, varlen = false;
  std::string sparsity = "none";
  int sparseBlock = 0;    ///< a call's static layout: 0 = any
  std::string sparseHash; ///< a call's static layout: "" = any
  bool deterministic = false;

  /// "fp16 head_dim 128/128 mask causal top_left softcap dropout".
  std::string text() const {
    std::string t = dtype + " head_dim " + str(headDimQK) + "/" + str(headDimV) + " mask " + mask;
    if (mask != "none" && maskAlign == "top_left")
      t += " top_left";
    if (scoreMod != "none")
      t += " " + scoreMod;
    if (dropout)
      t += " dropout";
    if (varlen)
      t += " varlen";
    if (sparsity != "none")
      t += " block_sparse " + sparsity + (sparseBlock ? " " + str(sparseBlock) : "") +
           (sparseHash.empty() ? "" : " layout " + sparseHash);
    if (deterministic)
      t += " deterministic";
    return t;
  }
};

VariantKey keyOf(const KernelRecord &k) {
  VariantKey v;
  v.pass = k.pass;
  v.dtype = k.dtype;
  v.headDimQK = k.headDimQK;
  v.headDimV = k.headDimV;
  v.mask = k.mask;
  v.maskAlign = k.maskAlign;
  v.scoreMod = k.scoreMod;
  v.dropout = k.dropout;
  v.varlen = k.varlen;
  v.sparsity = k.sparsity;
  v.sparseBlock = k.sparseBlock;
  v.sparseHash = k.sparseHash;
  v.deterministic = k.deterministic;
  return v;
}

/// The value a C caller stored in an enum field: any int may arrive, which must not be loaded
/// as the enum (undefined behaviour for values outside it).
template <typename Enum> int32_t raw(const Enum &e) {
  static_assert(sizeof(Enum) == sizeof(int32_t), "a 32-bit enum");
  int32_t v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

int32_t effectiveMask(const fagen_fwd_problem &p) {
  return raw(p.mask) == FAGEN_MASK_NONE && p.causal ? int32_t(FAGEN_MASK_CAUSAL) : raw(p.mask);
}

std::string hashText(uint32_t hash) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", hash);
  return buf;
}

/// The variant a (validated) call needs.
VariantKey callKey(const fagen_fwd_problem &p, fagen_pass pass, bool deterministic) {
  static const char *kMasks[] = {"none", "causal", "window"};
  static const char *kScoreMods[] = {"none", "softcap", "alibi"};
  static const char *kSparsity[] = {"none", "runtime", "static"};
  VariantKey v;
  v.pass = pass == FAGEN_PASS_BACKWARD ? "bwd" : "fwd";
  v.dtype = raw(p.dtype) == FAGEN_DTYPE_BF16 ? "bf16" : "fp16";
  v.headDimQK = p.head_dim_qk;
  v.headDimV = p.head_dim_v;
  v.mask = kMasks[effectiveMask(p)];
  v.maskAlign = raw(p.mask_align) == FAGEN_MASK_ALIGN_TOP_LEFT ? "top_left" : "bottom_right";
  v.scoreMod = kScoreMods[raw(p.score_mod)];
  v.dropout = p.dropout_p > 0;
  v.varlen = p.varlen != 0;
  v.sparsity = kSparsity[raw(p.sparsity)];
  v.sparseBlock = p.sparse_block;
  v.sparseHash = p.sparse_hash ? hashText(p.sparse_hash) : "";
  v.deterministic = deterministic;
  return v;
}

/// Whether kernel k computes the call's variant (shapes and seqlen ranges aside). A
/// deterministic backward serves a call that does not ask for one.
bool sameVariant(const KernelRecord &k, const VariantKey &c) {
  if (k.pass != c.pass || k.dtype != c.dtype || k.headDimQK != c.headDimQK ||
      k.headDimV != c.headDimV || k.mask != c.mask ||
      (c.mask != "none" && k.maskAlign != c.maskAlign) || k.scoreMod != c.scoreMod ||
      k.dropout != c.dropout || k.varlen != c.varlen || k.sparsity != c.sparsity)
    return false;
  if (c.deterministic && !k.deterministic)
    return false;
  if (c.sparsity == "runtime")
    return k.sparseBlock == c.sparseBlock;
  if (c.sparsity == "static")
    return (c.sparseBlock == 0 || k.sparseBlock == c.sparseBlock) &&
           (c.sparseHash.empty() || k.sparseHash == c.sparseHash);
  return true;
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
  const Tensor all[4] = {{"q", p.q_strides, p.heads_q, rowsQ, "loads"},
                         {"k", p.k_strides, p.heads_kv, rowsK, "loads"},
                         {"v", p.v_strides, p.heads_kv, rowsK, "loads"},
                         {"o", p.o_strides, p.heads_q, rowsQ, "stores"}};
  for (int i = 0; i < (k.tmaStoreO ? 4 : 3); ++i) { // O last
    const Tensor &t = all[i];
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
  if (takesTmaMaps(k))
    if (std::string why = tmaLayoutProblem(k, p); !why.empty())
      return why;
  if (k.sparsity != "static")
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
/// grid over its work tiles (wsGridSize; templates/sm90/fwd_ws_kernel.cuh).
bool takesTmaMaps(const KernelRecord &k) { return k.templ == "sm90ws"; }

/// CTAs of a sm90ws launch: one per SM for a persistent kernel (the plan's choice, measured:
/// compiler/Plan.cpp finalizePlan) and for a kernel that takes its tiles from the forward
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
  return k.pass == "bwd" ? FAGEN_BWD_PARAMS_VERSION : FAGEN_FWD_PARAMS_VERSION;
}

fagen_status paramsVersionMismatch(const KernelRecord &k) {
  return fail(FAGEN_ERROR_NOT_SUPPORTED,
              "kernel " + k.name + " takes parameter layout version " + str(k.paramsVersion) +
                  " but this runtime fills version " + str(expectedParamsVersion(k)) +
                  ": rebuild the bundle with the fagen that matches this runtime");
}

/// The spec keys that build a kernel for `c`: "dtype fp16, head_dim 96 and mask causal".
std::string specKeys(const VariantKey &c) {
  std::vector<std::string> keys = {
      "dtype " + c.dtype,
      "head_dim " + str(c.headDimQK) +
          (c.headDimV == c.headDimQK ? "" : " (head_dim_v " + str(c.headDimV) + ")"),
      "mask " + c.mask};
  if (c.mask != "none" && c.maskAlign == "top_left")
    keys.push_back("mask_align top_left");
  if (c.scoreMod != "none")
    keys.push_back("score_mod " + c.scoreMod);
  if (c.dropout)
    keys.push_back("dropout true");
  if (c.varlen)
    keys.push_back("varlen true");
  if (c.sparsity == "runtime")
    keys.push_back("block_sparse {block: " + str(c.sparseBlock) + ", layout: runtime}");
  if (c.sparsity == "static")
    keys.push_back("a static block_sparse layout" +
                   (c.sparseBlock ? " (block " + str(c.sparseBlock) + ")" : std::string()));
  if (c.pass == "bwd")
    keys.push_back(std::string("passes [fwd, bwd]") +
                   (c.deterministic ? " and deterministic true" : ""));
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i)
    out += (i == 0 ? "" : i + 1 == keys.size() ? " and " : ", ") + keys[i];
  return out;
}

std::string notServedMessage(const Bundle &bundle, const VariantKey &c) {
  const char *passName = c.pass == "bwd" ? "backward" : "forward";
  std::set<std::string> offered;
  for (const KernelRecord &k : bundle.kernels)
    if (k.pass == c.pass)
      offered.insert(keyOf(k).text());
  std::string have;
  for (const std::string &v : offered)
    have += (have.empty() ? "" : ", ") + v;
  return std::string("no ") + passName + " kernel in the bundle serves " + c.text() +
         "; the bundle has " +
         (have.empty() ? std::string("no ") + passName + " kernels"
                       : std::string(passName) + " kernels for " + have) +
         ": add a variant with " + specKeys(c) + " to the spec and rebuild";
}

std::string describe(const KernelRecord &k) {
  VariantKey v = keyOf(k);
  std::string variant = v.text(); // "fp16 head_dim 128/128 mask causal ..."
  return k.name + " (" + k.pass + " " + k.arch + " " + variant + " tile " + str(k.blockM) + "x" +
         str(k.blockN) + " warps " + str(k.warps) + " stages " + str(k.stages) + " smem " +
         str(k.smemBytes) + ")";
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

bool checkStrides(const char *tensor, const int64_t strides[3], const int64_t extents[3],
                  bool isOutput, bool varlen, std::string &error) {
  static const char *kDims[3] = {"batch", "head", "row"};
  if (strides[0] == 0 && strides[1] == 0 && strides[2] == 0 &&
      (extents[0] > 1 || extents[1] > 1 || extents[2] > 1)) {
    error = std::string(tensor) +
            "_strides are all 0: set them (fagen_fwd_problem_set_bshd_strides "
            "or _bhsd_strides fills every tensor's)";
    return false;
  }
  for (int i = 0; i < 3; ++i) {
    std::string which = std::string(tensor) + "_strides[" + str(i) + "] (" + kDims[i] + ")";
    std::string value = str(strides[i]);
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
    if (isOutput && strides[i] == 0 && extents[i] > 1 && !(varlen && i == 0)) {
      error = which + " is 0 but the " + kDims[i] + " extent is " + str(extents[i]) +
              ": outputs would overwrite each other";
      return false;
    }
  }
  return true;
}

bool validateShape(const fagen_fwd_problem &p, std::string &error) {
  struct Positive {
    const char *name;
    int32_t value;
  };
  for (Positive f : {Positive{"batch", p.batch}, {"heads_q", p.heads_q},
                     {"heads_kv", p.heads_kv}, {"seqlen_q", p.seqlen_q},
                     {"seqlen_k", p.seqlen_k}, {"head_dim_qk", p.head_dim_qk},
                     {"head_dim_v", p.head_dim_v}}) {
    if (f.value < 1) {
      error = std::string(f.name) + " (" + str(f.value) + ") must be >= 1";
      return false;
    }
  }
  if (p.heads_q % p.heads_kv != 0) {
    error = "heads_q (" + str(p.heads_q) + ") is not a multiple of heads_kv (" +
            str(p.heads_kv) + ")";
    return false;
  }
  // The grid is (tiles, heads, batch); CUDA limits grid y and z to 65535.
  if (p.heads_q > 65535 || p.batch > 65535) {
    error = std::string(p.heads_q > 65535 ? "heads_q (" + str(p.heads_q)
                                          : "batch (" + str(p.batch)) +
            ") exceeds 65535, the CUDA grid limit; split the call";
    return false;
  }
  if (raw(p.dtype) != FAGEN_DTYPE_FP16 && raw(p.dtype) != FAGEN_DTYPE_BF16) {
    error = "dtype (" + str(raw(p.dtype)) +
            ") is not FAGEN_DTYPE_FP16 (0) or FAGEN_DTYPE_BF16 (1)";
    return false;
  }
  if (!std::isfinite(p.softmax_scale)) {
    error = "softmax_scale (" + std::to_string(p.softmax_scale) +
            ") must be finite (0 means 1/sqrt(head_dim_qk))";
    return false;
  }
  return true;
}

bool validateMask(const fagen_fwd_problem &p, std::string &error) {
  if (p.causal != 0 && p.causal != 1) {
    error = "causal (" + str(p.causal) + ") must be 0 or 1";
    return false;
  }
  int32_t mask = raw(p.mask), align = raw(p.mask_align);
  if (mask < FAGEN_MASK_NONE || mask > FAGEN_MASK_WINDOW) {
    error = "mask (" + str(mask) + ") is not FAGEN_MASK_NONE (0), FAGEN_MASK_CAUSAL (1) or "
                                   "FAGEN_MASK_WINDOW (2)";
    return false;
  }
  if (mask == FAGEN_MASK_WINDOW && p.causal) {
    error = "causal (1) contradicts mask FAGEN_MASK_WINDOW: set causal = 0 (a causal window is "
            "window_right = 0)";
    return false;
  }
  if (align != FAGEN_MASK_ALIGN_BOTTOM_RIGHT && align != FAGEN_MASK_ALIGN_TOP_LEFT) {
    error = "mask_align (" + str(align) + ") is not FAGEN_MASK_ALIGN_BOTTOM_RIGHT (0) or "
                                          "FAGEN_MASK_ALIGN_TOP_LEFT (1)";
    return false;
  }
  for (auto [name, value] : {std::pair<const char *, int32_t>{"window_left", p.window_left},
                             {"window_right", p.window_right}}) {
    if (mask == FAGEN_MASK_WINDOW && value < -1) {
      error = std::string(name) + " (" + str(value) + ") must be >= 0, or -1 for unbounded";
      return false;
    }
    if (mask != FAGEN_MASK_WINDOW && value != 0 && value != -1) {
      error = std::string(name) + " (" + str(value) +
              ") is set but mask is not FAGEN_MASK_WINDOW: set mask = FAGEN_MASK_WINDOW for a "
              "sliding window";
      return false;
    }
  }
  return true;
}

bool validateScoreModAndDropout(const fagen_fwd_problem &p, std::string &error) {
  int32_t mod = raw(p.score_mod);
  if (mod < FAGEN_SCORE_MOD_NONE || mod > FAGEN_SCORE_MOD_ALIBI) {
    error = "score_mod (" + str(mod) + ") is not FAGEN_SCORE_MOD_NONE (0), "
                                       "FAGEN_SCORE_MOD_SOFTCAP (1) or FAGEN_SCORE_MOD_ALIBI (2)";
    return false;
  }
  if (mod == FAGEN_SCORE_MOD_SOFTCAP && !(std::isfinite(p.softcap) && p.softcap > 0)) {
    error = "softcap (" + std::to_string(p.softcap) +
            ") must be finite and > 0 with FAGEN_SCORE_MOD_SOFTCAP (Gemma 2 uses 50)";
    return false;
  }
  if (mod != FAGEN_SCORE_MOD_SOFTCAP && p.softcap != 0) {
    error = "softcap (" + std::to_string(p.softcap) +
            ") is set but score_mod is not FAGEN_SCORE_MOD_SOFTCAP: set score_mod = "
            "FAGEN_SCORE_MOD_SOFTCAP, or softcap = 0";
    return false;
  }
  if (!(p.dropout_p >= 0 && p.dropout_p < 1)) {
    error = "dropout_p (" + std::to_string(p.dropout_p) +
            ") must be in [0, 1): the probability of dropping an element of P";
    return false;
  }
  return true;
}

bool validateVarlenAndSparsity(const fagen_fwd_problem &p, std::string &error) {
  if (p.varlen != 0 && p.varlen != 1) {
    error = "varlen (" + str(p.varlen) + ") must be 0 or 1";
    return false;
  }
  if (!p.varlen && (p.total_q != 0 || p.total_k != 0)) {
    error = std::string(p.total_q ? "total_q (" + str(p.total_q) : "total_k (" + str(p.total_k)) +
            ") is set but varlen is 0: set varlen = 1 for packed sequences, else leave it 0";
    return false;
  }
  if (p.varlen) {
    for (auto [name, total, longest, longestName] :
         {std::tuple<const char *, int64_t, int32_t, const char *>{"total_q", p.total_q,
                                                                  p.seqlen_q, "seqlen_q"},
          {"total_k", p.total_k, p.seqlen_k, "seqlen_k"}}) {
      if (total < longest || total > INT32_MAX) {
        error = std::string(name) + " (" + str(total) + ") must be in [" + longestName + " (" +
                str(longest) + "), 2^31 - 1]: with varlen it is the number of packed rows " +
                "(cu_seqlens[batch]), and " + longestName + " the longest sequence";
        return false;
      }
    }
  }
  int32_t sparsity = raw(p.sparsity);
  if (sparsity < FAGEN_SPARSITY_NONE || sparsity > FAGEN_SPARSITY_STATIC) {
    error = "sparsity (" + str(sparsity) +
            ") is not FAGEN_SPARSITY_NONE (0), "
            "FAGEN_SPARSITY_RUNTIME (1) or FAGEN_SPARSITY_STATIC (2)";
    return false;
  }
  if (p.sparse_block < 0) {
    error = "sparse_block (" + str(p.sparse_block) + ") must be >= 0";
    return false;
  }
  if (sparsity == FAGEN_SPARSITY_NONE && (p.sparse_block != 0 || p.sparse_hash != 0)) {
    error = std::string(p.sparse_block ? "sparse_block (" + str(p.sparse_block)
                                       : "sparse_hash (" + hashText(p.sparse_hash)) +
            ") is set but sparsity is FAGEN_SPARSITY_NONE: set sparsity, or leave it 0";
    return false;
  }
  if (sparsity == FAGEN_SPARSITY_RUNTIME && p.sparse_block == 0) {
    error = "sparse_block (0) must be the block size of the runtime block mask (the spec's "
            "block_sparse.block, e.g. 128)";
    return false;
  }
  if (sparsity == FAGEN_SPARSITY_RUNTIME && p.sparse_hash != 0) {
    error = "sparse_hash (" + hashText(p.sparse_hash) +
            ") names a static layout but sparsity is FAGEN_SPARSITY_RUNTIME: leave it 0";
    return false;
  }
  if (p.reserved0 != 0) {
    error = "reserved0 (" + str(p.reserved0) + ") must be 0: zero-initialize the problem";
    return false;
  }
  return true;
}

/// The forward's problem: shapes, the variant, the strides of Q, K, V and O.
bool validateProblem(const fagen_fwd_problem &p, std::string &error) {
  if (!validateShape(p, error) || !validateMask(p, error) ||
      !validateScoreModAndDropout(p, error) || !validateVarlenAndSparsity(p, error))
    return false;
  int64_t rowsQ = p.varlen ? p.total_q : p.seqlen_q, rowsK = p.varlen ? p.total_k : p.seqlen_k;
  int64_t qExtents[3] = {p.batch, p.heads_q, rowsQ};
  int64_t kvExtents[3] = {p.batch, p.heads_kv, rowsK};
  return checkStrides("q", p.q_strides, qExtents, false, p.varlen, error) &&
         checkStrides("k", p.k_strides, kvExtents, false, p.varlen, error) &&
         checkStrides("v", p.v_strides, kvExtents, false, p.varlen, error) &&
         checkStrides("o", p.o_strides, qExtents, true, p.varlen, error);
}

/// The backward's gradients: dO like O, dQ like Q, dK like K, dV like V.
bool validateGradientStrides(const fagen_fwd_problem &p, std::string &error) {
  int64_t rowsQ = p.varlen ? p.total_q : p.seqlen_q, rowsK = p.varlen ? p.total_k : p.seqlen_k;
  int64_t qExtents[3] = {p.batch, p.heads_q, rowsQ};
  int64_t kvExtents[3] = {p.batch, p.heads_kv, rowsK};
  return checkStrides("do", p.do_strides, qExtents, false, p.varlen, error) &&
         checkStrides("dq", p.dq_strides, qExtents, true, p.varlen, error) &&
         checkStrides("dk", p.dk_strides, kvExtents, true, p.varlen, error) &&
         checkStrides("dv", p.dv_strides, kvExtents, true, p.varlen, error);
}

//===--- Kernel choice -----------------------------------------------------===//

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
  int major = 0, minor = 0, smemOptin = 0, sms = 0;
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

/// Among the kernels that serve the problem, the best one that runs on this device: a
/// nondeterministic backward over a deterministic one (faster, and the call did not ask for
/// bitwise repeatability, or only deterministic kernels serve it), then the best arch match,
/// then the narrowest tuned seqlen range.
fagen_status chooseKernel(const Bundle &bundle, const std::vector<int> &candidates,
                          const Device &d, int &chosen) {
  std::set<std::string> archs;
  std::tuple<int, int, int64_t> best;
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
    std::tuple<int, int, int64_t> rank{!k.deterministic, archRank(k.arch, d.major, d.minor),
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

/// The entry points of a kernel's cubin: a backward is three (docs/bundle-format.md).
enum class Part { kMain = 0, kPre = 1, kPost = 2 };

const char *partSuffix(Part part) {
  return part == Part::kPre ? "_pre" : part == Part::kPost ? "_post" : "";
}

/// One entry point of the kernel in the current context, loading its module on first use.
fagen_status loadFunction(const DriverApi &api, fagen_bundle &b, const Device &d, int index,
                          Part part, CUfunction &function) {
  std::lock_guard<std::mutex> lock(b.mutex);
  if (auto it = b.functions.find({d.context, index, int(part)}); it != b.functions.end()) {
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
  b.functions[{d.context, index, int(part)}] = function;
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
    fp.window_left = p.window_left;
    fp.window_right = p.window_right;
  }
  if (raw(p.score_mod) == FAGEN_SCORE_MOD_SOFTCAP)
    fp.softcap = p.softcap;
  if (p.dropout_p > 0) { // quantized to 1/256 by the keep rule (philox.h)
    fp.dropout_p = p.dropout_p;
    fp.dropout_threshold = fagen::dropout_threshold(p.dropout_p);
    fp.dropout_rescale = fagen::dropout_rescale(fp.dropout_threshold);
  }
}

/// The run-time arguments kernel k reads (FAGEN_RUN_ARG_*).
uint32_t runArgsOf(const KernelRecord &k) {
  return (k.scoreMod == "alibi" ? FAGEN_RUN_ARG_ALIBI_SLOPES : 0u) |
         (k.sparsity == "runtime" ? FAGEN_RUN_ARG_BLOCK_MASK : 0u) |
         (k.varlen ? FAGEN_RUN_ARG_CU_SEQLENS : 0u) | (k.dropout ? FAGEN_RUN_ARG_DROPOUT_SEED : 0u);
}

fagen_status checkPlanArguments(const char *function, const fagen_bundle *bundle,
                                const fagen_fwd_problem *problem, fagen_plan *plan,
                                fagen_pass pass, int32_t deterministic) {
  if (bundle == nullptr || problem == nullptr || plan == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": " +
                    (bundle == nullptr ? "bundle" : problem == nullptr ? "problem" : "plan") +
                    " is null");
  std::memset(plan, 0, sizeof *plan);
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
fagen_status findCandidates(const Bundle &b, const fagen_fwd_problem &p, const VariantKey &call,
                            std::vector<int> &candidates, std::string &shapeReason) {
  const KernelRecord *otherParams = nullptr, *outOfRange = nullptr;
  std::set<std::string> staticLayouts;
  for (size_t i = 0; i < b.kernels.size(); ++i) {
    const KernelRecord &k = b.kernels[i];
    if (!sameVariant(k, call))
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
    if (k.sparsity == "static")
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
                               const VariantKey &call, int kernelIndex) {
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
  if (!sameVariant(k, call))
    return fail(FAGEN_ERROR_NOT_SUPPORTED,
                "kernel " + k.name + " is a " + k.pass + " kernel for " + keyOf(k).text() +
                    "; the call is a " + (call.pass == "bwd" ? "backward" : "forward") +
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
  // batch index is folded into the packed row.
  const int64_t dqRowsPerHead = fagen_bwd_dq_rows(p.varlen, p.seqlen_q, p.total_q, k.blockM);
  bp.dq_accum_batch_stride = p.varlen ? 0 : int64_t(p.heads_q) * dqRowsPerHead * p.head_dim_qk;
  bp.dq_accum_head_stride = dqRowsPerHead * p.head_dim_qk;
  bp.d_batch_stride = p.varlen ? 0 : int64_t(p.heads_q) * p.seqlen_q;
  bp.d_head_stride = rowsPerHead;
  bp.semaphore_batch_stride = int64_t(p.heads_q) * mBlocks;
  bp.semaphore_head_stride = mBlocks;
  bp.m_blocks = mBlocks;
  std::memcpy(plan.params, &bp, sizeof bp);

  const int64_t dqRows = p.varlen ? p.total_q : int64_t(p.batch) * dqRowsPerHead;
  const int32_t dqSlots =
      fagen_bwd_dq_slots(k.deterministic ? 1 : 0, k.mask == "none" && k.sparsity == "none");
  fagen_bwd_workspace w = fagen_bwd_workspace_layout(rowsQ, dqRows, p.heads_q, p.head_dim_qk,
                                                     p.batch, mBlocks, k.deterministic ? 1 : 0,
                                                     dqSlots);
  plan.workspace_bytes = size_t(w.total_bytes);
  plan.workspace_offsets[0] = w.dq_accum_offset;
  plan.workspace_offsets[1] = w.d_offset;
  plan.workspace_offsets[2] = w.semaphore_offset;
  setGrid(plan.grid, ceilDiv(p.seqlen_k, k.blockN), p.heads_kv, p.batch);
  setGrid(plan.pre_post_grid, mBlocks, p.heads_q, p.batch);
  setGrid(plan.pre_post_block, k.prePostThreads, 1, 1);
}

/// Picks the best of `candidates` (kernels that serve the problem) for the current device,
/// loads it and fills the plan.
fagen_status planAmong(const fagen_bundle &bundle, const fagen_fwd_problem &problem,
                       fagen_pass pass, const std::vector<int> &candidates, fagen_plan &plan) {
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
  CUfunction functions[3] = {};
  for (Part part : {Part::kMain, Part::kPre, Part::kPost}) {
    if (part != Part::kMain && pass != FAGEN_PASS_BACKWARD)
      break;
    if (fagen_status s = loadFunction(*api, mutableBundle, device, chosen, part,
                                      functions[int(part)]);
        s != FAGEN_OK)
      return s;
  }

  const KernelRecord &k = bundle.bundle.kernels[chosen];
  if (takesTmaMaps(k) && api->cuTensorMapEncodeTiled == nullptr)
    return fail(FAGEN_ERROR_NOT_SUPPORTED,
                "kernel " + k.name + " loads through TMA, and the CUDA driver (" + api->path +
                    ") has no cuTensorMapEncodeTiled: install a driver for CUDA 12.0 or newer, "
                    "or build the bundle for sm_90 instead of sm_90a");
  if (takesTmaMaps(k) && pass == FAGEN_PASS_FORWARD)
    if (std::string why = wsSizeProblem(k, problem, device.sms); !why.empty())
      return fail(FAGEN_ERROR_NOT_SUPPORTED, why);
  plan.bundle = &bundle;
  plan.kernel_index = chosen;
  plan.pass = pass;
  setGrid(plan.block, k.threads, 1, 1);
  plan.smem_bytes = k.smemBytes;
  plan.run_args = runArgsOf(k);
  plan.function = functions[0];
  plan.pre_function = functions[1];
  plan.post_function = functions[2];
  if (pass == FAGEN_PASS_BACKWARD) {
    fillBackwardPlan(problem, k, plan);
    return FAGEN_OK;
  }
  const int64_t tiles = ceilDiv(problem.seqlen_q, k.blockM) * problem.heads_q * problem.batch;
  // sm90ws: a 1-D grid over the work tiles (templates/sm90/fwd_ws_kernel.cuh), the size of a
  // call with a workspace (runForward launches one CTA per tile when a call has none).
  if (takesTmaMaps(k))
    setGrid(plan.grid, wsGridSize(k, tiles, device.sms, true), 1, 1);
  else
    setGrid(plan.grid, ceilDiv(problem.seqlen_q, k.blockM), problem.heads_q, problem.batch);
  fagen_fwd_params params;
  fillForwardParams(problem, params);
  if (k.tileCounter)
    params.work_tiles = int32_t(tiles); // < 2^30 (wsSizeProblem)
  std::memcpy(plan.params, &params, sizeof params);
  const PlanVarlenRows rows = {problem.varlen ? problem.total_q : 0,
                               problem.varlen ? problem.total_k : 0};
  std::memcpy(plan.params + kPlanVarlenRowsOffset, &rows, sizeof rows);
  plan.workspace_bytes = k.tileCounter ? kFwdWorkspaceBytes : 0;
  return FAGEN_OK;
}

/// Plans the best kernel for the call, or (pinned) kernel `kernelIndex`.
fagen_status planCall(const char *function, const fagen_bundle *bundle,
                      const fagen_fwd_problem *problem, fagen_pass pass, int32_t deterministic,
                      bool pinned, int kernelIndex, fagen_plan *plan) {
  if (fagen_status s =
          checkPlanArguments(function, bundle, problem, plan, pass, deterministic);
      s != FAGEN_OK)
    return s;
  VariantKey call = callKey(*problem, pass, deterministic != 0);
  std::vector<int> candidates;
  if (pinned) {
    if (fagen_status s = checkPinnedKernel(bundle->bundle, function, *problem, call, kernelIndex);
        s != FAGEN_OK)
      return s;
    candidates.push_back(kernelIndex);
    return planAmong(*bundle, *problem, pass, candidates, *plan);
  }
  std::string leftOut;
  if (fagen_status s = findCandidates(bundle->bundle, *problem, call, candidates, leftOut);
      s != FAGEN_OK)
    return s;
  // A kernel that cannot take the shape matters most when the others do not run here.
  fagen_status s = planAmong(*bundle, *problem, pass, candidates, *plan);
  if (s == FAGEN_ERROR_NO_KERNEL_FOR_GPU && !leftOut.empty())
    return fail(FAGEN_ERROR_NOT_SUPPORTED, leftOut + "; and " + lastError);
  return s;
}

//===--- Run ---------------------------------------------------------------===//

struct Pointer {
  const char *name;
  const void *ptr;
  uintptr_t align;
};

/// Null and alignment checks; messages start with `prefix` ("fagen_run_forward: ").
/// Null and alignment checks of a run call's pointers; the message ("FUNCTION: PREFIXname is
/// null") is built only on failure, so the run path does no string work.
fagen_status checkPointers(const char *function, const char *prefix,
                           std::initializer_list<Pointer> pointers) {
  for (Pointer p : pointers) {
    if (p.ptr == nullptr)
      return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                  std::string(function) + ": " + prefix + p.name + " is null");
    if (reinterpret_cast<uintptr_t>(p.ptr) % p.align != 0)
      return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) + ": " + prefix + p.name +
                                                    " is not " + str(int64_t(p.align)) +
                                                    "-byte aligned");
  }
  return FAGEN_OK;
}

fagen_status checkPlan(const char *function, const fagen_plan *plan, fagen_pass pass) {
  if (plan == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) + ": plan is null");
  const char *planner = pass == FAGEN_PASS_BACKWARD ? "fagen_plan_backward" : "fagen_plan_forward";
  if (plan->bundle == nullptr || plan->function == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) +
                                                  ": the plan was not filled by a successful " +
                                                  planner);
  if (plan->pass != pass)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": the plan is a " +
                    (pass == FAGEN_PASS_BACKWARD ? "forward" : "backward") +
                    " plan; make it with " + planner);
  if (pass == FAGEN_PASS_BACKWARD &&
      (plan->pre_function == nullptr || plan->post_function == nullptr))
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) +
                                                  ": the plan was not filled by a successful " +
                                                  planner);
  return FAGEN_OK;
}

/// Checks the run-time arguments the plan's variant reads and stores them in `fp`.
fagen_status applyRunArgs(const char *function, const fagen_plan &plan,
                          const fagen_run_args *args, bool argsAccepted, fagen_fwd_params &fp) {
  const uint32_t needed = plan.run_args;
  if (needed == 0)
    return FAGEN_OK;
  // Error texts only: built when a check fails.
  auto names = [needed] {
    std::string out;
    for (auto [bit, name] :
         {std::pair<uint32_t, const char *>{FAGEN_RUN_ARG_ALIBI_SLOPES, "alibi_slopes"},
          {FAGEN_RUN_ARG_BLOCK_MASK, "block_mask"},
          {FAGEN_RUN_ARG_CU_SEQLENS, "cu_seqlens_q/_k"},
          {FAGEN_RUN_ARG_DROPOUT_SEED, "dropout_seed/_offset"}})
      if (needed & bit)
        out += (out.empty() ? "" : ", ") + std::string(name);
    return out;
  };
  auto fn = [function] { return std::string(function) + ": args->"; };
  if (!argsAccepted)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": the plan's variant reads run-time arguments (" +
                    names() + "): call fagen_run_forward_with_args with a fagen_run_args");
  if (args == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT, std::string(function) +
                                                  ": args is null but the plan's variant reads " +
                                                  names());
  if (needed & FAGEN_RUN_ARG_ALIBI_SLOPES) {
    if (fagen_status s =
            checkPointers(function, "args->", {{"alibi_slopes", args->alibi_slopes, 4}});
        s != FAGEN_OK)
      return s;
    if (args->alibi_batch_stride < 0)
      return fail(FAGEN_ERROR_INVALID_ARGUMENT, fn() + "alibi_batch_stride (" +
                                                    str(args->alibi_batch_stride) +
                                                    ") must be >= 0 (0: one slope per head)");
    fp.alibi_slopes = args->alibi_slopes;
    fp.alibi_batch_stride = args->alibi_batch_stride;
  }
  if (needed & FAGEN_RUN_ARG_BLOCK_MASK) {
    if (fagen_status s = checkPointers(function, "args->", {{"block_mask", args->block_mask, 1}});
        s != FAGEN_OK)
      return s;
    for (auto [name, v] : {std::pair<const char *, int64_t>{"block_mask_batch_stride",
                                                            args->block_mask_batch_stride},
                           {"block_mask_head_stride", args->block_mask_head_stride},
                           {"block_mask_row_stride", args->block_mask_row_stride}})
      if (v < 0)
        return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                    fn() + name + " (" + str(v) + ") must be >= 0 (0 broadcasts)");
    fp.block_mask = args->block_mask;
    fp.block_mask_batch_stride = args->block_mask_batch_stride;
    fp.block_mask_head_stride = args->block_mask_head_stride;
    fp.block_mask_row_stride = args->block_mask_row_stride;
  }
  if (needed & FAGEN_RUN_ARG_CU_SEQLENS) {
    if (fagen_status s = checkPointers(function, "args->",
                                       {{"cu_seqlens_q", args->cu_seqlens_q, 4},
                                        {"cu_seqlens_k", args->cu_seqlens_k, 4}});
        s != FAGEN_OK)
      return s;
    fp.cu_seqlens_q = args->cu_seqlens_q;
    fp.cu_seqlens_k = args->cu_seqlens_k;
  }
  if (needed & FAGEN_RUN_ARG_DROPOUT_SEED) {
    fp.dropout_seed = args->dropout_seed;
    fp.dropout_offset = args->dropout_offset;
  }
  return FAGEN_OK;
}

/// Encodes the tensor maps of a TMA kernel's call from its parameter block.
fagen_status encodeTmaMaps(const char *function, const DriverApi &api, const fagen_plan &plan,
                           const KernelRecord &k, const fagen_fwd_params &params,
                           fagen_fwd_tma_maps &maps) {
  if (api.cuTensorMapEncodeTiled == nullptr)
    return fail(FAGEN_ERROR_NOT_SUPPORTED,
                std::string(function) + ": kernel " + k.name +
                    " loads through TMA, and the CUDA driver (" + api.path +
                    ") has no cuTensorMapEncodeTiled: install a driver for CUDA 12.0 or newer, "
                    "or build the bundle for sm_90 instead of sm_90a");
  std::string what;
  PlanVarlenRows rows;
  std::memcpy(&rows, plan.params + kPlanVarlenRowsOffset, sizeof rows);
  if (int r = encodeFwdTmaMaps(api.cuTensorMapEncodeTiled, params, k.headDimQK, k.headDimV,
                               k.blockM, k.blockN, maps, what, rows.total_q, rows.total_k,
                               k.tmaStoreO))
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": " +
                    cudaErrorText(api, r, "cuTensorMapEncodeTiled") + " for tensor " + what +
                    " of kernel " + k.name +
                    ": TMA needs 16-byte aligned pointers and strides that are multiples of 8 "
                    "elements, below 2^39 elements");
  return FAGEN_OK;
}

const std::string &kernelName(const fagen_plan &plan) {
  return plan.bundle->bundle.kernels[plan.kernel_index].name;
}

fagen_status launch(const DriverApi &api, const fagen_plan &plan, void *function,
                    const int32_t grid[3], const int32_t block[3], int32_t smem, void *params,
                    void *stream, const char *suffix, void *tmaMaps = nullptr) {
  void *args[] = {params, tmaMaps};
  CUresult r = api.cuLaunchKernel(static_cast<CUfunction>(function), unsigned(grid[0]),
                                  unsigned(grid[1]), unsigned(grid[2]), unsigned(block[0]),
                                  unsigned(block[1]), unsigned(block[2]), unsigned(smem),
                                  static_cast<CUstream>(stream), args, nullptr);
  if (r != CUDA_SUCCESS)
    return fail(FAGEN_ERROR_CUDA, cudaErrorText(api, r, "cuLaunchKernel") + " for kernel " +
                                      kernelName(plan) + suffix);
  return FAGEN_OK;
}

fagen_status runForward(const char *function, const fagen_plan *plan, const void *q,
                        const void *k, const void *v, void *o, float *lse, void *workspace,
                        const fagen_run_args *args, bool argsAccepted, void *stream) {
  if (fagen_status s = checkPlan(function, plan, FAGEN_PASS_FORWARD); s != FAGEN_OK)
    return s;
  if (fagen_status s =
          checkPointers(function, "",
                        {{"q", q, 16}, {"k", k, 16}, {"v", v, 16}, {"o", o, 16}, {"lse", lse, 4}});
      s != FAGEN_OK)
    return s;
  fagen_fwd_params params;
  std::memcpy(&params, plan->params, sizeof params);
  if (fagen_status s = applyRunArgs(function, *plan, args, argsAccepted, params); s != FAGEN_OK)
    return s;
  std::string error;
  const DriverApi *api = getDriver(error);
  if (api == nullptr)
    return fail(FAGEN_ERROR_NO_DRIVER, error);
  params.q = q;
  params.k = k;
  params.v = v;
  params.o = o;
  params.lse = lse;
  const KernelRecord &kernel = plan->bundle->bundle.kernels[plan->kernel_index];
  if (!takesTmaMaps(kernel))
    return launch(*api, *plan, plan->function, plan->grid, plan->block, plan->smem_bytes,
                  &params, stream, "");
  fagen_fwd_tma_maps maps;
  if (fagen_status s = encodeTmaMaps(function, *api, *plan, kernel, params, maps); s != FAGEN_OK)
    return s;
  int32_t grid[3] = {plan->grid[0], plan->grid[1], plan->grid[2]};
  if (kernel.tileCounter && workspace != nullptr) {
    // The tiles come from the workspace's counter, which starts each launch at 0.
    if (fagen_status s = checkPointers(function, "", {{"workspace", workspace, 4}}); s != FAGEN_OK)
      return s;
    params.tile_counter = static_cast<int32_t *>(workspace);
    if (CUresult r = api->cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(workspace), 0, 1,
                                           static_cast<CUstream>(stream));
        r != CUDA_SUCCESS)
      return fail(FAGEN_ERROR_CUDA, std::string(function) + ": " +
                                        cudaErrorText(*api, r, "cuMemsetD32Async") +
                                        " zeroing the tile counter in the workspace of kernel " +
                                        kernel.name);
  } else if (kernel.tileCounter && !kernel.persistent) {
    // No workspace: one CTA per work tile (the static deal of a grid that size).
    grid[0] = params.work_tiles;
  }
  return launch(*api, *plan, plan->function, grid, plan->block, plan->smem_bytes, &params,
                stream, "", &maps);
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

int fagen_abi_version(void) { return FAGEN_RUNTIME_ABI_VERSION; }

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

fagen_status fagen_run_forward(const fagen_plan *plan, const void *q, const void *k,
                               const void *v, void *o, float *lse, void *stream) {
  return runForward("fagen_run_forward", plan, q, k, v, o, lse, nullptr, nullptr, false, stream);
}

fagen_status fagen_run_forward_with_args(const fagen_plan *plan, const void *q, const void *k,
                                         const void *v, void *o, float *lse,
                                         const fagen_run_args *args, void *stream) {
  return runForward("fagen_run_forward_with_args", plan, q, k, v, o, lse, nullptr, args, true,
                    stream);
}

fagen_status fagen_run_forward_with_workspace(const fagen_plan *plan, const void *q,
                                              const void *k, const void *v, void *o, float *lse,
                                              void *workspace, const fagen_run_args *args,
                                              void *stream) {
  return runForward("fagen_run_forward_with_workspace", plan, q, k, v, o, lse, workspace, args,
                    true, stream);
}

fagen_status fagen_run_backward(const fagen_plan *plan, const void *q, const void *k,
                                const void *v, const void *o, const float *lse,
                                const void *dout, void *dq, void *dk, void *dv, void *workspace,
                                const fagen_run_args *args, void *stream) {
  const char *function = "fagen_run_backward";
  if (fagen_status s = checkPlan(function, plan, FAGEN_PASS_BACKWARD); s != FAGEN_OK)
    return s;
  if (fagen_status s = checkPointers(function, "",
                                     {{"q", q, 16},
                                      {"k", k, 16},
                                      {"v", v, 16},
                                      {"o", o, 16},
                                      {"lse", lse, 4},
                                      {"dout", dout, 16},
                                      {"dq", dq, 16},
                                      {"dk", dk, 16},
                                      {"dv", dv, 16}});
      s != FAGEN_OK)
    return s;
  if (plan->workspace_bytes > 0) {
    if (fagen_status s =
            checkPointers(function, "", {{"workspace", workspace, 256}});
        s != FAGEN_OK)
      return fail(s, fagen_last_error() + std::string(" (it must hold plan->workspace_bytes = ") +
                         str(int64_t(plan->workspace_bytes)) + " bytes of device memory)");
  }
  fagen_bwd_params params;
  std::memcpy(&params, plan->params, sizeof params);
  if (fagen_status s = applyRunArgs(function, *plan, args, true, params.fwd); s != FAGEN_OK)
    return s;
  std::string error;
  const DriverApi *api = getDriver(error);
  if (api == nullptr)
    return fail(FAGEN_ERROR_NO_DRIVER, error);
  params.fwd.q = q;
  params.fwd.k = k;
  params.fwd.v = v;
  params.fwd.o = const_cast<void *>(o);       // read by the backward
  params.fwd.lse = const_cast<float *>(lse);  // read by the backward
  params.dout = dout;
  params.dq = dq;
  params.dk = dk;
  params.dv = dv;
  auto *base = static_cast<uint8_t *>(workspace);
  params.dq_accum = reinterpret_cast<float *>(base + plan->workspace_offsets[0]);
  params.d = reinterpret_cast<float *>(base + plan->workspace_offsets[1]);
  // The semaphores exist only for a deterministic kernel (fagen_bwd_workspace_layout).
  const bool deterministic = plan->workspace_bytes > plan->workspace_offsets[2];
  params.dq_semaphore =
      deterministic ? reinterpret_cast<int32_t *>(base + plan->workspace_offsets[2]) : nullptr;
  if (fagen_status s = launch(*api, *plan, plan->pre_function, plan->pre_post_grid,
                              plan->pre_post_block, 0, &params, stream, "_pre");
      s != FAGEN_OK)
    return s;
  if (fagen_status s = launch(*api, *plan, plan->function, plan->grid, plan->block,
                              plan->smem_bytes, &params, stream, "");
      s != FAGEN_OK)
    return s;
  return launch(*api, *plan, plan->post_function, plan->pre_post_grid, plan->pre_post_block, 0,
                &params, stream, "_post");
}

} // extern "C"
