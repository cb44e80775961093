//===- CheckBackward.cpp - `fagen check`: one backward case on the GPU ----===//
//
// O and LSE come from a forward kernel of the same variant when the bundle has one that runs
// here (the runtime's own choice, fagen_plan_forward), else from the float64 reference rounded
// to the dtype. dQ, dK and dV are poisoned, computed from random dO, and compared with the
// float64 and same-precision references (the latter reads the O that the kernel reads); a
// deterministic kernel runs twice and must repeat bit for bit.
//
//===----------------------------------------------------------------------===//

#include "check/Check.h"
#include "check/CheckDevice.h"

#include "check/Reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace fagen {

namespace {

namespace ref = reference;
using check::DeviceMemory;

/// The backward's extra device buffers.
struct DeviceGradients {
  CUdeviceptr dout = 0, dq = 0, dk = 0, dv = 0, workspace = 0;
};

/// dQ, dK, dV as the kernel wrote them.
struct HostGradients {
  std::vector<uint16_t> dq, dk, dv;
};

ref::StridedTensor strided(const void *ptr, const int64_t strides[3]) {
  return {ptr, strides[0], strides[1], strides[2]};
}

/// The float64 reference's O rounded to the dtype, through the problem's O strides.
std::vector<uint16_t> referenceO(const ref::FwdProblem &pb, const ref::FwdResult &r, size_t n) {
  const fagen_fwd_params &P = pb.Params;
  const int dv = pb.headDimV();
  std::vector<uint16_t> o(n, 0);
  for (int b = 0; b < P.batch; ++b) {
    const ref::Span s = ref::spanOf(pb, b);
    for (int h = 0; h < P.heads_q; ++h)
      for (int i = 0; i < s.Sq; ++i) {
        const size_t row = ref::resultRowQ(pb, b, h, i);
        const int64_t at = (pb.Varlen ? 0 : b * P.o_batch_stride) + h * P.o_head_stride +
                           (s.Q0 + i) * P.o_row_stride;
        for (int x = 0; x < dv; ++x)
          o[at + x] = ref::fromFloat(float(r.O[row * dv + x]), pb.Type);
      }
  }
  return o;
}

/// Fills d.o and d.lse for the backward: from a forward kernel of the same variant where one
/// serves the call here, else from the CPU. Sets `source`; returns "" or a runtime failure.
llvm::Expected<std::string> forwardOutputs(DeviceMemory &memory, const fagen_bundle *bundle,
                                           const Bundle &records, const KernelRecord &k,
                                           const CaseInputs &in, const check::DeviceCase &d,
                                           std::string &source) {
  fagen_plan plan;
  // A forward of the backward's own variant. Not a dropout kernel for a backward without
  // dropout: such a kernel serves dropout_p = 0 calls too (keeping every element), and the
  // backward of a variant without a forward of its own then reads the float64 reference's O and
  // LSE, as the golden digests were recorded.
  if (fagen_plan_forward(bundle, &in.problem, &plan) == FAGEN_OK &&
      records.kernels[plan.kernel_index].dropout == k.dropout) {
    std::string name = fagen_bundle_kernel_name(bundle, plan.kernel_index);
    source = name.substr(0, name.find(' '));
    llvm::Expected<std::string> run =
        check::runForward(memory, plan, isDenseKernel(k), in, d, /*persistent=*/false,
                          isDecodeKernel(records.kernels[plan.kernel_index]));
    if (run && !run->empty())
      return "forward " + source + ": " + *run;
    return run;
  }
  source = std::string("the float64 reference rounded to ") + toText(k.dtype);
  const ref::FwdProblem pb = referenceProblem(k, in);
  const ref::FwdResult exact = ref::forwardFloat64(pb);
  const CaseSizes n = caseSizes(in.problem);
  std::vector<uint16_t> o = referenceO(pb, exact, n.o);
  std::vector<float> lse(exact.Lse.begin(), exact.Lse.end());
  const DriverApi &api = memory.api();
  if (llvm::Error e = check::cudaError(api, api.cuMemcpyHtoD(d.o, o.data(), n.o * 2),
                                       "cuMemcpyHtoD"))
    return e;
  if (llvm::Error e = check::cudaError(api, api.cuMemcpyHtoD(d.lse, lse.data(), n.lse * 4),
                                       "cuMemcpyHtoD"))
    return e;
  return std::string();
}

/// Allocates dO (uploaded), dQ, dK, dV and the plan's workspace.
llvm::Error allocateGradients(DeviceMemory &memory, const fagen_plan &plan, const CaseInputs &in,
                              DeviceGradients &g) {
  const CaseSizes n = caseSizes(in.problem);
  for (auto [out, bytes] : {std::pair<CUdeviceptr *, size_t>{&g.dq, n.q * 2},
                            {&g.dk, n.k * 2},
                            {&g.dv, n.v * 2},
                            {&g.workspace, plan.workspace_bytes}}) {
    llvm::Expected<CUdeviceptr> p = memory.alloc(bytes);
    if (!p)
      return p.takeError();
    *out = *p;
  }
  llvm::Expected<CUdeviceptr> dout = memory.upload(in.dout);
  if (!dout)
    return dout.takeError();
  g.dout = *dout;
  return llvm::Error::success();
}

/// Poisons dQ, dK, dV, runs the backward plan, waits and reads the gradients into `out`.
llvm::Expected<std::string> runBackward(DeviceMemory &memory, const fagen_plan &plan,
                                        const CaseInputs &in, const check::DeviceCase &d,
                                        const DeviceGradients &g, HostGradients &out) {
  const CaseSizes n = caseSizes(in.problem);
  for (auto [ptr, bytes] : {std::pair<CUdeviceptr, size_t>{g.dq, n.q * 2},
                            {g.dk, n.k * 2},
                            {g.dv, n.v * 2}})
    if (llvm::Error e = memory.fill(ptr, 0xFF, bytes))
      return e;
  if (llvm::Error e = memory.synchronize())
    return e;
  using check::devicePointer;
  fagen_status st = fagen_run_backward(
      &plan, devicePointer(d.q), devicePointer(d.k), devicePointer(d.v), devicePointer(d.o),
      static_cast<const float *>(devicePointer(d.lse)), devicePointer(g.dout),
      devicePointer(g.dq), devicePointer(g.dk), devicePointer(g.dv),
      plan.workspace_bytes ? devicePointer(g.workspace) : nullptr, plan.workspace_bytes, &d.args,
      nullptr);
  if (st != FAGEN_OK)
    return check::runtimeFailure("run", st);
  if (llvm::Error e = memory.synchronize())
    return e;
  out.dq.resize(n.q), out.dk.resize(n.k), out.dv.resize(n.v);
  for (auto [host, ptr] : {std::pair<std::vector<uint16_t> *, CUdeviceptr>{&out.dq, g.dq},
                           {&out.dk, g.dk},
                           {&out.dv, g.dv}})
    if (llvm::Error e = memory.download(*host, ptr))
      return e;
  return std::string();
}

/// Elements of dQ, dK, dV whose bits differ between two runs.
int64_t bitwiseDifferences(const HostGradients &a, const HostGradients &b) {
  int64_t differ = 0;
  for (auto [x, y] : {std::pair<const std::vector<uint16_t> *, const std::vector<uint16_t> *>{
                          &a.dq, &b.dq},
                      {&a.dk, &b.dk},
                      {&a.dv, &b.dv}})
    for (size_t i = 0; i < x->size(); ++i)
      differ += (*x)[i] != (*y)[i];
  return differ;
}

/// O and LSE as the backward kernel reads them (from the device, after forwardOutputs).
struct HostForward {
  std::vector<uint16_t> o;
  std::vector<float> lse;
};

/// Compares the kernel's gradients with both references. The same-precision reference takes
/// D = rowsum(dO o O) from the O the kernel read, so that it models the backward on the same
/// inputs (D cancels against dP = dO V^T in rows that see few keys).
void compareGradients(const KernelRecord &k, const CaseInputs &in, const HostForward &fwd,
                      const HostGradients &got, BwdCaseResult &result) {
  const fagen_fwd_problem &p = in.problem;
  ref::BwdProblem bp;
  bp.Fwd = referenceProblem(k, in);
  bp.DOut = strided(in.dout.data(), p.do_strides);
  // Only a finite O: a NaN or Inf there (a broken forward kernel, whose own row fails) would
  // make the same-precision error, hence the bound, infinite and pass any backward.
  const ref::FwdResult given = ref::readKernelOutput(bp.Fwd, fwd.o.data(), fwd.lse.data());
  if (std::all_of(given.O.begin(), given.O.end(), [](double x) { return std::isfinite(x); }))
    bp.GivenO = &given.O;
  const ref::BwdResult exact = ref::backwardFloat64(bp);
  const ref::BwdResult same = ref::backwardSamePrecision(bp);
  const ref::BwdResult kernel =
      ref::readKernelGradients(bp, strided(got.dq.data(), p.dq_strides),
                               strided(got.dk.data(), p.dk_strides),
                               strided(got.dv.data(), p.dv_strides));
  result.kernel = ref::measureError(exact, kernel);
  result.samePrecision = ref::measureError(exact, same);
  result.passed = ref::withinTolerance(result.kernel, result.samePrecision) &&
                  result.repeatDiffer <= 0;
  const int dqk = bp.Fwd.HeadDim, dv = bp.Fwd.headDimV();
  const ref::ElementType type = bp.Fwd.Type;
  auto over = [&](double kernel, double same) {
    return kernel > ref::gradientBound(same, result.samePrecision);
  };
  result.worst = {
      {ref::describeWorst("dQ", exact.DQ, same.DQ, kernel.DQ, dqk, type),
       over(result.kernel.MaxDQ, result.samePrecision.MaxDQ)},
      {ref::describeWorst("dK", exact.DK, same.DK, kernel.DK, dqk, type),
       over(result.kernel.MaxDK, result.samePrecision.MaxDK)},
      {ref::describeWorst("dV", exact.DV, same.DV, kernel.DV, dv, type),
       over(result.kernel.MaxDV, result.samePrecision.MaxDV)}};
  result.outputs = {{"dQ", std::vector<float>(kernel.DQ.begin(), kernel.DQ.end())},
                    {"dK", std::vector<float>(kernel.DK.begin(), kernel.DK.end())},
                    {"dV", std::vector<float>(kernel.DV.begin(), kernel.DV.end())}};
}

/// Runs the case on the device; fills `result` (a runtime failure, or the errors).
llvm::Error backwardCase(const DriverApi &api, const fagen_bundle *bundle,
                         const Bundle &records, int kernelIndex, const KernelRecord &k,
                         const CaseInputs &in, BwdCaseResult &result) {
  fagen_plan plan;
  if (fagen_status st = fagen_plan_backward_kernel(bundle, &in.problem, k.deterministic ? 1 : 0,
                                                   kernelIndex, &plan);
      st != FAGEN_OK) {
    result.failure = check::runtimeFailure("plan", st);
    return llvm::Error::success();
  }
  DeviceMemory memory(api);
  check::DeviceCase d;
  DeviceGradients g;
  if (llvm::Error e = check::uploadCase(memory, in, d))
    return e;
  if (llvm::Error e = allocateGradients(memory, plan, in, g))
    return e;
  llvm::Expected<std::string> fwd =
      forwardOutputs(memory, bundle, records, k, in, d, result.forwardSource);
  if (!fwd || !fwd->empty()) {
    if (!fwd)
      return fwd.takeError();
    result.failure = *fwd;
    return llvm::Error::success();
  }
  const CaseSizes n = caseSizes(in.problem);
  HostForward read{std::vector<uint16_t>(n.o), std::vector<float>(n.lse)};
  if (llvm::Error e = memory.synchronize())
    return e;
  if (llvm::Error e = memory.download(read.o, d.o))
    return e;
  if (llvm::Error e = memory.download(read.lse, d.lse))
    return e;
  HostGradients first, second;
  for (HostGradients *out : {&first, &second}) {
    if (out == &second && !k.deterministic)
      break;
    llvm::Expected<std::string> run = runBackward(memory, plan, in, d, g, *out);
    if (!run)
      return run.takeError();
    if (!run->empty()) {
      result.failure = *run;
      return llvm::Error::success();
    }
  }
  if (k.deterministic)
    result.repeatDiffer = bitwiseDifferences(first, second);
  compareGradients(k, in, read, first, result);
  return llvm::Error::success();
}

} // namespace

BwdCaseOutcome checkBackwardCase(const DriverApi &api, const fagen_bundle *bundle,
                                 const Bundle &records, int kernelIndex, const CheckShape &s,
                                 unsigned seed, const std::vector<uint8_t> &staticTable) {
  const KernelRecord &k = records.kernels[kernelIndex];
  const CaseInputs in = makeCaseInputs(k, s, seed, staticTable);
  BwdCaseResult result;
  if (llvm::Error e = backwardCase(api, bundle, records, kernelIndex, k, in, result))
    return CudaFailure{llvm::toString(std::move(e))};
  return result;
}

} // namespace fagen
