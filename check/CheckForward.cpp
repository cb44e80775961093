//===- CheckForward.cpp - `fagen check`: one forward case on the GPU ------===//

#include "check/Check.h"
#include "check/CheckDevice.h"

#include "check/Reference.h"
#include "templates/abi/decode_params.h"

#include <cstring>

namespace fagen {

namespace ref = reference;

llvm::Error check::measureCase(check::DeviceMemory &memory, const CaseInputs &in,
                        const check::DeviceCase &d, const ref::FwdProblem &pb,
                        const ref::FwdResult &exact, const ref::FwdResult &same,
                        const std::string &label, CaseResult &result) {
  const CaseSizes n = caseSizes(in.problem);
  std::vector<uint16_t> o(n.o);
  std::vector<float> lse(n.lse);
  if (llvm::Error e = memory.download(o, d.o))
    return e;
  if (llvm::Error e = memory.download(lse, d.lse))
    return e;
  const ref::FwdResult got = ref::readKernelOutput(pb, o.data(), lse.data());
  const ref::FwdError error = ref::measureError(exact, got);
  const bool first = result.worst.empty();
  result.kernel.MaxO = std::max(first ? 0.0 : result.kernel.MaxO, error.MaxO);
  result.kernel.MaxLse = std::max(first ? 0.0 : result.kernel.MaxLse, error.MaxLse);
  result.samePrecision = ref::measureError(exact, same);
  result.passed = (first || result.passed) && ref::withinTolerance(error, result.samePrecision);
  result.worst.push_back(
      {label + ref::describeWorst("O", exact.O, same.O, got.O, pb.headDimV(), pb.Type),
       error.MaxO > ref::toleranceBound(result.samePrecision.MaxO, ref::kEpsO)});
  result.worst.push_back(
      {label + ref::describeWorst("LSE", exact.Lse, same.Lse, got.Lse, 1, ref::ElementType::F64),
       error.MaxLse > ref::toleranceBound(result.samePrecision.MaxLse, ref::kEpsLse)});
  result.outputs = {{"O", std::vector<float>(got.O.begin(), got.O.end())},
                    {"LSE", std::vector<float>(got.Lse.begin(), got.Lse.end())}};
  return llvm::Error::success();
}

namespace {

/// A decode kernel's case: one split (no workspace: the kernel writes O itself), then, where
/// the plan splits the keys, the planned splits and their combine with the plan's workspace
/// (poisoned: a partial row left unwritten reads as NaN); each against the references.
llvm::Error decodeCase(check::DeviceMemory &memory, const fagen_plan &plan, const KernelRecord &k,
                       const CaseInputs &in, const check::DeviceCase &d,
                       const ref::FwdProblem &pb, const ref::FwdResult &exact,
                       const ref::FwdResult &same, CaseResult &result) {
  const CaseSizes n = caseSizes(in.problem);
  CUdeviceptr workspace = 0;
  for (int split = 0; split < (plan.workspace_bytes > 0 ? 2 : 1); ++split) {
    if (split == 1) {
      llvm::Expected<CUdeviceptr> w = memory.alloc(plan.workspace_bytes);
      if (!w)
        return w.takeError();
      workspace = *w;
      if (llvm::Error e = memory.fill(workspace, 0xFF, plan.workspace_bytes))
        return e;
    }
    if (llvm::Error e = memory.fill(d.o, 0xFF, n.o * 2))
      return e;
    if (llvm::Error e = memory.fill(d.lse, 0xFF, n.lse * 4))
      return e;
    if (fagen_status st = check::launchForward(plan, isDenseKernel(k), d, workspace);
        st != FAGEN_OK) {
      result.failure = check::runtimeFailure(split ? "run with a workspace" : "run", st);
      return llvm::Error::success();
    }
    if (llvm::Error e = memory.synchronize())
      return e;
    fagen_decode_params dp;
    std::memcpy(&dp, plan.params, sizeof dp);
    const std::string label = split ? std::to_string(dp.num_splits) + " splits: " : "one split: ";
    if (llvm::Error e = check::measureCase(memory, in, d, pb, exact, same, label, result))
      return e;
  }
  return llvm::Error::success();
}

/// Runs the case on the device; fills `result` (a runtime failure, or the errors).
llvm::Error forwardCase(const DriverApi &api, const fagen_bundle *bundle, int kernelIndex,
                        const KernelRecord &k, const CaseInputs &in, CaseResult &result) {
  fagen_plan plan;
  if (fagen_status st = fagen_plan_forward_kernel(bundle, &in.problem, kernelIndex, &plan);
      st != FAGEN_OK) {
    result.failure = check::runtimeFailure("plan", st);
    return llvm::Error::success();
  }
  check::DeviceMemory memory(api);
  check::DeviceCase d;
  if (llvm::Error e = check::uploadCase(memory, in, d))
    return e;
  const ref::FwdProblem pb = referenceProblem(k, in);
  const ref::FwdResult exact = ref::forwardFloat64(pb);
  const ref::FwdResult same = ref::forwardSamePrecision(pb);
  if (isDecodeKernel(k))
    return decodeCase(memory, plan, k, in, d, pb, exact, same, result);
  llvm::Expected<std::string> run =
      check::runForward(memory, plan, isDenseKernel(k), in, d, k.persistent);
  if (!run)
    return run.takeError();
  if (!run->empty()) {
    result.failure = *run;
    return llvm::Error::success();
  }
  return check::measureCase(memory, in, d, pb, exact, same, "", result);
}

} // namespace

CaseOutcome checkKernelCase(const DriverApi &api, const fagen_bundle *bundle, int kernelIndex,
                            const KernelRecord &k, const CheckShape &s, unsigned seed,
                            const std::vector<uint8_t> &staticTable) {
  CaseInputs in = makeCaseInputs(k, s, seed, staticTable);
  CaseResult result;
  if (k.isPaged()) {
    check::DeviceMemory memory(api);
    if (llvm::Error e = check::pagedCase(memory, bundle, kernelIndex, k, in, seed, result))
      return CudaFailure{llvm::toString(std::move(e))};
    return result;
  }
  if (llvm::Error e = forwardCase(api, bundle, kernelIndex, k, in, result))
    return CudaFailure{llvm::toString(std::move(e))};
  return result;
}

} // namespace fagen
