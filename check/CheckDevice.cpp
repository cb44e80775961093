//===- CheckDevice.cpp - `fagen check`: a case's device memory ------------===//

#include "check/CheckDevice.h"

#include <algorithm>

namespace fagen {

namespace check {

llvm::Error uploadCase(DeviceMemory &memory, const CaseInputs &in, DeviceCase &d) {
  const CaseSizes n = caseSizes(in.problem);
  DeviceRunArgs runArgs;
  llvm::Error error = llvm::Error::success();
  auto take = [&error](llvm::Expected<CUdeviceptr> p, CUdeviceptr &out) {
    if (!p)
      error = llvm::joinErrors(std::move(error), p.takeError());
    else
      out = *p;
  };
  take(memory.upload(in.q), d.q);
  take(memory.upload(in.k), d.k);
  take(memory.upload(in.v), d.v);
  take(memory.alloc(n.o * 2), d.o);
  take(memory.alloc(n.lse * 4), d.lse);
  take(memory.upload(in.alibiSlopes), runArgs.alibiSlopes);
  take(memory.upload(in.blockMask), runArgs.blockMask);
  take(memory.upload(in.cuSeqlensQ), runArgs.cuSeqlensQ);
  take(memory.upload(in.cuSeqlensK), runArgs.cuSeqlensK);
  d.args = runArgsFor(in, runArgs);
  return error;
}

std::string runtimeFailure(const char *what, fagen_status status) {
  return std::string(what) + ": " + fagen_status_name(status) + ": " + fagen_last_error();
}

fagen_status launchForward(const fagen_plan &plan, bool dense, const DeviceCase &d,
                           CUdeviceptr workspace) {
  void *q = devicePointer(d.q), *k = devicePointer(d.k), *v = devicePointer(d.v),
       *o = devicePointer(d.o);
  auto *lse = static_cast<float *>(devicePointer(d.lse));
  if (workspace != 0)
    return fagen_run_forward_with_workspace(&plan, q, k, v, o, lse, devicePointer(workspace),
                                            plan.workspace_bytes, dense ? nullptr : &d.args,
                                            nullptr);
  return dense ? fagen_run_forward(&plan, q, k, v, o, lse, nullptr)
               : fagen_run_forward_with_args(&plan, q, k, v, o, lse, &d.args, nullptr);
}

llvm::Expected<std::string> runForward(DeviceMemory &memory, const fagen_plan &plan,
                                       bool dense, const CaseInputs &in, const DeviceCase &d,
                                       bool persistent, bool decode) {
  const CaseSizes n = caseSizes(in.problem);
  auto once = [&](const fagen_plan &p, CUdeviceptr workspace) -> llvm::Expected<std::string> {
    if (llvm::Error e = memory.fill(d.o, 0xFF, n.o * 2))
      return e;
    if (llvm::Error e = memory.fill(d.lse, 0xFF, n.lse * 4))
      return e;
    if (workspace != 0) // nonzero: the runtime must zero the counter
      if (llvm::Error e = memory.fill(workspace, 0x5A, p.workspace_bytes))
        return e;
    if (llvm::Error e = memory.synchronize())
      return e;
    if (fagen_status st = launchForward(p, dense, d, workspace); st != FAGEN_OK)
      return runtimeFailure(workspace != 0 ? "run with a workspace" : "run", st);
    if (llvm::Error e = memory.synchronize())
      return e;
    return std::string();
  };
  // The plan's grid without a workspace first (one CTA per tile, or the static persistent
  // deal), then: a persistent kernel on 3 CTAs, which walk the static deal with many tiles each
  // (the Q buffer's and the K/V ring's phases across tiles); a kernel with a tile counter from
  // the counter on the plan's grid (one CTA per SM: at the check's shapes, one tile each) and
  // on 3 CTAs (the tile ring's reuse, the Q buffer's parity, skipped tiles between loaded
  // ones). Every run must give the bits of the first. (A grid of 3 CTAs or fewer has no
  // smaller launch to compare.)
  fagen_plan few = plan; // the runtime launches plan.grid CTAs (persistent, or a workspace)
  few.grid[0] = std::min(few.grid[0], 3);
  const bool fewer = few.grid[0] < plan.grid[0];
  struct Launch {
    const fagen_plan *plan;
    CUdeviceptr workspace;
  };
  if (decode && plan.workspace_bytes != 0) {
    llvm::Expected<CUdeviceptr> workspace = memory.alloc(plan.workspace_bytes);
    if (!workspace)
      return workspace.takeError();
    return once(plan, *workspace);
  }
  std::vector<Launch> launches;
  if (persistent && fewer)
    launches.push_back({&few, 0});
  if (plan.workspace_bytes != 0) {
    llvm::Expected<CUdeviceptr> workspace = memory.alloc(plan.workspace_bytes);
    if (!workspace)
      return workspace.takeError();
    launches.push_back({&plan, *workspace});
    if (fewer)
      launches.push_back({&few, *workspace});
  }
  llvm::Expected<std::string> first = once(plan, 0);
  if (launches.empty() || !first || !first->empty())
    return first;
  std::vector<uint8_t> o(n.o * 2), lse(n.lse * 4), o2(o.size()), lse2(lse.size());
  if (llvm::Error e = memory.download(o, d.o))
    return e;
  if (llvm::Error e = memory.download(lse, d.lse))
    return e;
  for (const Launch &l : launches) {
    llvm::Expected<std::string> again = once(*l.plan, l.workspace);
    if (!again || !again->empty())
      return again;
    if (llvm::Error e = memory.download(o2, d.o))
      return e;
    if (llvm::Error e = memory.download(lse2, d.lse))
      return e;
    const std::string ctas = std::to_string(l.plan->grid[0]) + " CTAs";
    if (o != o2 || lse != lse2)
      return (l.workspace != 0
                  ? "the forward with a workspace (work tiles from its counter, " + ctas +
                        ") is not bitwise the forward without: "
                  : "the persistent forward on " + ctas +
                        " (the static deal, many tiles each) is not bitwise the forward on the "
                        "plan's " +
                        std::to_string(plan.grid[0]) + " CTAs: ") +
             (o != o2 ? "O" : "LSE") + " differs";
  }
  return std::string();
}

} // namespace check

} // namespace fagen
