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

namespace fagen::rt {
/// A forward plan's rows of the packed varlen tensors (0 when dense), kept in fagen_plan::params
/// after the parameter block: the tensor maps of a TMA kernel need them, the kernels do not.
struct PlanVarlenRows {
  int64_t total_q, total_k;
};
constexpr size_t kPlanVarlenRowsOffset = (sizeof(fagen_fwd_params) + 7) / 8 * 8;
static_assert(kPlanVarlenRowsOffset + sizeof(PlanVarlenRows) <= sizeof(fagen_plan{}.params),
              "fagen_plan::params must hold the forward parameter block and the varlen rows");
} // namespace fagen::rt
static_assert(sizeof(fagen_dtype) == 4 && sizeof(fagen_mask) == 4 &&
                  sizeof(fagen_mask_align) == 4 && sizeof(fagen_score_mod) == 4 &&
                  sizeof(fagen_sparsity) == 4 && sizeof(fagen_pass) == 4,
              "the C ABI's enums are 32-bit");

struct fagen_bundle {
  fagen::Bundle bundle;
  std::vector<std::string> descriptions; ///< fagen_bundle_kernel_name, one per kernel
  std::mutex mutex;                      ///< guards the two caches
  /// (context, cubin)
  std::map<std::pair<fagen::CUcontext, uint32_t>, fagen::CUmodule> modules;
  /// (context, kernel, part)
  std::map<std::tuple<fagen::CUcontext, int, int>, fagen::CUfunction> functions;
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
bool takesTmaMaps(const KernelRecord &k);
/// A loaded bundle around `parsed` (the kernels' descriptions made once).
fagen_status adopt(Bundle parsed, fagen_bundle **out);
/// Plans the best kernel for the call, or (pinned) kernel `kernelIndex`.
fagen_status planCall(const char *function, const fagen_bundle *bundle,
                      const fagen_fwd_problem *problem, fagen_pass pass, int32_t deterministic,
                      bool pinned, int kernelIndex, fagen_plan *plan);

// Validate.cpp
bool checkStrides(const char *tensor, const int64_t strides[3], const int64_t extents[3],
                  bool isOutput, bool varlen, std::string &error);
/// The forward's problem: shapes, the variant, the strides of Q, K, V and O.
bool validateProblem(const fagen_fwd_problem &p, std::string &error);
/// The backward's gradients: dO like O, dQ like Q, dK like K, dV like V.
bool validateGradientStrides(const fagen_fwd_problem &p, std::string &error);
} // namespace fagen::rt

#endif // FAGEN_RUNTIME_RUNTIMEINTERNAL_H
