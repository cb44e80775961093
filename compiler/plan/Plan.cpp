//===- Plan.cpp - KernelPlan: one kernel per variant x pass x arch --------===//

#include "compiler/plan/PlanRules.h"
#include "templates/abi/decode_params.h"
#include "templates/abi/tma_params.h"
#include "templates/common/decode_split.h"
#include "templates/common/ws_bwd_layout.h"
#include "templates/common/ws_registers.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/SHA256.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace fagen {

using namespace planner;

int archSmemLimit(const std::string &arch) {
  // Per-block opt-in maxima from the CUDA C Programming Guide's compute capability table.
  if (arch == "sm_86" || arch == "sm_89")
    return 99 * 1024;
  if (arch == "sm_80")
    return 163 * 1024;
  return 227 * 1024; // sm_90, sm_90a, sm_100, sm_100a
}

int paddedHeadDim(int headDim) {
  // Head dims are multiples of 8; the sm80 templates' MMAs (k16) and ldmatrix rows work in
  // multiples of 16, so they store and compute a head dim rounded up to 16 (the padding
  // columns are zero-filled). Every smem and register formula below goes through here.
  return (headDim + 15) / 16 * 16;
}

namespace planner {

bool isAmpere(const std::string &arch) {
  return arch == "sm_80" || arch == "sm_86" || arch == "sm_89";
}

/// Defaults for the portable template; the tuner replaces them per GPU. Measured on the H200
/// (sm_90 build, bf16, 2026-11-30, docs/perf/sm80-fwd.md): hd64 128x128 s2 and hd128 128x64 s2
/// reach 1.0x FlashAttention-2; for hd > 128, 64x64 with 4 warps (two CTAs per SM) beat
/// 128x64 with 8 warps by 8% (non-causal) and 17% (causal). On sm_80/86/89 (164/100 KB per SM)
/// one stage lets two CTAs share an SM: occupancy arithmetic, not measured (no A100 here).
/// `headDim` is the padded max(qk, v).
Tile defaultTile(int headDim, const std::string &arch) {
  bool ampere = isAmpere(arch);
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

/// Whether a forward variant adds work per logit (a window mask's bounds, a score mod,
/// dropout's keep bits), which costs registers beside the dense kernel's.
/// A variant spec or a plan (the same fields).
template <class VariantOrPlan> bool hasElementwiseWork(const VariantOrPlan &v) {
  return v.mask == Mask::Window || v.scoreMod != ScoreMod::None || v.dropout;
}

/// The fallback for such a variant when the dense default tile spills (the build tries the
/// dense tile first: KernelPlan::spillFallback, kSpillFallbackBytes). At the dense tiles nvcc
/// 13.0 spills hd 64 window masks (188 bytes on sm_90), hd 128 window and softcap (16), and on
/// sm_80 / sm_100a several hd 64 score mod and dropout kernels (16-204 bytes); 64 keys a tile
/// (hd <= 64) and 64 x 64 tiles on 4 warps (hd <= 128) spilled none with any feature (sm_80,
/// sm_90, sm_100a, 2026-11-30). Measured on the H200 (bf16, 2k-16k, docs/perf/sm80-fwd.md):
/// where the dense tile fits it is the fastest (hd 128 dropout, softcap, ALiBi: the 8-warp
/// tile planned before was 1.3-1.6x slower, 64 x 64 1.1-1.3x); hd 64 window on 64 keys matched
/// 128 keys.
Tile elementwiseVariantTile(Tile t, int headDim) {
  if (headDim <= 64)
    return {t.blockM, 64, t.warps, t.stages};
  if (headDim <= 128 && t.blockM == 128)
    return {64, 64, 4, t.stages};
  return t;
}

/// The backward's default tile made to fit a score mod's registers (its dlogit per element):
/// with 8 warps they spilled 40 bytes at hd 64 (128x128) and 156 at hd 128 (64x128); 64 query
/// rows at hd 64 and 64 keys at hd 128 spilled none (nvcc 13.0, sm_90, 2026-11-30; speed not
/// measured). Window masks and dropout did not spill at the dense tiles.
Tile scoreModBwdTile(Tile t, int headDim) {
  if (headDim <= 64)
    return {64, t.blockN, t.warps, t.stages};
  if (headDim <= 128)
    return {t.blockM, 64, t.warps, t.stages};
  return t;
}

/// The backward template's defaults per head dim (the padded max(qk, v)), in one table.
/// Measured on the H200 (sm_90 build, bf16, 2k-16k, 2026-11-30, docs/perf/sm80-bwd.md): other
/// tile shapes were slower or within noise; hd 256 with one stage is 3-4% slower. Archs with
/// less shared memory (Ampere) drop to one stage in fitSmem (not run there).
struct BwdDefault {
  int maxHeadDim;
  Tile tile;
};
constexpr BwdDefault kBwdDefaults[] = {
    {64, {128, 128, 8, 2}},
    {128, {64, 128, 8, 2}},
    {256, {64, 64, 8, 2}},
};
/// Threads of the backward's _pre and _post kernels: BwdConfig::kPrePostThreads.
constexpr int kBwdPrePostThreads = 256;

/// Whether backward plans for sm_90a take the sm90ws template where it serves the variant
/// (else the portable one).
constexpr bool kSm90WsBackwardDefault = true;

Tile defaultBwdTile(int headDim) {
  for (const BwdDefault &d : kBwdDefaults)
    if (headDim <= d.maxHeadDim)
      return d.tile;
  return std::end(kBwdDefaults)[-1].tile;
}

/// FlashAttention-4's conditional-rescaling threshold by default, measured on the H200 (sm_90
/// build, bf16, 2026-11-30, docs/perf/sm80-fwd.md): tau 8 is +2-7% at hd 128; at hd 64
/// always rescaling (-1, branch-free) is +1-3% causal and neutral to -4% non-causal. On
/// Ampere-class archs hd 64 keeps the exact skip (0): tau -1 was not run there.
int defaultRescaleTau(int headDim, bool causal, const std::string &arch) {
  if (headDim <= 64)
    return causal && !isAmpere(arch) ? -1 : 0;
  if (headDim <= 128)
    return 8;
  return 0;
}

/// Shared memory of `t` for pass `pass`.
int smemBytesOf(Pass pass, const Tile &t, int headDimQK, int headDimV, bool varlen) {
  return pass == Pass::Backward
             ? sm80BwdSmemBytes(headDimQK, headDimV, t.blockM, t.blockN, t.stages, varlen)
             : sm80FwdSmemBytes(headDimQK, headDimV, t.blockM, t.blockN, t.stages);
}

/// Shrinks a default tile until it fits the arch's shared memory: stages, then block_n down to
/// 32, then (backward) block_m down to 32 with at most 4 warps.
Tile fitSmem(Tile t, Pass pass, int headDimQK, int headDimV, bool varlen, const std::string &arch) {
  while (smemBytesOf(pass, t, headDimQK, headDimV, varlen) > archSmemLimit(arch)) {
    if (t.stages > 1) {
      --t.stages;
    } else if (t.blockN > 32) {
      t.blockN /= 2;
    } else if (pass == Pass::Backward && t.blockM > 32) {
      t.blockM /= 2;
      t.warps = std::min(t.warps, 4);
    } else {
      break;
    }
  }
  return t;
}

/// Halves block_m and block_n until they divide the sparse block (a multiple of 64); a
/// halved block_m keeps at least 16 rows per warp.
Tile fitSparseBlock(Tile t, int block) {
  if (block == 0)
    return t;
  while (block % t.blockN != 0)
    t.blockN /= 2;
  if (block % t.blockM == 0)
    return t;
  while (block % t.blockM != 0)
    t.blockM /= 2;
  t.warps = std::min(t.warps, t.blockM / 16);
  return t;
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

/// Tiles must divide the block of a block mask or layout (variants.cuh static_asserts it).
std::string sparseBlockProblem(const KernelPlan &p) {
  if (p.sparsity == Sparsity::None ||
      (p.sparseBlock % p.blockM == 0 && p.sparseBlock % p.blockN == 0))
    return "";
  return llvm::formatv("block_m ({0}) and block_n ({1}) must divide block_sparse.block ({2})",
                       p.blockM, p.blockN, p.sparseBlock);
}

bool validHeadDim(int headDim) { return headDim % 8 == 0 && headDim >= 32 && headDim <= 256; }

/// Mirrors the static_asserts of a paged forward (chunked prefill) of templates/sm80/fwd_config.cuh
/// and, for sm90ws, of templates/sm90/fwd_config.cuh (WsFwdConfig), whose gather reads a page id
/// per row and so takes any key tile.
std::string pagedForwardProblem(const KernelPlan &p) {
  if (p.templ != "sm80" && p.templ != "sm90ws")
    return "a paged KV cache is read by the sm80 and sm90ws forward templates (sm90 loads "
           "contiguous K/V tiles): use template: sm80 or sm90ws";
  if (!p.varlen || p.dropout || p.sparsity != Sparsity::None || p.scoreMod != ScoreMod::None)
    return "a paged forward is varlen, without dropout, block sparsity or a score mod";
  if (p.templ == "sm90ws" && p.tileCounter)
    return "a paged sm90ws forward takes no tile counter";
  if (p.templ == "sm90ws" && p.blockM != 128)
    return llvm::formatv("block_m {0}: a paged sm90ws forward takes 128-row tiles (2 consumer "
                         "warpgroups, whose register split its producer's page walk needs; "
                         "common/ws_registers.h)",
                         p.blockM);
  if (p.templ == "sm90ws")
    return "";
  if (p.pageSize % p.blockN != 0 && p.blockN % p.pageSize != 0)
    return llvm::formatv("block_n {0} and page_size {1}: a key tile must lie in one page or "
                         "span whole pages",
                         p.blockN, p.pageSize);
  return "";
}

} // namespace planner

BlockTable blockTable(const BlockSparseSpec &sparse) {
  BlockTable t;
  t.block = sparse.block;
  if (sparse.layout == "file") {
    t.rows = int(sparse.fileRows.size());
    t.cols = t.rows ? int(sparse.fileRows.front().size()) : 0;
    for (const std::vector<uint8_t> &row : sparse.fileRows)
      t.table.insert(t.table.end(), row.begin(), row.end());
  } else {
    t.rows = t.cols = sparse.block ? (sparse.maxSeqlen + sparse.block - 1) / sparse.block : 0;
    for (int r = 0; r < t.rows; ++r)
      for (int c = 0; c < t.cols; ++c) {
        int distance = std::abs(r - c);
        bool visible = distance < sparse.local;
        if (sparse.layout == "local_global")
          visible |= r < sparse.global || c < sparse.global;
        if (sparse.layout == "strided")
          visible |= distance % sparse.stride == 0;
        t.table.push_back(visible);
      }
  }
  llvm::SHA256 hash;
  hash.update(llvm::formatv("fagen-block-table-1 {0} {1} {2}\n", t.block, t.rows, t.cols).str());
  hash.update(llvm::ArrayRef<uint8_t>(t.table));
  std::array<uint8_t, 32> digest = hash.final();
  t.hash = llvm::toHex(llvm::ArrayRef<uint8_t>(digest).take_front(4), /*LowerCase=*/true);
  return t;
}

llvm::Error checkKernelPlan(const KernelPlan &p) {
  std::string problem;
  if (!validHeadDim(p.headDimQK) || !validHeadDim(p.headDimV))
    problem = llvm::formatv("head dims {0}/{1} are not multiples of 8 in 32..256", p.headDimQK,
                            p.headDimV);
  if (problem.empty() && p.pass == Pass::Backward)
    problem = p.templ == "sm80"     ? sm80BwdConfigProblem(p)
              : p.templ == "sm90ws" ? sm90WsBwdConfigProblem(p)
                                    : "the backward pass has the sm80 and sm90ws templates";
  else if (problem.empty() && isDecodePlan(p))
    problem = decodeConfigProblem(p);
  else if (problem.empty())
    problem = p.templ == "sm90" || p.templ == "sm90ws"
                  ? sm90ConfigProblem(p, /*ws=*/p.templ == "sm90ws")
                  : sm80ConfigProblem({p.blockM, p.blockN, p.warps, p.stages}, p.headDimQK,
                                      p.headDimV, p.arch);
  if (problem.empty())
    problem = fa4ParamsProblem(p.rescaleTau, p.exp2EmuPercent, p.exp2PolyDegree);
  if (problem.empty() && p.stagedEpilogue && p.templ != "sm90ws")
    problem = "staged_epilogue is an option of the sm90ws template: use template: sm90ws";
  if (problem.empty() && p.rotateQueryWalk && !(p.templ == "sm90ws" && p.pass == Pass::Backward))
    problem = "the rotated query walk is an option of the sm90ws backward template";
  if (problem.empty() && p.dqWriter && !(p.templ == "sm90ws" && p.pass == Pass::Backward))
    problem = "the dQ writer is an option of the sm90ws backward template";
  if (problem.empty() && !isDecodePlan(p) && (p.decodeCtasPerSm != 0 || p.decodeMinTiles != 0))
    problem = "the split rule is a parameter of the decode template (sm80decode)";
  if (problem.empty())
    problem = sparseBlockProblem(p);
  if (problem.empty() && p.isPaged() && !isDecodePlan(p))
    problem = pagedForwardProblem(p);
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
  if (stagedEpilogue)
    s += " staged";
  if (rotateQueryWalk)
    s += " rotq";
  if (dqWriter.value_or(false))
    s += " dqw";
  if (decodeCtasPerSm != 0 || decodeMinTiles != 0)
    s += llvm::formatv(" split{0}x{1}", decodeCtasPerSm, decodeMinTiles).str();
  return s;
}

static auto configTie(const KernelConfig &c) {
  return std::tie(c.blockM, c.blockN, c.warps, c.stages, c.rescaleTau, c.exp2EmuPercent,
                  c.exp2PolyDegree, c.stagedEpilogue, c.rotateQueryWalk, c.dqWriter,
                  c.decodeCtasPerSm, c.decodeMinTiles);
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
  c.stagedEpilogue = p.stagedEpilogue;
  c.rotateQueryWalk = p.rotateQueryWalk;
  if (p.pass == Pass::Backward && p.templ == "sm90ws")
    c.dqWriter = p.dqWriter;
  c.decodeCtasPerSm = p.decodeCtasPerSm;
  c.decodeMinTiles = p.decodeMinTiles;
  return c;
}

llvm::Expected<KernelPlan> applyConfig(const KernelPlan &base, const KernelConfig &c) {
  KernelPlan p = base;
  p.spillFallback.reset();
  p.blockM = c.blockM;
  p.blockN = c.blockN;
  p.warps = c.warps;
  p.stages = c.stages;
  p.rescaleTau = c.rescaleTau;
  p.exp2EmuPercent = c.exp2EmuPercent;
  p.exp2PolyDegree = c.exp2PolyDegree;
  p.stagedEpilogue = c.stagedEpilogue;
  p.rotateQueryWalk = c.rotateQueryWalk;
  p.dqWriter = c.dqWriter.value_or(base.dqWriter);
  p.decodeCtasPerSm = c.decodeCtasPerSm;
  p.decodeMinTiles = c.decodeMinTiles;
  finalizePlan(p);
  if (llvm::Error err = checkKernelPlan(p))
    return err;
  return p;
}

void finalizePlan(KernelPlan &p) {
  if (p.exp2EmuPercent == 0)
    p.exp2PolyDegree = 3; // no polynomial: one kernel, whatever the degree says
  p.threads = 32 * p.warps + (p.templ == "sm90ws" ? 128 : 0); // + the producer warpgroup
  // sm90ws grids (H200, bf16, docs/perf/sm90-fwd.md): persistent where every work tile costs
  // the same (no causal mask, no window, no varlen, no sparsity) and at hd 64: the next tile's
  // Q and K then load while the consumers finish the current one. Measured persistent over one
  // CTA per tile, with an earlier L2 order of the even tiles (since replaced; this comparison
  // was not repeated): hd 128 +0-5 % (2k-16k), hd 64 +8 %, hd 256 within 1 %. Uneven tiles
  // keep one CTA per work tile, heaviest first, so that the hardware hands the next tile to
  // whichever SM frees up: the static deal measured 11 % slower at hd 128 causal and 23-28 % at
  // hd 256 causal (hd 64 causal gains, +17 % at 2k).
  const bool evenTiles = p.mask == Mask::None && !p.varlen && p.sparsity == Sparsity::None;
  p.persistent = p.templ == "sm90ws" && p.pass == Pass::Forward &&
                 (evenTiles || (p.headDimQK == 64 && p.headDimV == 64));
  // Uneven tiles can also take them from a counter in the caller's forward workspace: one CTA
  // per SM, the next tile (heaviest first) to whichever frees up (H200, docs/perf/sm90-fwd.md).
  // Not the block-sparse kernels: their producer's walk over the layout then spills (24-52
  // bytes, nvcc 13.0).
  // Not a paged kernel's: its whole producer warpgroup walks the tiles (sm90/ws_producer.cuh),
  // which the counter's ring does not serve.
  p.tileCounter = p.templ == "sm90ws" && p.pass == Pass::Forward && !evenTiles &&
                  p.sparsity == Sparsity::None && !p.isPaged();
  // O through shared memory and a TMA store per warpgroup, which runs while the warpgroup starts
  // its next tile (H200, docs/perf/sm90-fwd.md: the epilogue 3000 -> 1370 cycles a tile at
  // hd 128). Head dims 128 and 64 (hd 64's main-loop step first measured 7 % slower with it;
  // since the softmax's rework the step is the same, and an A/B on the H200 gave +1.4 % at
  // 2k-4k, +3-6 % at 512-1k, 0-1 % at 8k-16k); hd 256 has no room for the O
  // tile, hd 96 / 192 and unequal head dims were not measured. Not varlen (a tile's rows past
  // its sequence would land in the next) nor with the staged epilogue (O through the Q tile).
  p.tmaStoreO = p.templ == "sm90ws" && p.pass == Pass::Forward && p.headDimQK == p.headDimV &&
                (p.headDimV == 128 || p.headDimV == 64) && !p.varlen && !p.stagedEpilogue &&
                sm90WsFwdSmemBytes(p.headDimQK, p.headDimV, p.blockM, p.blockN, p.stages,
                                   p.tileCounter, true) <= archSmemLimit(p.arch);
  if (p.pass == Pass::Backward && p.templ == "sm90ws")
    p.smemBytes = sm90WsBwdSmemBytes(p.headDimQK, p.blockM, p.blockN, p.stages);
  else if (p.pass == Pass::Backward)
    p.smemBytes =
        sm80BwdSmemBytes(p.headDimQK, p.headDimV, p.blockM, p.blockN, p.stages, p.varlen);
  else if (p.templ == "sm90")
    p.smemBytes = sm90FwdSmemBytes(p.headDimQK, p.blockM, p.blockN, p.stages);
  else if (p.templ == "sm90ws")
    p.smemBytes = sm90WsFwdSmemBytes(p.headDimQK, p.headDimV, p.blockM, p.blockN, p.stages,
                                     p.tileCounter, p.tmaStoreO);
  else if (isDecodePlan(p))
    p.smemBytes =
        sm80DecodeSmemBytes(p.headDimQK, p.headDimV, p.blockM, p.blockN, p.stages, p.warps);
  else
    p.smemBytes = sm80FwdSmemBytes(p.headDimQK, p.headDimV, p.blockM, p.blockN, p.stages);
  p.prePostThreads = p.pass == Pass::Backward ? kBwdPrePostThreads
                     : isDecodePlan(p)        ? FAGEN_MERGE_THREADS
                                              : 0;
  p.name = kernelName(p);
}

static constexpr const char *kDecodeKeyTag = " decode "; ///< a decode key's, before the arch

std::string workloadKey(const KernelPlan &p) {
  return p.key() + (isDecodePlan(p) ? kDecodeKeyTag : " ") + p.arch;
}
bool isDecodeWorkload(const std::string &key) { return key.find(kDecodeKeyTag) != std::string::npos; }

namespace planner {

/// A spec's tile: pins the template and any of its parameters; the rest stay the planner's.
llvm::Expected<KernelPlan> pinnedPlan(KernelPlan p, const TileOverride &tile) {
  // The default tile's spill fallback stays only where the spec pins no tile dimension.
  const bool dimsPinned = tile.blockM || tile.blockN || tile.warps || tile.stages;
  if (dimsPinned)
    p.spillFallback.reset();
  if (tile.templ == "sm90" || tile.templ == "sm90ws") {
    if (p.arch != "sm_90a")
      return makeSpecError(tile.loc, "template " + tile.templ + " needs the sm_90a target, not " +
                                         p.arch + ": list only sm_90a in this variant's targets");
    const bool ws = tile.templ == "sm90ws";
    std::string variant = sm90VariantProblem(p, ws);
    if (!variant.empty())
      return makeSpecError(tile.loc, "template " + tile.templ + " does not serve " + variant +
                                         " (" + sm90Serves(ws) + "): remove template: " +
                                         tile.templ);
    p = sm90Plan(p, ws);
  }
  if (tile.blockM) p.blockM = tile.blockM;
  if (tile.blockN) p.blockN = tile.blockN;
  if (tile.stages) p.stages = tile.stages;
  if (tile.warps)
    p.warps = tile.warps;
  else if (p.templ == "sm90" || p.templ == "sm90ws")
    p.warps = p.blockM / 16;
  if (tile.rescaleTau) p.rescaleTau = *tile.rescaleTau;
  if (tile.exp2EmuPercent) p.exp2EmuPercent = *tile.exp2EmuPercent;
  if (tile.exp2PolyDegree) p.exp2PolyDegree = *tile.exp2PolyDegree;
  if (tile.stagedEpilogue) p.stagedEpilogue = *tile.stagedEpilogue;
  p.tuning = "spec";
  finalizePlan(p);
  // The default tile's fallback, on the pinned parameters (the dimensions are the planner's).
  if (p.spillFallback) {
    KernelConfig pinned = configOf(p);
    pinned.blockM = p.spillFallback->blockM;
    pinned.blockN = p.spillFallback->blockN;
    pinned.warps = p.spillFallback->warps;
    pinned.stages = p.spillFallback->stages;
    p.spillFallback = pinned;
  } else if (p.templ == "sm90ws" && !dimsPinned && hasElementwiseWork(p)) {
    p.spillFallback = sm90WsElementwiseFallback(p);
  }
  if (llvm::Error err = checkKernelPlan(p)) {
    std::string message = llvm::toString(std::move(err));
    return makeSpecError(tile.loc, message.substr(message.find(": ") + 2));
  }
  return p;
}

llvm::Expected<KernelPlan> basePlan(const VariantSpec &v, Pass pass, const std::string &arch) {
  if (!validHeadDim(v.headDimQK) || !validHeadDim(v.headDimV))
    return makeSpecError(v.locOf("head_dim"), "head_dim must be a multiple of 8 in 32..256");
  KernelPlan p;
  p.variant = v.name;
  p.pass = pass;
  p.arch = arch;
  p.templ = "sm80";
  static_cast<Variant &>(p) = v.kernelVariant(pass);
  if (p.sparsity == Sparsity::Static) {
    BlockTable table = blockTable(*v.blockSparse);
    p.sparseRows = table.rows;
    p.sparseCols = table.cols;
    p.sparseTable = std::move(table.table);
    p.sparseHash = table.hash;
  }
  int headDim = paddedHeadDim(std::max(v.headDimQK, v.headDimV));
  Tile t = pass == Pass::Backward ? defaultBwdTile(headDim) : defaultTile(headDim, arch);
  std::optional<Tile> fallback;
  if (pass == Pass::Forward && hasElementwiseWork(v))
    fallback = fitSmem(fitSparseBlock(elementwiseVariantTile(t, headDim), p.sparseBlock), pass,
                       v.headDimQK, v.headDimV, v.varlen, arch);
  if (pass == Pass::Backward && v.scoreMod != ScoreMod::None)
    t = scoreModBwdTile(t, headDim);
  t = fitSmem(fitSparseBlock(t, p.sparseBlock), pass, v.headDimQK, v.headDimV, v.varlen, arch);
  // Head dims whose padded width is an odd multiple of 16 (48, 80, ...) do not split over
  // 8 warps: fewer warps, and a narrower key tile so that each warp's share stays in registers
  // (hd 72 at 64x128 with 4 warps spilled 1264 bytes, at 64x64 none, nvcc 13.0, sm_90; so do
  // 40-136). Padded 176, 208 and 240 still spill with 4 warps (hd 168: 200 bytes, 200: 1280,
  // 232: 3572); 8 warps there need a 128-row tile that does not fit shared memory.
  while (pass == Pass::Backward && t.warps > 1 &&
         !bwdWarpSplitProblem(t, v.headDimQK, v.headDimV).empty()) {
    t.warps /= 2;
    t.blockN = std::min(t.blockN, 64);
  }
  p.blockM = t.blockM;
  p.blockN = t.blockN;
  p.warps = t.warps;
  p.stages = t.stages;
  p.rescaleTau =
      pass == Pass::Backward ? 0 : defaultRescaleTau(headDim, v.mask == Mask::Causal, arch);
  p.tuning = "default";
  finalizePlan(p);
  if (fallback && (fallback->blockM != t.blockM || fallback->blockN != t.blockN ||
                   fallback->warps != t.warps || fallback->stages != t.stages)) {
    KernelConfig c = configOf(p);
    c.blockM = fallback->blockM;
    c.blockN = fallback->blockN;
    c.warps = fallback->warps;
    c.stages = fallback->stages;
    llvm::Expected<KernelPlan> second = applyConfig(p, c);
    if (second)
      p.spillFallback = c;
    else
      llvm::consumeError(second.takeError());
  }
  // A pinned tile keeps the portable template unless it names another one; it pins the
  // forward kernel only.
  if (v.tile && pass == Pass::Forward)
    return pinnedPlan(p, *v.tile);
  // sm90ws where it serves the variant and one of its tiles fits (a 192-token sparse block at
  // hd 192/256 needs 192-row tiles whose S + O + P exceed the registers: portable then).
  if (pass == Pass::Forward && arch == "sm_90a" && sm90ServesVariant(p)) {
    KernelPlan ws = sm90Plan(p, /*ws=*/true);
    llvm::Error err = checkKernelPlan(ws);
    if (!err) {
      if (hasElementwiseWork(v))
        ws.spillFallback = sm90WsElementwiseFallback(ws);
      return ws;
    }
    llvm::consumeError(std::move(err));
  }
  // The sm90ws backward where it serves the variant (H100, docs/perf/sm90-bwd.md).
  if (pass == Pass::Backward && arch == "sm_90a" && kSm90WsBackwardDefault &&
      sm90WsBwdVariantProblem(p).empty()) {
    KernelPlan ws = sm90WsBwdPlan(p);
    llvm::Error err = checkKernelPlan(ws);
    if (!err)
      return ws;
    llvm::consumeError(std::move(err));
  }
  if (llvm::Error err = checkKernelPlan(p)) {
    std::string message = llvm::toString(std::move(err));
    return makeSpecError(v.loc, "no default " + std::string(toText(pass)) + " kernel of variant '" +
                                    v.name + "' fits " + arch + ": " +
                                    message.substr(message.find(": ") + 2));
  }
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
          "the config for %s, seqlen %lld..%lld (%s) cannot be built: %s: re-tune with this "
          "fagen",
          workloadKey(base).c_str(), (long long)c.seqlenMin, (long long)c.seqlenMax,
          c.provenance.c_str(),
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

} // namespace planner

llvm::Expected<std::vector<KernelPlan>> planKernels(const AttentionSpec &spec,
                                                    const std::vector<std::string> &archs,
                                                    const TuningTable *tuning,
                                                    bool builtinBuckets) {
  std::map<std::tuple<std::string, std::string, int64_t>, KernelPlan> byKey;
  for (const VariantSpec &v : spec.variants) {
    std::vector<std::string> targets = !archs.empty() ? archs
                                       : !v.targets.empty() ? v.targets
                                                            : spec.targets;
    if (targets.empty())
      return makeSpecError(v.loc, llvm::formatv("variant '{0}' has no target archs: add "
                                                "'targets: [sm_90a]' to the spec or pass --arch",
                                                v.name));
    if (v.decode)
      for (const std::string &arch : targets) {
        llvm::Expected<KernelPlan> decode = decodePlan(v, arch);
        if (!decode)
          return decode.takeError();
        if (tuning)
          decode = planner::tunedDecodePlan(std::move(*decode), *tuning);
        if (!decode)
          return decode.takeError();
        auto [found, inserted] =
            byKey.try_emplace(std::make_tuple(decode->name, decode->arch, decode->seqlenMin),
                              *decode);
        if (!inserted) { // one kernel for every variant that plans it: the most tokens
          found->second.variant += "," + v.name;
          found->second.qTokens = std::max(found->second.qTokens, decode->qTokens);
        }
      }
    for (Pass pass : v.passes) {
      for (const std::string &arch : targets) {
        llvm::Expected<KernelPlan> base = basePlan(v, pass, arch);
        if (!base)
          return base.takeError();
        std::vector<KernelPlan> kernels = {*base};
        const std::vector<TunedConfig> *configs = nullptr;
        std::vector<TunedConfig> builtin =
            builtinBuckets ? builtinSeqlenConfigs(*base) : std::vector<TunedConfig>();
        if (!builtin.empty())
          configs = &builtin;
        if (tuning && !(v.tile && pass == Pass::Forward)) {
          auto it = tuning->find(workloadKey(*base));
          if (it != tuning->end())
            configs = &it->second;
        }
        if (configs) {
          llvm::Expected<std::vector<KernelPlan>> tuned = tunedPlans(*base, *configs);
          if (!tuned)
            return tuned.takeError();
          kernels = std::move(*tuned);
        }
        for (KernelPlan &p : kernels) {
          auto key = std::make_tuple(p.name, p.arch, p.seqlenMin);
          auto found = byKey.find(key);
          if (found != byKey.end()) {
            found->second.variant += "," + v.name;
            // A kernel that another variant pins, or whose fallback differs, is built as
            // planned: the fallback must not swap a pinned kernel, whatever the variant order.
            if (found->second.spillFallback != p.spillFallback)
              found->second.spillFallback.reset();
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

std::string seqlenRangeText(int64_t min, int64_t max) {
  if (max >= (int64_t(1) << 40))
    return min <= 1 ? "any" : std::to_string(min) + " and longer";
  if (min <= 1)
    return "up to " + std::to_string(max);
  return std::to_string(min) + " to " + std::to_string(max);
}

std::string formatPlans(const std::vector<KernelPlan> &plans) {
  std::string out;
  for (const KernelPlan &p : plans) {
    out += llvm::formatv("kernel {0}\n", p.name).str();
    out += llvm::formatv("  arch={0} template={1} pass={2} variant={3}\n", p.arch, p.templ,
                         toText(p.pass), p.variant)
               .str();
    out += llvm::formatv("  dtype={0} head_dim_qk={1} head_dim_v={2} mask={3}\n", toText(p.dtype),
                         p.headDimQK, p.headDimV, toText(p.mask))
               .str();
    out += llvm::formatv("  mask_align={0} score_mod={1} dropout={2} varlen={3} sparsity={4}",
                         toText(p.maskAlign), toText(p.scoreMod), p.dropout ? "true" : "false",
                         p.varlen ? "true" : "false", toText(p.sparsity))
               .str();
    if (p.sparsity != Sparsity::None)
      out += llvm::formatv(" sparse_block={0}", p.sparseBlock).str();
    if (p.sparsity == Sparsity::Static)
      out += llvm::formatv(" sparse_table={0}x{1} sparse_hash={2}", p.sparseRows, p.sparseCols,
                           p.sparseHash)
                 .str();
    out += "\n";
    if (p.pass == Pass::Backward) {
      // sm90ws at hd 256: dO's ring is shorter than Q's (ws_bwd_do_stages).
      const int doStages = p.templ == "sm90ws" ? ws_bwd_do_stages(ws_bwd_dim(p.headDimQK), p.stages)
                                               : p.stages;
      out += llvm::formatv("  deterministic={0} pre_post_threads={1}{2}\n",
                           p.deterministic ? "true" : "false", p.prePostThreads,
                           std::string(p.rotateQueryWalk ? " rotate_query_walk=true" : "") +
                               (p.dqWriter ? " dq_writer=true" : "") +
                               (doStages != p.stages ? " do_stages=" + std::to_string(doStages)
                                                     : ""))
                 .str();
    }
    out += llvm::formatv("  block_m={0} block_n={1} warps={2} stages={3} threads={4} smem={5} "
                         "tuning={6}{7}{8}{9}\n",
                         p.blockM, p.blockN, p.warps, p.stages, p.threads, p.smemBytes, p.tuning,
                         p.persistent ? " persistent" : "", p.tileCounter ? " tile_counter" : "",
                         p.tmaStoreO ? " tma_store_o" : "")
               .str();
    if (p.rescaleTau != 0 || p.exp2EmuPercent != 0)
      out += llvm::formatv("  rescale_tau={0} exp2_emu_percent={1} exp2_poly_degree={2}\n",
                           p.rescaleTau, p.exp2EmuPercent, p.exp2PolyDegree)
                 .str();
    if (p.stagedEpilogue)
      out += "  staged_epilogue=true\n";
    if (isDecodePlan(p))
      out += llvm::formatv("  decode: split-KV, up to q_tokens={0} query tokens per sequence; "
                           "combine and merge threads={1}{2}\n",
                           p.qTokens, p.prePostThreads,
                           p.isPaged() ? "; paged KV cache, page_size=" +
                                             std::to_string(p.pageSize)
                                       : "")
                 .str();
    else if (p.isPaged())
      out += llvm::formatv("  paged KV cache, page_size={0}: chunked prefill{1}\n", p.pageSize,
                           p.templ != "sm90ws" ? ""
                           : FAGEN_PAGED_TMA_BOX_ROWS(p.pageSize, p.blockN) != 0
                               ? llvm::formatv(" (K and V by TMA in boxes of {0} rows a page "
                                               "run, V's last run gathered; Q by TMA)",
                                               FAGEN_PAGED_TMA_BOX_ROWS(p.pageSize, p.blockN))
                                     .str()
                               : std::string(" (K and V gathered by the producer warpgroup "
                                             "with cp.async; Q by TMA)"))
                 .str();
    if (p.spillFallback)
      out += llvm::formatv("  spill_fallback={0} (built instead if ptxas reports over {1} spill "
                           "bytes)\n",
                           p.spillFallback->text(), spillFallbackBytes(p.templ))
                 .str();
    if (p.seqlenMin != 0 || p.seqlenMax != (int64_t(1) << 40))
      out += "  seqlen: " + seqlenRangeText(p.seqlenMin, p.seqlenMax) + "\n";
  }
  return out;
}

} // namespace fagen
