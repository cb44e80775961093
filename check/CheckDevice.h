//===- CheckDevice.h - `fagen check`: a case's device memory (internal) ----===//
//
// Shared by the forward (CheckForward.cpp) and backward (CheckBackward.cpp) cases: the upload
// of a case's tensors and run-time arguments (into device/DeviceMemory.h's allocations), and
// the forward run whose O and LSE both use.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_COMPILER_CHECKDEVICE_H
#define FAGEN_COMPILER_CHECKDEVICE_H

#include "check/Check.h"
#include "device/DeviceMemory.h"

#include "llvm/Support/Error.h"

#include <vector>

namespace fagen {
namespace check {

using device::cudaError;
using device::DeviceMemory;
using device::devicePointer;

/// A case's inputs on the device: Q, K, V, O, LSE and the run-time arguments.
struct DeviceCase {
  CUdeviceptr q = 0, k = 0, v = 0, o = 0, lse = 0;
  fagen_run_args args = FAGEN_RUN_ARGS_INIT;
};

/// Uploads Q, K, V and the run-time arguments of `in` and allocates O and LSE.
llvm::Error uploadCase(DeviceMemory &memory, const CaseInputs &in, DeviceCase &d);

/// Launches the forward `plan` (fagen_run_forward for a dense kernel, else with the run-time
/// arguments; with `workspace` nonzero, fagen_run_forward_with_workspace).
fagen_status launchForward(const fagen_plan &plan, bool dense, const DeviceCase &d,
                           CUdeviceptr workspace);

/// Poisons O and LSE (0xFF bytes: NaN in fp16, bf16 and fp32), runs the forward `plan` (with
/// fagen_run_forward for a dense kernel, else with the run-time arguments) and waits. Then, on
/// grids of more than 3 CTAs: a `persistent` kernel's plan (at most one CTA per SM, walking the
/// static deal of work tiles) runs again on 3 CTAs (many tiles each); a plan with a workspace
/// (a tile counter) runs with one (poisoned) on the plan's grid and on 3 CTAs. Every run must
/// give the first one's bits; O and LSE are then the last run's. A `decode` kernel's plan runs
/// once, with its workspace where it has one (its splits; one split without differs in the last
/// bits, both checked by CheckForward.cpp). Returns "" or the runtime's failure (or the
/// disagreement); an error for a failed driver call.
llvm::Expected<std::string> runForward(DeviceMemory &memory, const fagen_plan &plan,
                                       bool dense, const CaseInputs &in, const DeviceCase &d,
                                       bool persistent = false, bool decode = false);

/// Compares the O and LSE the kernel left on the device with the references; a `label`
/// ("one split: ") prefixes the worst-element lines. Fills `result` (passed only if it was).
/// CheckForward.cpp.
llvm::Error measureCase(DeviceMemory &memory, const CaseInputs &in, const DeviceCase &d,
                        const reference::FwdProblem &pb, const reference::FwdResult &exact,
                        const reference::FwdResult &same, const std::string &label,
                        CaseResult &result);

/// A paged decode kernel's case (CheckPaged.cpp): the planned splits over the paged cache of
/// makePagedLayout(in) against per-sequence references (the status must stay clean); a bad
/// page id and bad lengths, which the status must name; and, where the bundle has the
/// variant's contiguous decode kernel (the name without _pagedN), both on the same keys, bit
/// for bit. Makes `in`'s sequence 1 share sequence 0's first page.
llvm::Error pagedCase(DeviceMemory &memory, const fagen_bundle *bundle, int kernelIndex,
                      const KernelRecord &k, CaseInputs &in, unsigned seed, CaseResult &result);

/// "plan: FAGEN_ERROR_...: message" for a failed runtime call.
std::string runtimeFailure(const char *what, fagen_status status);

} // namespace check
} // namespace fagen

#endif // FAGEN_COMPILER_CHECKDEVICE_H
