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
#include "templates/common/philox.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
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
/// The current context's id (cuCtxGetId; 0 where the driver lacks it).
uint64_t contextId(const DriverApi &api, CUcontext ctx);
bool takesTmaMaps(const KernelRecord &k);
/// A loaded bundle around `parsed` (the kernels' descriptions made once).
fagen_status adopt(Bundle parsed, fagen_bundle **out);
/// Plans the best kernel for the call, or (pinned) kernel `kernelIndex`.
fagen_status planCall(const char *function, const fagen_bundle *bundle,
                      const fagen_fwd_problem *problem, fagen_pass pass, int32_t deterministic,
                      bool pinned, int kernelIndex, fagen_plan *plan);

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
/// The forward's problem: shapes, the variant, the strides of Q, K, V and O.
bool validateProblem(const fagen_fwd_problem &p, std::string &error);
/// The backward's gradients: dO like O, dQ like Q, dK like K, dV like V.
bool validateGradientStrides(const fagen_fwd_problem &p, std::string &error);
} // namespace fagen::rt

#endif // FAGEN_RUNTIME_RUNTIMEINTERNAL_H
