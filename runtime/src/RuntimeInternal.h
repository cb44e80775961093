//===- RuntimeInternal.h - the runtime's shared internals (private) ----------===//
//
// plan = validate the problem (host only), find the kernels built for the call's variant, pick
// the best for the device (compute capability, shared-memory limit), load its module once per
// context, fill the parameter block. run = copy the block, fill the pointers, cuLaunchKernel
// (three launches for the backward: _pre, main, _post). A bundle is immutable after load
// except for its module cache, which a mutex guards.
//
// The C ABI's pieces: Status.cpp (last error, status names), Validate.cpp (problem checks),
// Select.cpp (variants, kernel choice, plan), Launch.cpp (run), Runtime.cpp (bundles, the plan
// entry points). Not installed; nothing outside runtime/src includes it.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_RUNTIME_RUNTIMEINTERNAL_H
#define FAGEN_RUNTIME_RUNTIMEINTERNAL_H

#include "fagen/fagen.h"

#include "compiler/bundle/Bundle.h"
#include "runtime/src/Driver.h"
#include "runtime/src/TmaMaps.h"
#include "runtime/src/VariantAbi.h"
#include "templates/abi/bwd_params.h"
#include "templates/abi/decode_params.h"
#include "templates/common/philox.h"
#include "templates/common/ws_bwd_layout.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

static_assert(sizeof(fagen_fwd_params) <= sizeof(fagen_plan{}.params),
              "fagen_plan::params must hold the forward parameter block");
static_assert(sizeof(fagen_bwd_params) <= sizeof(fagen_plan{}.params),
              "fagen_plan::params must hold the backward parameter block");
/// A decode plan's parameter block: fagen_decode_params, then its combine's fagen_merge_params
/// at this offset.
constexpr size_t kDecodeMergeParamsOffset = (sizeof(fagen_decode_params) + 15) / 16 * 16;
static_assert(kDecodeMergeParamsOffset + sizeof(fagen_merge_params) <=
                  sizeof(fagen_plan{}.params),
              "fagen_plan::params must hold the decode and combine parameter blocks");

static_assert(sizeof(fagen_dtype) == 4 && sizeof(fagen_mask) == 4 &&
                  sizeof(fagen_mask_align) == 4 && sizeof(fagen_score_mod) == 4 &&
                  sizeof(fagen_sparsity) == 4 && sizeof(fagen_pass) == 4,
              "the C ABI's enums are 32-bit");

struct fagen_bundle {
  fagen::Bundle bundle;
  std::vector<std::string> descriptions; ///< fagen_bundle_kernel_name, one per kernel
  uint64_t id = 0;                       ///< in the registry of live bundles (plans carry it)
  std::mutex mutex;                      ///< guards the two caches
  /// (context, its cuCtxGetId or 0, cubin): a context made where a destroyed one was has
  /// another id, so its modules are loaded anew.
  std::map<std::tuple<fagen::CUcontext, uint64_t, uint32_t>, fagen::CUmodule> modules;
  /// (context, its id, kernel, part)
  std::map<std::tuple<fagen::CUcontext, uint64_t, int, int>, fagen::CUfunction> functions;
};

namespace fagen::rt {

// Status.cpp
extern thread_local std::string lastError;
/// Sets the last error to `message` and returns `status`.
fagen_status fail(fagen_status status, std::string message);
std::string str(int64_t v);

// Select.cpp
/// The device of the current context, as a plan needs it.
struct Device {
  CUcontext context = nullptr;
  uint64_t contextId = 0; ///< cuCtxGetId, 0 without it
  CUdevice device = 0;
  int major = 0, minor = 0, smemOptin = 0, sms = 0;
  std::string name;
  std::string arch() const { return "sm_" + std::to_string(major * 10 + minor); }
};

/// The entry points of a kernel's cubin (docs/bundle-format.md): a backward's NAME, NAME_pre and
/// NAME_post; a decode kernel's NAME, NAME_combine and NAME_merge, and a paged one's
/// NAME_append.
enum class Part { kMain = 0, kPre = 1, kPost = 2, kCombine = 3, kMerge = 4, kAppend = 5 };

/// Makes a context current if none is (device 0's primary) and describes its device.
fagen_status currentDevice(const DriverApi &api, Device &d);
/// The best of `candidates` (kernel indices) that runs on `d`, or why none does.
fagen_status chooseKernel(const Bundle &bundle, const std::vector<int> &candidates,
                          const Device &d, int &chosen);
/// Entry point `part` of kernel `index` in `d`'s context, its module loaded on first use.
fagen_status loadFunction(const DriverApi &api, fagen_bundle &b, const Device &d, int index,
                          Part part, CUfunction &function);
/// The forward parameter block of a validated problem, pointers left null (run fills them).
void fillForwardParams(const fagen_fwd_problem &p, fagen_fwd_params &fp);
void setGrid(int32_t out[3], int64_t x, int32_t y, int32_t z);
int64_t ceilDiv(int64_t a, int64_t b);

/// The value a C caller stored in an enum field: any int may arrive, which must not be loaded
/// as the enum (undefined behaviour for values outside it).
template <typename Enum> int32_t raw(const Enum &e) {
  static_assert(sizeof(Enum) == sizeof(int32_t), "a 32-bit enum");
  int32_t v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

std::string hashText(uint32_t hash);
/// The registry of live bundles: a plan names its bundle by pointer and id, and a run checks
/// both here, so that a plan of a destroyed bundle is refused without reading freed memory.
uint64_t registerBundle(const fagen_bundle *b);
void unregisterBundle(const fagen_bundle *b);
bool bundleIsLive(const fagen_bundle *b, uint64_t id);
/// Checks struct_size and abi_tag of a caller's struct (`what`: "problem", "args").
fagen_status checkAbiHeader(const char *function, const char *what, const char *type,
                            uint32_t size, uint32_t tag, size_t expectedSize,
                            const char *initMacro);
/// The preamble of a fagen_plan_* call: no null argument, then the caller's problem struct of
/// this fagen.h's size and tag (before anything else is read, and before *plan is written: a
/// caller built against another fagen.h has structs of other sizes), then *plan zeroed.
template <class Problem>
fagen_status checkPlanCall(const char *function, const fagen_bundle *bundle,
                           const Problem *problem, fagen_plan *plan, const char *type,
                           const char *initMacro) {
  if (bundle == nullptr || problem == nullptr || plan == nullptr)
    return fail(FAGEN_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": " +
                    (bundle == nullptr ? "bundle" : problem == nullptr ? "problem" : "plan") +
                    " is null");
  if (fagen_status s = checkAbiHeader(function, "problem", type, problem->struct_size,
                                      problem->abi_tag, sizeof(Problem), initMacro);
      s != FAGEN_OK)
    return s;
  std::memset(plan, 0, sizeof *plan);
  return FAGEN_OK;
}
/// A run's workspace_bytes against its plan's: FAGEN_OK, or the error naming both and `fix`.
fagen_status checkWorkspaceBytes(const char *function, size_t given, const fagen_plan &plan,
                                 const char *fix);
/// The current context's id (cuCtxGetId; 0 where the driver lacks it).
uint64_t contextId(const DriverApi &api, CUcontext ctx);
bool takesTmaMaps(const KernelRecord &k);
/// CTAs of a sm90ws launch over `tiles` work tiles (`counter`: the call has a workspace).
int64_t wsGridSize(const KernelRecord &k, int64_t tiles, int sms, bool counter);
/// A loaded bundle around `parsed` (the kernels' descriptions made once).
fagen_status adopt(Bundle parsed, fagen_bundle **out);
/// Plans the best kernel for the call, or (pinned) kernel `kernelIndex`; `paged`: the call's
/// paged KV cache (a paged decode kernel serves it, or a paged forward a varlen call), null
/// for contiguous K and V.
fagen_status planCall(const char *function, const fagen_bundle *bundle,
                      const fagen_fwd_problem *problem, fagen_pass pass, int32_t deterministic,
                      bool pinned, int kernelIndex, fagen_plan *plan,
                      const fagen_paged_kv *paged = nullptr);

// Decode.cpp
/// A paged forward plan (chunked prefill: varlen queries over a paged cache, a sm80 or sm90ws
/// forward kernel of a page size): fagen_decode_params of one split, the status record's
/// workspace; a sm90ws kernel's 1-D grid over its work tiles for `sms` SMs.
void fillPagedForwardPlan(const fagen_fwd_problem &p, const fagen_paged_kv &paged, int sms,
                          const KernelRecord &k, fagen_plan &plan);
/// A decode kernel's plan of a validated forward call: the split count (common/decode_split.h)
/// for `sms` SMs, the grids of NAME and NAME_combine, both parameter blocks, the workspace
/// (`paged`: the paged KV cache of a paged kernel's call, else null).
void fillDecodePlan(const fagen_fwd_problem &p, const fagen_paged_kv *paged,
                    const KernelRecord &k, int sms, fagen_plan &plan);
/// Sets a decode plan's split count (>= 1): NAME's grid, the combine's states, the workspace.
void setDecodeSplits(fagen_plan &plan, const KernelRecord &k, int splits);
/// The paged KV cache of a call (host only): its struct, page size, table and lengths against
/// the problem, or why not.
fagen_status checkPagedKv(const char *function, const fagen_fwd_problem &p,
                          const fagen_paged_kv *paged);
/// A paged run's device arrays, and the new keys and values of an append run
/// (fagen_run_forward_paged_append; layout null otherwise).
struct PagedKvArrays {
  const int32_t *blockTable;
  const int32_t *sequsedK;
  const fagen_kv_append *appendLayout = nullptr;
  const void *kNew = nullptr, *vNew = nullptr;
};
/// Launches a decode plan: NAME over the planned splits and NAME_combine where the call has
/// the plan's workspace, else NAME over one split. `params`: the forward block, pointers filled;
/// `paged`: a paged kernel's arrays (its workspace then holds the status records too).
fagen_status runDecode(const char *function, const DriverApi &api, const fagen_plan &plan,
                       const fagen_fwd_params &params, const PagedKvArrays *paged,
                       void *workspace, size_t workspaceBytes, void *stream);

// Launch.cpp
struct Pointer {
  const char *name;
  const void *ptr;
  uintptr_t align;
};
/// Null and alignment checks of a run call's pointers ("FUNCTION: PREFIXname is null").
fagen_status checkPointers(const char *function, const char *prefix,
                           std::initializer_list<Pointer> pointers);
/// That `plan` was filled by the planner of `pass` (and this ABI).
fagen_status checkPlan(const char *function, const fagen_plan *plan, fagen_pass pass);
fagen_status checkBundleLive(const char *function, const fagen_plan &plan);
fagen_status checkContext(const char *function, const DriverApi &api, const fagen_plan &plan);
fagen_status checkRunTarget(const char *function, const fagen_plan &plan, const DriverApi *&api);
/// Encodes the tensor maps of a TMA kernel's forward call; a paged kernel's over its caches'
/// `numPages` pages (abi/tma_params.h).
fagen_status encodeTmaMaps(const char *function, const DriverApi &api, const fagen_plan &plan,
                           const KernelRecord &k, const fagen_fwd_params &params,
                           fagen_fwd_tma_maps &maps, int64_t numPages = 0);
/// FAGEN_VALIDATE=1: runs copy their index arrays (cu_seqlens, a paged call's block table and
/// lengths) to the host and check them before the launch (synchronizing the stream).
bool validateMode();
/// A forward run (fagen_run_forward*, fagen_run_forward_paged): `paged` for a paged plan only.
fagen_status runForward(const char *function, const fagen_plan *plan, const void *q,
                        const void *k, const void *v, void *o, float *lse, void *workspace,
                        size_t workspaceBytes, const fagen_run_args *args, bool argsAccepted,
                        void *stream, const PagedKvArrays *paged = nullptr);
/// How a kernel is launched after the previous work in its stream: after it ends, or (sm_90+
/// kernels that wait for their grid dependencies, where the driver has cuLaunchKernelEx) as
/// its programmatic dependent, which may start while it runs.
enum class LaunchOrder { kAfter, kProgrammaticDependent };
fagen_status launch(const DriverApi &api, const fagen_plan &plan, void *function,
                    const int32_t grid[3], const int32_t block[3], int32_t smem, void *params,
                    void *stream, const char *suffix, void *tmaMaps = nullptr,
                    LaunchOrder order = LaunchOrder::kAfter);

// Validate.cpp
/// The longest seqlen_q / seqlen_k a call may have: the kernels' masks add a row, the diagonal
/// offset, a window bound (capped by capWindowBound) and a tile in 32-bit ints, which stays below
/// 2^31 for sequences up to this (2^30 - 1024, about 1.07e9 tokens).
constexpr int32_t kMaxSeqlen = (1 << 30) - 1024;
/// A window bound beyond max(seqlen_q, seqlen_k) + kWindowCapSlack excludes no key (nor does
/// any tile's corner, tiles being at most kWindowCapSlack rows or keys), exactly as an
/// unbounded one; capWindowBound caps it there so that no sum with it overflows.
constexpr int32_t kWindowCapSlack = 256;
int32_t capWindowBound(int32_t bound, int32_t seqlenQ, int32_t seqlenK);
/// `extents`: batch, heads, rows, head dim. Outputs: no stride 0 over an extent > 1, and no two
/// elements on one address.
bool checkStrides(const char *tensor, const int64_t strides[3], const int64_t extents[4],
                  bool isOutput, bool varlen, std::string &error);
/// That no two elements of an output (strides of `extents`: batch, heads, rows, head dim) share
/// an address.
bool checkNoOverlap(const char *tensor, const int64_t strides[3], const int64_t extents[4],
                    bool varlen, std::string &error);
/// The forward's problem: shapes, the variant, the strides of Q, K, V and O.
bool validateProblem(const fagen_fwd_problem &p, std::string &error);
/// The backward's gradients: dO like O, dQ like Q, dK like K, dV like V.
bool validateGradientStrides(const fagen_fwd_problem &p, std::string &error);
} // namespace fagen::rt

#endif // FAGEN_RUNTIME_RUNTIMEINTERNAL_H
