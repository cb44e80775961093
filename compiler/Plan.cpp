//===- Plan.cpp - KernelPlan: one kernel per variant x pass x arch --------===//

#include "Plan.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace fagen {

int archSmemLimit(const std::string &arch) {
  // Per-block opt-in maxima from the CUDA C Programming Guide's compute capability table.
  if (arch == "sm_86" || arch == "sm_89")
    return 99 * 1024;
  if (arch == "sm_80")
    return 163 * 1024;
  return 227 * 1024; // sm_90, sm_90a, sm_100, sm_100a
}

int sm80FwdSmemBytes(int headDim, int blockM, int blockN, int stages) {
  // Q tile + kStages x (K tile + V tile); rows padded by 16 bytes so that ldmatrix is
  // bank-conflict free for every head dim that is a multiple of 16. Mirrors
  // templates/sm80/fwd_config.cuh (the emitted code static_asserts that they agree).
  int rowBytes = headDim * 2 + 16;
  return (blockM + 2 * stages * blockN) * rowBytes;
}

int sm90FwdSmemBytes(int headDim, int blockM, int blockN, int stages) {
  // Q + kStages x (K + V), 128-byte swizzled, plus 1024 bytes to align the base to a swizzle
  // atom. Mirrors templates/sm90/fwd_config.cuh.
  return (blockM + 2 * stages * blockN) * headDim * 2 + 1024;
}

namespace {

struct Tile {
  int blockM, blockN, warps, stages;
};

/// Defaults for the portable template; the tuner replaces them per GPU. Measured on the H200
/// (sm_90 build, bf16, 2026-11-30, docs/perf/sm80-fwd.md): hd64 128x128 s2 and hd128 128x64 s2
/// reach 1.0x FlashAttention-2; for hd > 128, 64x64 with 4 warps (two CTAs per SM) beat
/// 128x64 with 8 warps by 8% (non-causal) and 17% (causal). On sm_80/86/89 (164/100 KB per SM)
/// one stage lets two CTAs share an SM: occupancy arithmetic, not measured (no A100 here).
Tile defaultTile(int headDim, const std::string &arch) {
  bool ampere = arch == "sm_80" || arch == "sm_86" || arch == "sm_89";
  if (headDim <= 64)
    return {128, 128, 4, ampere ? 1 : 2};
  if (headDim <= 128)
    return {128, 64, 4, ampere ? 1 : 2};
  // hd 224 and 240 spill 16-136 bytes at 64x64 with 4 warps (nvcc 13.0, sm_80/90/100a); 8
  // warps over 128 rows do not.
  if (ampere || headDim == 224 || headDim == 240)
    return {128, 64, 8, 1};
  return {64, 64, 4, 1};
}

/// FlashAttention-4's conditional-rescaling threshold by default, measured on the H200 (sm_90
/// build, bf16, 2026-11-30, docs/perf/sm80-fwd.md): tau 8 is +2-7% at hd 128; at hd 64
/// always rescaling (-1, branch-free) is +1-3% causal and neutral to -4% non-causal. On
/// Ampere-class archs hd 64 keeps the exact skip (0): tau -1 was not run there.
int defaultRescaleTau(int headDim, bool causal, const std::string &arch) {
  bool ampere = arch == "sm_80" || arch == "sm_86" || arch == "sm_89";
  if (headDim <= 64)
    return causal && !ampere ? -1 : 0;
  if (headDim <= 128)
    return 8;
  return 0;
}

/// Shrinks a default tile until it fits the arch's shared memory.
Tile fitSmem(Tile t, int headDim, const std::string &arch) {
  while (sm80FwdSmemBytes(headDim, t.blockM, t.blockN, t.stages) > archSmemLimit(arch)) {
    if (t.stages > 1)
      --t.stages;
    else if (t.blockN > 32)
      t.blockN /= 2;
    else
      break;
  }
  return t;
}

/// fp32 accumulator registers per thread: S (rows x blockN) and O (rows x headDim).
int accumulatorRegs(const Tile &t, int headDimV) {
  int atomsM = t.blockM / t.warps / 16;
  return atomsM * (t.blockN / 8) * 4 + atomsM * (headDimV / 8) * 4;
}

constexpr int kMaxAccumulatorRegs = 192;

/// Mirrors the static_asserts of templates/sm80/fwd_config.cuh: "" when the template can
/// build the config, else what is wrong and the fix.
std::string sm80ConfigProblem(const Tile &t, int headDimQK, int headDimV, const std::string &arch) {
  if (t.warps != 1 && t.warps != 2 && t.warps != 4 && t.warps != 8)
    return llvm::formatv("warps must be 1, 2, 4 or 8, got {0}", t.warps);
  int rowsPerWarp = t.blockM / t.warps;
  if (t.blockM % t.warps != 0 || (rowsPerWarp != 16 && rowsPerWarp != 32))
    return llvm::formatv("block_m ({0}) must be 16 or 32 rows per warp with {1} warps: use "
                         "block_m {2} or {3}",
                         t.blockM, t.warps, 16 * t.warps, 32 * t.warps);
  if (t.blockN % 16 != 0 || t.blockN < 16 || t.blockN > 256)
    return llvm::formatv("block_n must be a multiple of 16 in 16..256, got {0}", t.blockN);
  if (t.stages < 1 || t.stages > 4)
    return llvm::formatv("stages must be in 1..4, got {0}", t.stages);
  int smem = sm80FwdSmemBytes(headDimQK, t.blockM, t.blockN, t.stages);
  if (smem > archSmemLimit(arch))
    return llvm::formatv("tile {0}x{1} with {2} stages needs {3} bytes of shared memory; {4} "
                         "allows {5}: lower stages or block_n",
                         t.blockM, t.blockN, t.stages, smem, arch, archSmemLimit(arch));
  int regs = accumulatorRegs(t, headDimV);
  if (regs > kMaxAccumulatorRegs)
    return llvm::formatv("tile {0}x{1} with {2} warps needs {3} fp32 accumulator registers per "
                         "thread (at most {4} fit without spills): use more warps or a smaller "
                         "block_n",
                         t.blockM, t.blockN, t.warps, regs, kMaxAccumulatorRegs);
  return "";
}

/// The FlashAttention-4 parameters' ranges (templates/sm80/fwd_config.cuh).
std::string fa4ParamsProblem(int tau, int emuPercent, int degree) {
  // tau 16 missed the tolerance rule on the H200 (hd64, 1 x 577, slowly growing maxima);
  // degrees 1 and 2 miss it everywhere (docs/perf/sm80-fwd.md). The template accepts them
  // for its negative tests; the planner does not.
  if (tau < -1 || tau > 8)
    return llvm::formatv("rescale_tau must be in -1..8, got {0}", tau);
  if (emuPercent < 0 || emuPercent > 50)
    return llvm::formatv("exp2_emu_percent must be in 0..50, got {0}", emuPercent);
  if (degree < 3 || degree > 5)
    return llvm::formatv("exp2_poly_degree must be in 3..5, got {0}", degree);
  return "";
}

/// Mirrors templates/sm90/fwd_config.cuh's static_asserts, restricted to what has run on the
/// H200 (head dims 64 and 128).
std::string sm90ConfigProblem(const KernelPlan &p) {
  if (p.arch != "sm_90a")
    return "the sm90 template (wgmma) needs the sm_90a target";
  if (p.headDimQK != p.headDimV || (p.headDimQK != 64 && p.headDimQK != 128))
    return "the sm90 template runs head dims 64 and 128";
  if (p.blockM != 64 && p.blockM != 128)
    return llvm::formatv("block_m must be 64 or 128 (1 or 2 warpgroups), got {0}", p.blockM);
  if (p.warps != p.blockM / 16)
    return llvm::formatv("warps must be block_m / 16 = {0} (4 per warpgroup), got {1}",
                         p.blockM / 16, p.warps);
  if (p.blockN != 64 && p.blockN != 128 && p.blockN != 256)
    return llvm::formatv("block_n must be 64, 128 or 256, got {0}", p.blockN);
  if (p.stages < 2 || p.stages > 4)
    return llvm::formatv("stages must be in 2..4, got {0}", p.stages);
  if (p.rescaleTau != 0)
    return "the sm90 template rescales only when a row max grows (rescale_tau 0)";
  int smem = sm90FwdSmemBytes(p.headDimQK, p.blockM, p.blockN, p.stages);
  if (smem > archSmemLimit(p.arch))
    return llvm::formatv("needs {0} bytes of shared memory; sm_90a allows {1}", smem,
                         archSmemLimit(p.arch));
  if (p.blockN / 2 + p.headDimQK / 2 + p.blockN / 4 > 192)
    return llvm::formatv("S + O + P need more than 192 registers per thread at block_n {0}",
                         p.blockN);
  return "";
}

bool validHeadDim(int headDim) { return headDim % 16 == 0 && headDim >= 32 && headDim <= 256; }

llvm::Error checkSm80Tile(const Tile &t, const VariantSpec &v, const std::string &arch) {
  if (!validHeadDim(v.headDimQK))
    return makeSpecError(v.locOf("head_dim"), "head_dim must be a multiple of 16 in 32..256");
  std::string problem = sm80ConfigProblem(t, v.headDimQK, v.headDimV, arch);
  if (!problem.empty())
    return makeSpecError(v.tile ? v.tile->loc : v.loc, problem);
  return llvm::Error::success();
}

} // namespace

std::string kernelName(const KernelPlan &p) {
  std::string dims = p.headDimQK == p.headDimV
                         ? std::to_string(p.headDimQK)
                         : llvm::formatv("{0}x{1}", p.headDimQK, p.headDimV).str();
  std::string name =
      llvm::formatv("fagen_{0}_{1}_hd{2}_{3}_{4}_m{5}n{6}w{7}s{8}", p.pass, p.dtype, dims, p.mask,
                    p.templ, p.blockM, p.blockN, p.warps, p.stages)
          .str();
  if (p.rescaleTau != 0)
    name += p.rescaleTau < 0 ? "_ra" : llvm::formatv("_r{0}", p.rescaleTau).str();
  if (p.exp2EmuPercent != 0)
    name += llvm::formatv("_e{0}d{1}", p.exp2EmuPercent, p.exp2PolyDegree).str();
  return name;
}

llvm::Error checkKernelPlan(const KernelPlan &p) {
  std::string problem;
  if (!validHeadDim(p.headDimQK))
    problem = llvm::formatv("head_dim {0} is not a multiple of 16 in 32..256", p.headDimQK);
  if (problem.empty())
    problem = p.templ == "sm90" ? sm90ConfigProblem(p)
                                : sm80ConfigProblem({p.blockM, p.blockN, p.warps, p.stages},
                                                    p.headDimQK, p.headDimV, p.arch);
  if (problem.empty())
    problem = fa4ParamsProblem(p.rescaleTau, p.exp2EmuPercent, p.exp2PolyDegree);
  if (problem.empty())
    return llvm::Error::success();
  return llvm::createStringError(std::errc::invalid_argument, "%s: %s", kernelName(p).c_str(),
                                 problem.c_str());
}

std::string KernelConfig::text() const {
  std::string s = llvm::formatv("m{0}n{1}w{2}s{3}", blockM, blockN, warps, stages).str();
  if (rescaleTau != 0)
    s += rescaleTau < 0 ? " tau-1" : llvm::formatv(" tau{0}", rescaleTau).str();
  if (exp2EmuPercent != 0)
    s += llvm::formatv(" emu{0}d{1}", exp2EmuPercent, exp2PolyDegree).str();
  return s;
}

static auto configTie(const KernelConfig &c) {
  return std::tie(c.blockM, c.blockN, c.warps, c.stages, c.rescaleTau, c.exp2EmuPercent,
                  c.exp2PolyDegree);
}

bool KernelConfig::operator==(const KernelConfig &o) const {
  return configTie(*this) == configTie(o);
}
bool KernelConfig::operator<(const KernelConfig &o) const { return configTie(*this) < configTie(o); }

KernelConfig configOf(const KernelPlan &p) {
  KernelConfig c;
  c.blockM = p.blockM;
  c.blockN = p.blockN;
  c.warps = p.warps;
  c.stages = p.stages;
  c.rescaleTau = p.rescaleTau;
  c.exp2EmuPercent = p.exp2EmuPercent;
  c.exp2PolyDegree = p.exp2PolyDegree;
  return c;
}

llvm::Expected<KernelPlan> applyConfig(const KernelPlan &base, const KernelConfig &c) {
  KernelPlan p = base;
  p.blockM = c.blockM;
  p.blockN = c.blockN;
  p.warps = c.warps;
  p.stages = c.stages;
  p.rescaleTau = c.rescaleTau;
  p.exp2EmuPercent = c.exp2EmuPercent;
  p.exp2PolyDegree = c.exp2PolyDegree;
  finalizePlan(p);
  if (llvm::Error err = checkKernelPlan(p))
    return err;
  return p;
}

void finalizePlan(KernelPlan &p) {
  if (p.exp2EmuPercent == 0)
    p.exp2PolyDegree = 3; // no polynomial: one kernel, whatever the degree says
  p.threads = 32 * p.warps;
  p.smemBytes = p.templ == "sm90" ? sm90FwdSmemBytes(p.headDimQK, p.blockM, p.blockN, p.stages)
                                  : sm80FwdSmemBytes(p.headDimQK, p.blockM, p.blockN, p.stages);
  p.name = kernelName(p);
}

std::string workloadKey(const KernelPlan &p) {
  return llvm::formatv("{0} {1} hd{2}x{3} {4} {5}", p.pass, p.dtype, p.headDimQK, p.headDimV,
                       p.mask, p.arch)
      .str();
}

namespace {

/// The planner's (or the spec's) kernel for one variant, pass and arch.
/// Whether the planner picks the wgmma template: sm_90a targets at head dims 64 and 128, the
/// configurations that have run on the H200 (1.28-1.50x the portable template's speed,
/// docs/perf/sm90-fwd.md). A spec's tile: keeps the portable template.
bool usesSm90Template(const KernelPlan &p) {
  return p.arch == "sm_90a" && p.headDimQK == p.headDimV &&
         (p.headDimQK == 64 || p.headDimQK == 128);
}

/// The sm90 template's default for `p`, measured on the H200 (bf16, 2026-11-30,
/// docs/perf/sm90-fwd.md): hd 64 one warpgroup of 64 rows x 128 keys (three CTAs per SM beat
/// one CTA of two warpgroups by 15-35%); hd 128 two warpgroups, 128 x 128; two stages (three
/// never helped).
KernelPlan sm90Plan(KernelPlan p) {
  p.templ = "sm90";
  p.blockM = p.headDimQK == 64 ? 64 : 128;
  p.blockN = 128;
  p.warps = p.blockM / 16;
  p.stages = 2;
  p.rescaleTau = 0;
  finalizePlan(p);
  return p;
}

/// A spec's tile: pins the template and any of its parameters; the rest stay the planner's.
llvm::Expected<KernelPlan> pinnedPlan(KernelPlan p, const TileOverride &tile,
                                      const VariantSpec &v) {
  if (tile.templ == "sm90") {
    if (p.arch != "sm_90a")
      return makeSpecError(tile.loc, "template sm90 needs the sm_90a target, not " + p.arch +
                                         ": list only sm_90a in this variant's targets");
    p = sm90Plan(p);
  }
  if (tile.blockM) p.blockM = tile.blockM;
  if (tile.blockN) p.blockN = tile.blockN;
  if (tile.stages) p.stages = tile.stages;
  if (tile.warps)
    p.warps = tile.warps;
  else if (p.templ == "sm90")
    p.warps = p.blockM / 16;
  if (tile.rescaleTau) p.rescaleTau = *tile.rescaleTau;
  if (tile.exp2EmuPercent) p.exp2EmuPercent = *tile.exp2EmuPercent;
  if (tile.exp2PolyDegree) p.exp2PolyDegree = *tile.exp2PolyDegree;
  p.tuning = "spec";
  finalizePlan(p);
  if (p.templ == "sm80") {
    Tile t{p.blockM, p.blockN, p.warps, p.stages};
    if (llvm::Error err = checkSm80Tile(t, v, p.arch))
      return err;
  }
  if (llvm::Error err = checkKernelPlan(p)) {
    std::string message = llvm::toString(std::move(err));
    return makeSpecError(tile.loc, message.substr(message.find(": ") + 2));
  }
  return p;
}

llvm::Expected<KernelPlan> basePlan(const VariantSpec &v, const std::string &pass,
                                    const std::string &arch) {
  if (!validHeadDim(v.headDimQK))
    return makeSpecError(v.locOf("head_dim"), "head_dim must be a multiple of 16 in 32..256");
  KernelPlan p;
  p.variant = v.name;
  p.pass = pass;
  p.arch = arch;
  p.templ = "sm80";
  p.dtype = v.dtype;
  p.headDimQK = v.headDimQK;
  p.headDimV = v.headDimV;
  p.mask = v.mask;
  Tile t = fitSmem(defaultTile(v.headDimQK, arch), v.headDimQK, arch);
  p.blockM = t.blockM;
  p.blockN = t.blockN;
  p.warps = t.warps;
  p.stages = t.stages;
  p.rescaleTau = defaultRescaleTau(v.headDimQK, v.mask == "causal", arch);
  p.tuning = "default";
  finalizePlan(p);
  // A pinned tile keeps the portable template unless it names another one.
  if (v.tile)
    return pinnedPlan(p, *v.tile, v);
  if (usesSm90Template(p))
    return sm90Plan(p);
  return p;
}

/// One kernel per tuned range (contiguous ranges with the same config merged), and the base
/// kernel over the whole range when the tuned ranges leave calls uncovered.
llvm::Expected<std::vector<KernelPlan>> tunedPlans(const KernelPlan &base,
                                                   const std::vector<TunedConfig> &configs) {
  std::vector<KernelPlan> out;
  int64_t next = 1; // the first seqlen not yet covered
  bool gap = false;
  for (const TunedConfig &c : configs) {
    llvm::Expected<KernelPlan> tuned = applyConfig(base, c.config);
    if (!tuned)
      return llvm::createStringError(
          std::errc::invalid_argument,
          "tuning database: the config tuned for %s, seqlen %lld..%lld cannot be built: %s: "
          "re-tune with this fagen",
          workloadKey(base).c_str(), (long long)c.seqlenMin, (long long)c.seqlenMax,
          llvm::toString(tuned.takeError()).c_str());
    KernelPlan p = std::move(*tuned);
    p.seqlenMin = c.seqlenMin;
    p.seqlenMax = c.seqlenMax;
    p.tuning = c.provenance;
    gap |= c.seqlenMin > next;
    next = std::max(next, c.seqlenMax + 1);
    if (!out.empty() && out.back().name == p.name && out.back().seqlenMax + 1 == p.seqlenMin) {
      out.back().seqlenMax = p.seqlenMax;
      out.back().tuning += "; " + p.tuning;
      continue;
    }
    out.push_back(std::move(p));
  }
  if (gap || next <= base.seqlenMax)
    out.push_back(base);
  return out;
}

} // namespace

llvm::Expected<std::vector<KernelPlan>> planKernels(const AttentionSpec &spec,
                                                    const std::vector<std::string> &archs,
                                                    const TuningTable *tuning) {
  std::map<std::tuple<std::string, std::string, int64_t>, KernelPlan> byKey;
  for (const VariantSpec &v : spec.variants) {
    std::vector<std::string> targets = !archs.empty() ? archs
                                       : !v.targets.empty() ? v.targets
                                                            : spec.targets;
    if (targets.empty())
      return makeSpecError(v.loc, llvm::formatv("variant '{0}' has no target archs: add "
                                                "'targets: [sm_90a]' to the spec or pass --arch",
                                                v.name));
    for (const std::string &pass : v.passes) {
      if (pass != "fwd")
        return makeSpecError(v.locOf("passes"),
                             llvm::formatv("pass '{0}' is not implemented yet: use [fwd]", pass));
      for (const std::string &arch : targets) {
        llvm::Expected<KernelPlan> base = basePlan(v, pass, arch);
        if (!base)
          return base.takeError();
        std::vector<KernelPlan> kernels = {*base};
        if (tuning && !v.tile) {
          auto it = tuning->find(workloadKey(*base));
          if (it != tuning->end()) {
            llvm::Expected<std::vector<KernelPlan>> tuned = tunedPlans(*base, it->second);
            if (!tuned)
              return tuned.takeError();
            kernels = std::move(*tuned);
          }
        }
        for (KernelPlan &p : kernels) {
          auto key = std::make_tuple(p.name, p.arch, p.seqlenMin);
          auto found = byKey.find(key);
          if (found != byKey.end()) {
            found->second.variant += "," + v.name;
            continue;
          }
          byKey.emplace(key, std::move(p));
        }
      }
    }
  }
  std::vector<KernelPlan> plans;
  for (auto &entry : byKey)
    plans.push_back(std::move(entry.second));
  return plans;
}

std::string formatPlans(const std::vector<KernelPlan> &plans) {
  std::string out;
  for (const KernelPlan &p : plans) {
    out += llvm::formatv("kernel {0}\n", p.name).str();
    out += llvm::formatv("  arch={0} template={1} pass={2} variant={3}\n", p.arch, p.templ, p.pass,
                         p.variant)
               .str();
    out += llvm::formatv("  dtype={0} head_dim_qk={1} head_dim_v={2} mask={3}\n", p.dtype,
                         p.headDimQK, p.headDimV, p.mask)
               .str();
    out += llvm::formatv("  block_m={0} block_n={1} warps={2} stages={3} threads={4} smem={5} "
                         "tuning={6}\n",
                         p.blockM, p.blockN, p.warps, p.stages, p.threads, p.smemBytes, p.tuning)
               .str();
    if (p.rescaleTau != 0 || p.exp2EmuPercent != 0)
      out += llvm::formatv("  rescale_tau={0} exp2_emu_percent={1} exp2_poly_degree={2}\n",
                           p.rescaleTau, p.exp2EmuPercent, p.exp2PolyDegree)
                 .str();
    if (p.seqlenMin != 0 || p.seqlenMax != (int64_t(1) << 40))
      out += llvm::formatv("  seqlen={0}..{1}\n", p.seqlenMin, p.seqlenMax).str();
  }
  return out;
}

} // namespace fagen
