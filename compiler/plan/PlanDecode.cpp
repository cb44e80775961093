//===- PlanDecode.cpp - the split-KV decode template's rules --------------===//
//
// templates/sm80/decode_config.cuh's static_asserts, mirrored, the variants the template serves
// and its default tiles. A decode kernel is a forward kernel (pass fwd, template sm80decode)
// that the runtime prefers for calls of at most qTokens query tokens per sequence.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/PlanRules.h"
#include "templates/abi/decode_params.h"
#include "templates/common/decode_split.h"
#include "templates/common/smem_layout.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

namespace fagen {

using namespace planner;

int sm80DecodeSmemBytes(int headDimQK, int headDimV, int blockM, int blockN, int stages,
                        int warps) {
  return sm80_decode_smem_bytes(paddedHeadDim(headDimQK), paddedHeadDim(headDimV), blockM, blockN,
                                stages, warps);
}

namespace planner {

const char *decodeServes() {
  return "masks none, causal and window in either alignment, score mods none and softcap; no "
         "alibi, dropout, block sparsity or varlen";
}

std::string decodeVariantProblem(const KernelPlan &p) {
  if (p.scoreMod == ScoreMod::Alibi)
    return "score_mod alibi";
  if (p.dropout)
    return "dropout";
  if (p.sparsity != Sparsity::None)
    return "block_sparse";
  if (p.varlen)
    return "varlen";
  return "";
}

std::string decodeConfigProblem(const KernelPlan &p) {
  if (p.qTokens < 1 || p.qTokens > FAGEN_DECODE_MAX_Q_TOKENS)
    return llvm::formatv("decode q_tokens must be in 1..{0}, got {1}", FAGEN_DECODE_MAX_Q_TOKENS,
                         p.qTokens);
  if (p.blockM != 16 && p.blockM != 32)
    return llvm::formatv("decode block_m must be 16 or 32, got {0}", p.blockM);
  if (p.warps != 2 && p.warps != 4 && p.warps != 8)
    return llvm::formatv("decode warps must be 2, 4 or 8, got {0}", p.warps);
  if (p.blockN % (16 * p.warps) != 0 || p.blockN > 256)
    return llvm::formatv("decode block_n must be a multiple of 16 x warps ({0}) up to 256, got {1}",
                         16 * p.warps, p.blockN);
  if (p.stages < 2 || p.stages > 8)
    return llvm::formatv("decode stages must be in 2..8, got {0}", p.stages);
  if (p.blockM / 16 * paddedHeadDim(p.headDimV) / 2 > 128)
    return llvm::formatv("decode block_m {0} at head_dim_v {1} needs more than 128 accumulator "
                         "registers a thread: block_m 32 needs head_dim_v <= 128",
                         p.blockM, p.headDimV);
  if (p.pageSize != 0 && !FAGEN_PAGE_SIZE_VALID(p.pageSize))
    return llvm::formatv("decode page_size must be a power of two in {0}..{1}, got {2}",
                         FAGEN_PAGE_SIZE_MIN, FAGEN_PAGE_SIZE_MAX, p.pageSize);
  if (p.pageSize != 0 && p.pageSize % p.blockN != 0 && p.blockN % p.pageSize != 0)
    return llvm::formatv("decode block_n {0} and page_size {1}: a key tile must lie in one page "
                         "or span whole pages",
                         p.blockN, p.pageSize);
  if (p.rescaleTau != 0 || p.exp2EmuPercent != 0)
    return "the decode template has no rescale_tau or exp2 emulation (both must be 0)";
  if (p.decodeCtasPerSm < 1 || p.decodeCtasPerSm > kDecodeMaxCtasPerSm ||
      p.decodeMinTiles < 1 || p.decodeMinTiles > kDecodeMaxMinTiles)
    return llvm::formatv("the decode split rule must aim at 1..{0} CTAs per SM with splits of at "
                         "least 1..{1} key tiles, got {2} and {3}",
                         kDecodeMaxCtasPerSm, kDecodeMaxMinTiles, p.decodeCtasPerSm,
                         p.decodeMinTiles);
  const int smem =
      sm80DecodeSmemBytes(p.headDimQK, p.headDimV, p.blockM, p.blockN, p.stages, p.warps);
  if (smem > archSmemLimit(p.arch))
    return llvm::formatv("decode tile {0}x{1} with {2} stages needs {3} bytes of shared memory; "
                         "{4} allows {5}",
                         p.blockM, p.blockN, p.stages, smem, p.arch, archSmemLimit(p.arch));
  return "";
}

/// Shared memory per SM (the CUDA C Programming Guide's compute capability table).
int archSmemPerSm(const std::string &arch) {
  if (arch == "sm_86" || arch == "sm_89")
    return 100 * 1024;
  if (arch == "sm_80")
    return 164 * 1024;
  return 228 * 1024; // sm_90, sm_90a, sm_100, sm_100a
}

/// The most K/V stages (2..8) for which two CTAs share an SM (each also costs 1 KB of reserved
/// shared memory), else 2: the deepest ring that keeps two CTAs per SM, so that grids of
/// several waves (large batches, no splits) have 2 x (stages - 1) tiles in flight an SM; split
/// grids take one CTA per SM (kDecodeCtasPerSm). Occupancy arithmetic, not measured: on sm_90
/// hd 64 gets 6 stages, hd 128 3, hd 256 2 (one CTA per SM).
int decodeStages(const KernelPlan &p) {
  const int budget = archSmemPerSm(p.arch) / 2 - 1024;
  int stages = 2;
  for (int s = 3; s <= 8; ++s)
    if (sm80DecodeSmemBytes(p.headDimQK, p.headDimV, p.blockM, p.blockN, s, p.warps) <= budget)
      stages = s;
  return stages;
}

llvm::Expected<KernelPlan> decodePlan(const VariantSpec &v, const std::string &arch) {
  const SourceLoc &at = v.locOf("passes.decode");
  if (!validHeadDim(v.headDimQK) || !validHeadDim(v.headDimV))
    return makeSpecError(v.locOf("head_dim"), "head_dim must be a multiple of 8 in 32..256");
  KernelPlan p;
  p.variant = v.name;
  p.arch = arch;
  p.templ = "sm80decode";
  static_cast<Variant &>(p) = v.kernelVariant(Pass::Forward);
  if (std::string what = decodeVariantProblem(p); !what.empty())
    return makeSpecError(at, "the decode kernel does not serve " + what + " (it serves " +
                                 decodeServes() + "): remove decode from passes, or " + what);
  p.qTokens = v.decode->qTokens;
  // Every warp holds all the tile's rows and a quarter of each key tile's 64 keys. 16 rows
  // hold the packed rows of most calls (GQA groups of up to 16 heads at one token); 32 halve
  // the row blocks that re-read K and V where a group's tokens need more (a spec's heads and
  // q_tokens say), and fit the registers up to head_dim_v 128.
  const int group = v.headsQ > 0 && v.headsKV > 0 ? v.headsQ / v.headsKV : 1;
  p.blockM = p.qTokens * group > 16 && paddedHeadDim(v.headDimV) <= 128 ? 32 : 16;
  p.blockN = 64;
  p.warps = 4;
  // Where two stages of 64 keys exceed the arch's shared memory (hd 256 on sm_86 / sm_89):
  // 32 keys on 2 warps.
  if (sm80DecodeSmemBytes(p.headDimQK, p.headDimV, p.blockM, p.blockN, 2, p.warps) >
      archSmemLimit(arch)) {
    p.blockN = 32;
    p.warps = 2;
  }
  p.stages = decodeStages(p);
  p.decodeCtasPerSm = kDecodeCtasPerSm;
  p.decodeMinTiles = kDecodeMinTilesPerSplit;
  p.tuning = "default";
  finalizePlan(p);
  if (std::string problem = decodeConfigProblem(p); !problem.empty())
    return makeSpecError(at, "no decode kernel of variant '" + v.name + "' fits " + arch + ": " +
                                 problem);
  return p;
}

llvm::Expected<KernelPlan> tunedDecodePlan(KernelPlan decode, const TuningTable &tuning) {
  auto it = tuning.find(workloadKey(decode));
  bool twin = false;
  if (it == tuning.end() && decode.isPaged()) {
    KernelPlan contiguous = decode;
    contiguous.pageSize = 0;
    it = tuning.find(workloadKey(contiguous));
    twin = true;
  }
  if (it == tuning.end() || it->second.empty())
    return decode;
  const TunedConfig &rule = it->second.front();
  KernelConfig c = configOf(decode);
  c.decodeCtasPerSm = rule.config.decodeCtasPerSm;
  c.decodeMinTiles = rule.config.decodeMinTiles;
  llvm::Expected<KernelPlan> tuned = applyConfig(decode, c);
  if (!tuned)
    return llvm::createStringError(std::errc::invalid_argument,
                                   "the split rule for %s (%s) cannot be built: %s: re-tune "
                                   "with this fagen",
                                   workloadKey(decode).c_str(), rule.provenance.c_str(),
                                   llvm::toString(tuned.takeError()).c_str());
  tuned->tuning = twin ? rule.provenance + " (the contiguous cache's kernel's)" : rule.provenance;
  return tuned;
}

} // namespace planner

} // namespace fagen
