//===- CheckForward.cpp - `fagen check`: one forward case on the GPU ------===//

#include "check/Check.h"
#include "check/CheckDevice.h"

#include "check/Reference.h"

namespace fagen {

namespace ref = reference;

namespace {

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
  llvm::Expected<std::string> run =
      check::runForward(memory, plan, isDenseKernel(k), in, d, k.persistent);
  if (!run)
    return run.takeError();
  if (!run->empty()) {
    result.failure = *run;
    return llvm::Error::success();
  }
  const CaseSizes n = caseSizes(in.problem);
  std::vector<uint16_t> o(n.o);
  std::vector<float> lse(n.lse);
  if (llvm::Error e = memory.download(o, d.o))
    return e;
  if (llvm::Error e = memory.download(lse, d.lse))
    return e;

  const ref::FwdProblem pb = referenceProblem(k, in);
  const ref::FwdResult exact = ref::forwardFloat64(pb);
  const ref::FwdResult same = ref::forwardSamePrecision(pb);
  const ref::FwdResult got = ref::readKernelOutput(pb, o.data(), lse.data());
  result.kernel = ref::measureError(exact, got);
  result.samePrecision = ref::measureError(exact, same);
  result.passed = ref::withinTolerance(result.kernel, result.samePrecision);
  result.worst = {
      {ref::describeWorst("O", exact.O, same.O, got.O, pb.headDimV(), pb.Type),
       result.kernel.MaxO > ref::toleranceBound(result.samePrecision.MaxO, ref::kEpsO)},
      {ref::describeWorst("LSE", exact.Lse, same.Lse, got.Lse, 1, ref::ElementType::F64),
       result.kernel.MaxLse > ref::toleranceBound(result.samePrecision.MaxLse, ref::kEpsLse)}};
  result.outputs = {{"O", std::vector<float>(got.O.begin(), got.O.end())},
                    {"LSE", std::vector<float>(got.Lse.begin(), got.Lse.end())}};
  return llvm::Error::success();
}

} // namespace

CaseOutcome checkKernelCase(const DriverApi &api, const fagen_bundle *bundle, int kernelIndex,
                            const KernelRecord &k, const CheckShape &s, unsigned seed,
                            const std::vector<uint8_t> &staticTable) {
  const CaseInputs in = makeCaseInputs(k, s, seed, staticTable);
  CaseResult result;
  if (llvm::Error e = forwardCase(api, bundle, kernelIndex, k, in, result))
    return CudaFailure{llvm::toString(std::move(e))};
  return result;
}

} // namespace fagen
