//===- Package.cpp - compiled kernels -> one bundle -----------------------===//

#include "compiler/bundle/Package.h"

#include "templates/abi/bwd_params.h"
#include "templates/abi/decode_params.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace fagen {

Bundle assembleBundle(const Toolchain &toolchain, const std::vector<CompiledKernel> &kernels) {
  std::vector<const CompiledKernel *> sorted;
  for (const CompiledKernel &k : kernels)
    sorted.push_back(&k);
  std::sort(sorted.begin(), sorted.end(), [](const CompiledKernel *a, const CompiledKernel *b) {
    return std::tie(a->plan.name, a->plan.arch, a->plan.seqlenMin) <
           std::tie(b->plan.name, b->plan.arch, b->plan.seqlenMin);
  });
  Bundle bundle;
  bundle.fagenVersion = FAGEN_VERSION_STRING;
  bundle.toolchain = toolchain.describe();
  std::set<std::string> archs;
  for (const CompiledKernel *k : sorted) {
    const KernelPlan &p = k->plan;
    archs.insert(p.arch);
    KernelRecord r;
    static_cast<Variant &>(r) = p; // the plan's variant, with the sparse keys of its kind only
    if (p.sparsity == Sparsity::None)
      r.sparseBlock = 0;
    if (p.sparsity == Sparsity::Static) {
      r.sparseRows = p.sparseRows;
      r.sparseCols = p.sparseCols;
    } else {
      r.sparseHash.clear();
    }
    r.name = p.name;
    r.arch = p.arch;
    r.templ = p.templ;
    r.variant = p.variant;
    // Only a backward has the deterministic mode and the _pre/_post kernels.
    const bool backward = p.pass == Pass::Backward;
    r.deterministic = backward && p.deterministic;
    r.persistent = p.persistent;
    r.tileCounter = p.tileCounter;
    r.tmaStoreO = p.tmaStoreO;
    r.prePostThreads = backward || isDecodePlan(p) ? p.prePostThreads : 0;
    r.qTokens = isDecodePlan(p) ? p.qTokens : 0;
    r.decodeCtasPerSm = isDecodePlan(p) ? p.decodeCtasPerSm : 0;
    r.decodeMinTiles = isDecodePlan(p) ? p.decodeMinTiles : 0;
    r.blockM = p.blockM;
    r.blockN = p.blockN;
    r.warps = p.warps;
    r.stages = p.stages;
    r.threads = p.threads;
    r.smemBytes = p.smemBytes;
    r.paramsVersion = backward          ? FAGEN_BWD_PARAMS_VERSION
                      : isDecodePlan(p) || p.isPaged() ? FAGEN_DECODE_PARAMS_VERSION
                                        : FAGEN_FWD_PARAMS_VERSION;
    r.registers = k->report.registers;
    r.spillBytes = k->report.spillBytes();
    r.rescaleTau = p.rescaleTau;
    r.exp2EmuPercent = p.exp2EmuPercent;
    r.exp2PolyDegree = p.exp2PolyDegree;
    r.seqlenMin = p.seqlenMin;
    r.seqlenMax = p.seqlenMax;
    r.tuning = p.tuning;
    r.cubinSection = static_cast<uint32_t>(bundle.cubins.size());
    bundle.cubins.push_back(k->cubin);
    bundle.kernels.push_back(std::move(r));
  }
  bundle.archs.assign(archs.begin(), archs.end());
  return bundle;
}

std::string verifiedOn(const std::string &templ, Pass pass, const std::string &arch) {
  // The split-KV decode: tests/gpu/decode_check.sh on an H100, sm_90 build
  // (docs/perf/sm80-decode.md); other archs compiled, not run.
  if (templ == "sm80decode")
    return arch == "sm_90" ? "NVIDIA H100 (fagen check, 2026-12-06)" : "";
  // The sm90ws backward: tests/gpu/check-bwd90.yaml on an H100 (docs/perf/sm90-bwd.md; head
  // dims 192 and 192/128 the day after).
  if (templ == "sm90ws" && pass == Pass::Backward)
    return arch == "sm_90a" ? "NVIDIA H100 (fagen check, 2026-12-06; hd 192, 192/128 2026-12-07)"
                            : "";
  // Only what tests/gpu/run.sh has run and passed on real hardware (docs/perf/). An sm_80 cubin
  // does not load on the H200, and no A100 or B200 is available here: those stay "compiled,
  // not run".
  if (templ == "sm80" && (arch == "sm_90" || arch == "sm_90a"))
    return "NVIDIA H200 (fagen check, 2026-11-30)";
  if ((templ == "sm90" || templ == "sm90ws") && arch == "sm_90a")
    return "NVIDIA H200 (fagen check, 2026-11-30)";
  return "";
}

std::string verifiedOn(const KernelRecord &k) {
  // The sm80 forward's chunked prefill over a paged KV cache: tests/gpu/check-paged.yaml on an
  // H100, sm_90 build (docs/perf/sm80-decode.md); other archs compiled, not run.
  if (k.isPaged() && !isDecodeKernel(k))
    return k.arch == "sm_90" ? "NVIDIA H100 (fagen check, 2026-12-06)" : "";
  return verifiedOn(k.templ, k.pass, k.arch);
}

} // namespace fagen
