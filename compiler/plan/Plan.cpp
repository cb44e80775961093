//===- Plan.cpp - KernelPlan: one kernel per variant x pass x arch --------===//

#include "compiler/plan/Plan.h"
#include "templates/common/ws_registers.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/SHA256.h"

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

int paddedHeadDim(int headDim) {
  // Head dims are multiples of 8; the sm80 templates' MMAs (k16) and ldmatrix rows work in
  // multiples of 16, so they store and compute a head dim rounded up to 16 (the padding
  // columns are zero-filled). Every smem and register formula below goes through here.
  return (headDim + 15) / 16 * 16;
}

/// A portable template's shared-memory row of `headDim` 2-byte elements
/// (templates/sm80/tile_ops.cuh's SmemRow): head dims that are multiples of 64, from
/// `swizzleFrom` on, unpadded (their 128-byte lines swizzled), others padded by 16 bytes so
/// that ldmatrix is bank-conflict free. The forward swizzles from 192, the backward from 64
/// (from 192 with varlen; BwdConfig::kSwizzleFrom).
static int sm80SmemRowBytes(int headDim, int swizzleFrom) {
  int padded = paddedHeadDim(headDim);
  return padded % 64 == 0 && padded >= swizzleFrom ? padded * 2 : padded * 2 + 16;
}
static constexpr int kSm80FwdSwizzleFrom = 192;
static int sm80BwdSwizzleFrom(bool varlen) { return varlen ? 192 : 64; }

int sm80FwdSmemBytes(int headDimQK, int headDimV, int blockM, int blockN, int stages) {
  // Q tile + kStages x (K tile + V tile). The O epilogue reuses the Q tile, whose rows are
  // therefore as wide as the wider of the two. Mirrors templates/sm80/fwd_config.cuh (the
  // emitted code static_asserts that they agree).
  int qkRow = sm80SmemRowBytes(headDimQK, kSm80FwdSwizzleFrom);
  int vRow = sm80SmemRowBytes(headDimV, kSm80FwdSwizzleFrom);
  return blockM * std::max(qkRow, vRow) + stages * blockN * (qkRow + vRow);
}

int sm80BwdSmemBytes(int headDimQK, int headDimV, int blockM, int blockN, int stages,
                     bool varlen) {
  // K and V tiles, kStages x (Q + dO tiles), and P and dS tiles in the input dtype; P and dS
  // rows padded by 16 bytes. Mirrors templates/sm80/bwd_config.cuh's BwdConfig::kSmemBytes
  // (the emitted code static_asserts that they agree).
  int qkRow = sm80SmemRowBytes(headDimQK, sm80BwdSwizzleFrom(varlen));
  int vRow = sm80SmemRowBytes(headDimV, sm80BwdSwizzleFrom(varlen));
  int pRow = blockN * 2 + 16;
  return blockN * (qkRow + vRow) + stages * blockM * (qkRow + vRow) + 2 * blockM * pRow;
}

int sm90FwdSmemBytes(int headDim, int blockM, int blockN, int stages) {
  // Q + kStages x (K + V), 128-byte swizzled, plus 1024 bytes to align the base to a swizzle
  // atom. Mirrors templates/sm90/fwd_config.cuh.
  return (blockM + 2 * stages * blockN) * headDim * 2 + 1024;
}

int sm90WsPaddedHeadDim(int headDim) { return (headDim + 63) / 64 * 64; }

int sm90WsFwdSmemBytes(int headDimQK, int headDimV, int blockM, int blockN, int stages,
                       bool tileCounter, bool tmaStoreO) {
  // Q + kStages x (K + V) at head dims padded to 64-column swizzle blocks (+ the O tile with a
  // TMA store of O), 1024 bytes to align the base, then the mbarriers: Q full, Q empty, and K
  // full, V full, K empty, V empty per stage; with a tile counter, the tile ring's four
  // mbarriers and two entries. Mirrors templates/sm90/fwd_config.cuh's WsFwdConfig.
  int qk = sm90WsPaddedHeadDim(headDimQK), v = sm90WsPaddedHeadDim(headDimV);
  return (blockM * qk + stages * blockN * (qk + v) + (tmaStoreO ? blockM * v : 0)) * 2 + 1024 +
         8 * (2 + 4 * stages) + (tileCounter ? 8 * 4 + 16 * 2 : 0);
}

namespace {

struct Tile {
  int blockM, blockN, warps, stages;
};

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
  return v.mask == "window" || v.scoreMod != "none" || v.dropout;
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

/// The sm90ws fallback for a variant with per-logit work, when its default tile spills: 128
/// query rows (2 consumer warpgroups of 240 registers) instead of 192 (3 of 160), else 64 keys
/// a tile. nvcc 13.0 spilled hd 64 softcap (192 x 128: 32-88 bytes) and hd 256 ALiBi
/// (128 x 80: 104-120 bytes); 128 x 128 and 128 x 64 spilled none (2026-11-30).
std::optional<KernelConfig> sm90WsElementwiseFallback(const KernelPlan &ws) {
  KernelConfig c = configOf(ws);
  if (c.blockM == 192) {
    c.blockM = 128;
    c.warps = 8;
  } else if (c.blockN > 64) {
    c.blockN = 64;
  } else {
    return std::nullopt;
  }
  llvm::Expected<KernelPlan> second = applyConfig(ws, c);
  if (!second) {
    llvm::consumeError(second.takeError());
    return std::nullopt;
  }
  return c;
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
int smemBytesOf(const std::string &pass, const Tile &t, int headDimQK, int headDimV,
                bool varlen) {
  return pass == "bwd" ? sm80BwdSmemBytes(headDimQK, headDimV, t.blockM, t.blockN, t.stages,
                                          varlen)
                       : sm80FwdSmemBytes(headDimQK, headDimV, t.blockM, t.blockN, t.stages);
}

/// Shrinks a default tile until it fits the arch's shared memory: stages, then block_n down to
/// 32, then (backward) block_m down to 32 with at most 4 warps.
Tile fitSmem(Tile t, const std::string &pass, int headDimQK, int headDimV, bool varlen,
             const std::string &arch) {
  while (smemBytesOf(pass, t, headDimQK, headDimV, varlen) > archSmemLimit(arch)) {
    if (t.stages > 1) {
      --t.stages;
    } else if (t.blockN > 32) {
      t.blockN /= 2;
    } else if (pass == "bwd" && t.blockM > 32) {
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

/// fp32 accumulator registers per thread: S (rows x blockN) and O (rows x headDimV).
int accumulatorRegs(const Tile &t, int headDimV) {
  int atomsM = t.blockM / t.warps / 16;
  return atomsM * (t.blockN / 8) * 4 + atomsM * (paddedHeadDim(headDimV) / 8) * 4;
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
  int smem = sm80FwdSmemBytes(headDimQK, headDimV, t.blockM, t.blockN, t.stages);
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

/// Mirrors sm80::WarpGrid (templates/sm80/bwd_config.cuh): the split of a (rows, cols) tile
/// over `warps` warps into equal warp tiles whose sides are multiples of 16, with the smallest
/// warp-tile perimeter, ties to more warps along the rows. warpsRows 0: no split.
struct WarpGrid {
  int warpsRows = 0, warpsCols = 0, tileRows = 0, tileCols = 0;
};
WarpGrid warpGrid(int rows, int cols, int warps) {
  constexpr int kInvalid = 1 << 30;
  auto cost = [&](int w) {
    return warps % w != 0 || rows % (16 * w) != 0 || cols % (16 * (warps / w)) != 0
               ? kInvalid
               : rows / w + cols / (warps / w);
  };
  WarpGrid g;
  int bestCost = kInvalid;
  for (int w = 1; w <= warps; w *= 2)
    if (cost(w) <= bestCost && cost(w) < kInvalid)
      g.warpsRows = w, bestCost = cost(w);
  if (g.warpsRows == 0)
    return g;
  g.warpsCols = warps / g.warpsRows;
  g.tileRows = rows / g.warpsRows;
  g.tileCols = cols / g.warpsCols;
  return g;
}

/// The warp-grid static_asserts of templates/sm80/bwd_config.cuh: S/dP, dK/dV and dQ tiles
/// each split over the warps into warp tiles whose sides are multiples of 16, and the dQ warp
/// tile into chunks of a multiple of 16 columns. "" when they do.
std::string bwdWarpSplitProblem(const Tile &t, int headDimQK, int headDimV) {
  int qkPad = paddedHeadDim(headDimQK), vPad = paddedHeadDim(headDimV);
  if (warpGrid(t.blockM, t.blockN, t.warps).warpsRows == 0)
    return llvm::formatv("backward tile {0}x{1} does not split over {2} warps into warp tiles "
                         "whose sides are multiples of 16",
                         t.blockM, t.blockN, t.warps);
  WarpGrid kv = warpGrid(t.blockN, std::min(qkPad, vPad), t.warps);
  if (kv.warpsRows == 0 || qkPad % (16 * kv.warpsCols) != 0 || vPad % (16 * kv.warpsCols) != 0)
    return llvm::formatv("backward dK/dV tiles ({0} rows, head dims {1}/{2}) do not split over {3} "
                         "warps into warp tiles whose sides are multiples of 16",
                         t.blockN, qkPad, vPad, t.warps);
  WarpGrid q = warpGrid(t.blockM, qkPad, t.warps);
  if (q.warpsRows == 0)
    return llvm::formatv("backward dQ tile ({0} x {1}) does not split over {2} warps into warp "
                         "tiles whose sides are multiples of 16",
                         t.blockM, qkPad, t.warps);
  int chunk = q.tileRows * q.tileCols <= 2048        ? q.tileCols
              : q.tileCols % (2048 / q.tileRows) == 0 ? 2048 / q.tileRows
                                                      : 16;
  if (chunk % 16 != 0 || q.tileCols % chunk != 0)
    return llvm::formatv("backward dQ warp tile ({0} x {1}) does not split into chunks of a "
                         "multiple of 16 columns",
                         q.tileRows, q.tileCols);
  return "";
}

/// Mirrors the static_asserts of templates/sm80/bwd_config.cuh: "" when the template can
/// build the backward config, else what is wrong.
std::string sm80BwdConfigProblem(const KernelPlan &p) {
  if (p.warps != 1 && p.warps != 2 && p.warps != 4 && p.warps != 8 && p.warps != 16)
    return llvm::formatv("backward warps must be a power of 2 in 1..16, got {0}", p.warps);
  if (p.blockM % 16 != 0 || p.blockM < 16 || p.blockM > 256)
    return llvm::formatv("backward block_m must be a multiple of 16 in 16..256, got {0}", p.blockM);
  if (p.blockN % 16 != 0 || p.blockN < 16 || p.blockN > 256)
    return llvm::formatv("backward block_n must be a multiple of 16 in 16..256, got {0}",
                         p.blockN);
  if (p.stages < 1 || p.stages > 2)
    return llvm::formatv("backward stages must be 1 or 2, got {0}", p.stages);
  if (p.rescaleTau != 0 || p.exp2EmuPercent != 0)
    return "the backward template has no rescale_tau or exp2 emulation (both must be 0)";
  std::string split = bwdWarpSplitProblem({p.blockM, p.blockN, p.warps, p.stages}, p.headDimQK,
                                           p.headDimV);
  if (!split.empty())
    return split;
  int smem = sm80BwdSmemBytes(p.headDimQK, p.headDimV, p.blockM, p.blockN, p.stages, p.varlen);
  if (smem > archSmemLimit(p.arch))
    return llvm::formatv("backward tile {0}x{1} with {2} stages needs {3} bytes of shared memory; "
                         "{4} allows {5}",
                         p.blockM, p.blockN, p.stages, smem, p.arch, archSmemLimit(p.arch));
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

/// What the sm90 template (`ws`: sm90ws) serves, for error messages.
const char *sm90Serves(bool ws) {
  return ws ? "every mask, score mod, dropout, block sparsity with blocks of 128, 192 (head_dim_v "
              "<= 128) or 256 "
              "tokens, and varlen, at head dims 64, 96, 128, 192 and 256 (Q/K and V each)"
            : "dense none/causal attention at head dims 64, 128 and 256 only";
}

bool sm90WsHeadDim(int d) { return d == 64 || d == 96 || d == 128 || d == 192 || d == 256; }

/// What of `p`'s variant the sm90 template (`ws`: sm90ws) cannot serve, as a phrase ("" when
/// it serves it). sm90ws serves every mask and score mod; sm90 dense none/causal only.
std::string sm90VariantProblem(const KernelPlan &p, bool ws) {
  if (p.pass != "fwd")
    return "the backward pass";
  if (!ws && p.mask == "window")
    return "the window mask";
  if (!ws && p.mask == "causal" && p.maskAlign != "bottom_right")
    return "the top-left causal mask";
  if (!ws && p.scoreMod != "none")
    return "score_mod " + p.scoreMod;
  if (!ws && p.dropout)
    return "dropout";
  if (!ws && p.sparsity != "none")
    return "block sparsity";
  if (ws && p.sparsity != "none" && p.sparseBlock % 128 != 0 && p.sparseBlock % 192 != 0)
    return llvm::formatv("block_sparse.block {0} (its query tiles of 128 or 192 rows must "
                         "divide the block)",
                         p.sparseBlock);
  if (!ws && p.varlen)
    return "varlen";
  if (ws && (!sm90WsHeadDim(p.headDimQK) || !sm90WsHeadDim(p.headDimV)))
    return llvm::formatv("head dims {0}/{1}", p.headDimQK, p.headDimV);
  if (!ws && (p.headDimQK != p.headDimV ||
              (p.headDimQK != 64 && p.headDimQK != 128 && p.headDimQK != 256)))
    return "head dims other than 64, 128 and 256";
  return "";
}

/// Mirrors templates/sm90/fwd_config.cuh's static_asserts (FwdConfig; WsFwdConfig when `ws`:
/// the warp-specialized template, a producer warpgroup and 2 or 3 consumer warpgroups) and
/// sm90/tile_ops.cuh's loader, restricted to what has run on the H200 (sm90: head dims 64, 128,
/// 256; sm90ws: 64, 96, 128, 192, 256).
std::string sm90ConfigProblem(const KernelPlan &p, bool ws) {
  const std::string name = ws ? "sm90ws" : "sm90";
  if (p.arch != "sm_90a")
    return "the " + name + " template (" + (ws ? "TMA, wgmma" : "wgmma") +
           ") needs the sm_90a target";
  std::string variant = sm90VariantProblem(p, ws);
  if (!variant.empty())
    return "the " + name + " template does not serve " + variant + " (" + sm90Serves(ws) + ")";
  if (!ws && p.blockM != 64 && p.blockM != 128)
    return llvm::formatv("block_m must be 64 or 128 (1 or 2 warpgroups), got {0}", p.blockM);
  if (ws && p.blockM != 128 && p.blockM != 192)
    return llvm::formatv("block_m must be 128 or 192 (2 or 3 consumer warpgroups), got {0}",
                         p.blockM);
  if (p.warps != p.blockM / 16)
    return llvm::formatv("warps must be block_m / 16 = {0} ({1}), got {2}", p.blockM / 16,
                         ws ? "the consumer warps; the producer warpgroup comes on top"
                            : "4 per warpgroup",
                         p.warps);
  if (!ws && p.blockN != 64 && p.blockN != 80 && p.blockN != 128 && p.blockN != 256)
    return llvm::formatv("block_n must be 64, 80, 128 or 256, got {0}", p.blockN);
  if (ws && p.blockN != 64 && p.blockN != 80 && p.blockN != 96 && p.blockN != 112 &&
      p.blockN != 128 && p.blockN != 176 && p.blockN != 256)
    return llvm::formatv("block_n must be 64, 80, 96, 112, 128, 176 or 256, got {0}", p.blockN);
  // The cp.async loaders: 2 * block_m threads copy 16-byte chunks of whole rows, in rounds of
  // whole 8-row swizzle atoms that divide both tiles (TMA has no such rule).
  int rowsPerRound = 2 * p.blockM / (p.headDimQK / 8);
  if (!ws &&
      (rowsPerRound % 8 != 0 || p.blockM % rowsPerRound != 0 || p.blockN % rowsPerRound != 0))
    return llvm::formatv("block_m {0} and block_n {1} do not load at head dim {2}: its {3} rows "
                         "a round must be a multiple of 8 dividing both (head dim 256: block_m "
                         "128)",
                         p.blockM, p.blockN, p.headDimQK, rowsPerRound);
  if (p.stages < 2 || p.stages > 4)
    return llvm::formatv("stages must be in 2..4, got {0}", p.stages);
  if (p.rescaleTau != 0 && !(ws && p.rescaleTau > 0))
    return ws ? "the sm90ws template takes rescale_tau 0..8 (-1, always rescaling, is the "
                "portable template's)"
              : "the " + name + " template rescales only when a row max grows (rescale_tau 0)";
  if (p.stagedEpilogue && !ws)
    return "staged_epilogue is an option of the sm90ws template: use template: sm90ws";
  if (p.stagedEpilogue && sm90WsPaddedHeadDim(p.headDimV) > sm90WsPaddedHeadDim(p.headDimQK))
    return llvm::formatv("staged_epilogue writes O through the Q tile, which is narrower "
                         "(head dims {0}/{1}): remove staged_epilogue",
                         p.headDimQK, p.headDimV);
  int smem = ws ? sm90WsFwdSmemBytes(p.headDimQK, p.headDimV, p.blockM, p.blockN, p.stages)
                : sm90FwdSmemBytes(p.headDimQK, p.blockM, p.blockN, p.stages);
  if (smem > archSmemLimit(p.arch))
    return llvm::formatv("needs {0} bytes of shared memory; sm_90a allows {1}", smem,
                         archSmemLimit(p.arch));
  // S + O + P registers of a thread: 192; a consumer thread of sm90ws its share less 32
  // (common/ws_registers.h, which WsFwdConfig's split reads too).
  int accumulators = p.blockN / 2 + sm90WsPaddedHeadDim(p.headDimV) / 2 + p.blockN / 4;
  if (!ws && accumulators > 192)
    return llvm::formatv("S + O + P need more than 192 registers per thread at block_n {0}",
                         p.blockN);
  int budget = ws_accumulator_registers(p.blockM / 64, p.varlen);
  if (ws && accumulators > budget)
    return llvm::formatv("S + O + P need more than the {0} registers a consumer thread has for "
                         "them at block_m {1}, block_n {2}: lower block_n or block_m",
                         budget, p.blockM, p.blockN);
  return "";
}

/// Tiles must divide the block of a block mask or layout (variants.cuh static_asserts it).
std::string sparseBlockProblem(const KernelPlan &p) {
  if (p.sparsity == "none" || (p.sparseBlock % p.blockM == 0 && p.sparseBlock % p.blockN == 0))
    return "";
  return llvm::formatv("block_m ({0}) and block_n ({1}) must divide block_sparse.block ({2})",
                       p.blockM, p.blockN, p.sparseBlock);
}

bool validHeadDim(int headDim) { return headDim % 8 == 0 && headDim >= 32 && headDim <= 256; }

} // namespace

std::string maskToken(const KernelPlan &p) {
  if (p.mask == "none")
    return "none";
  return p.mask + (p.maskAlign == "top_left" ? "tl" : "");
}

std::vector<std::string> featureTokens(const KernelPlan &p) {
  std::vector<std::string> out;
  if (p.scoreMod != "none")
    out.push_back(p.scoreMod);
  if (p.dropout)
    out.push_back("drop");
  if (p.sparsity == "runtime")
    out.push_back(llvm::formatv("bsr{0}", p.sparseBlock));
  if (p.sparsity == "static")
    out.push_back(llvm::formatv("bs{0}_{1}", p.sparseBlock, p.sparseHash));
  if (p.varlen)
    out.push_back("varlen");
  if (p.deterministic)
    out.push_back("det");
  return out;
}

std::vector<std::string> entryPointNames(const KernelPlan &p) {
  if (p.pass == "bwd")
    return {p.name, p.name + "_pre", p.name + "_post"};
  return {p.name};
}

bool sm90ServesVariant(const KernelPlan &p) { return sm90VariantProblem(p, /*ws=*/true).empty(); }

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

std::string kernelName(const KernelPlan &p) {
  std::string dims = p.headDimQK == p.headDimV
                         ? std::to_string(p.headDimQK)
                         : llvm::formatv("{0}x{1}", p.headDimQK, p.headDimV).str();
  std::string name = llvm::formatv("fagen_{0}_{1}_hd{2}_{3}", p.pass, p.dtype, dims, maskToken(p));
  for (const std::string &feature : featureTokens(p))
    name += "_" + feature;
  name += llvm::formatv("_{0}_m{1}n{2}w{3}s{4}", p.templ, p.blockM, p.blockN, p.warps, p.stages)
              .str();
  if (p.rescaleTau != 0)
    name += p.rescaleTau < 0 ? "_ra" : llvm::formatv("_r{0}", p.rescaleTau).str();
  if (p.exp2EmuPercent != 0)
    name += llvm::formatv("_e{0}d{1}", p.exp2EmuPercent, p.exp2PolyDegree).str();
  if (p.stagedEpilogue)
    name += "_so";
  return name;
}

llvm::Error checkKernelPlan(const KernelPlan &p) {
  std::string problem;
  if (!validHeadDim(p.headDimQK) || !validHeadDim(p.headDimV))
    problem = llvm::formatv("head dims {0}/{1} are not multiples of 8 in 32..256", p.headDimQK,
                            p.headDimV);
  if (problem.empty() && p.pass == "bwd")
    problem = p.templ == "sm80" ? sm80BwdConfigProblem(p)
                                : "the backward pass has only the sm80 template";
  else if (problem.empty())
    problem = p.templ == "sm90" || p.templ == "sm90ws"
                  ? sm90ConfigProblem(p, /*ws=*/p.templ == "sm90ws")
                  : sm80ConfigProblem({p.blockM, p.blockN, p.warps, p.stages}, p.headDimQK,
                                      p.headDimV, p.arch);
  if (problem.empty())
    problem = fa4ParamsProblem(p.rescaleTau, p.exp2EmuPercent, p.exp2PolyDegree);
  if (problem.empty() && p.stagedEpilogue && p.templ != "sm90ws")
    problem = "staged_epilogue is an option of the sm90ws template: use template: sm90ws";
  if (problem.empty())
    problem = sparseBlockProblem(p);
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
  return s;
}

static auto configTie(const KernelConfig &c) {
  return std::tie(c.blockM, c.blockN, c.warps, c.stages, c.rescaleTau, c.exp2EmuPercent,
                  c.exp2PolyDegree, c.stagedEpilogue);
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
  finalizePlan(p);
  if (llvm::Error err = checkKernelPlan(p))
    return err;
  return p;
}

void finalizePlan(KernelPlan &p) {
  if (p.exp2EmuPercent == 0)
    p.exp2PolyDegree = 3; // no polynomial: one kernel, whatever the degree says
  p.threads = 32 * p.warps + (p.templ == "sm90ws" ? 128 : 0); // + the producer warpgroup
  // sm90ws grids (H200, docs/perf/sm90-fwd.md runs 8 and 19): persistent where every work tile
  // costs the same (no causal mask, no window, no varlen, no sparsity) and at hd 64: the next
  // tile's Q and K then load while the consumers finish the current one. Measured persistent
  // over one CTA per tile, with the even tiles' L2 order of run 18 (run 52 replaced that order;
  // this comparison was not repeated): hd 128 +0-5 % (2k-16k),
  // hd 64 +8 % (run 8), hd 256 within 1 %. Uneven tiles keep one CTA per work tile, heaviest
  // first, so that the hardware hands the next tile to whichever SM frees up: the static deal
  // measured 11 % slower at hd 128 causal and 23-28 % at hd 256 causal (hd 64 causal gains,
  // +17 % at 2k in run 8).
  const bool evenTiles = p.mask == "none" && !p.varlen && p.sparsity == "none";
  p.persistent = p.templ == "sm90ws" && (evenTiles || (p.headDimQK == 64 && p.headDimV == 64));
  // Uneven tiles can also take them from a counter in the caller's forward workspace: one CTA
  // per SM, the next tile (heaviest first) to whichever frees up (docs/perf/sm90-fwd.md run 25).
  // Not the block-sparse kernels: their producer's walk over the layout then spills (24-52
  // bytes, nvcc 13.0).
  p.tileCounter = p.templ == "sm90ws" && p.pass == "fwd" && !evenTiles && p.sparsity == "none";
  // O through shared memory and a TMA store per warpgroup, which runs while the warpgroup starts
  // its next tile (docs/perf/sm90-fwd.md run 28: the epilogue 3000 -> 1370 cycles a tile at
  // hd 128). Head dims 128 and 64 (session 18 measured hd 64's main-loop step 7 % slower with
  // it; after the softmax changes of sessions 20-21 the step is the same, and the A/B of run 49
  // gave +1.4 % at 2k-4k, +3-6 % at 512-1k, 0-1 % at 8k-16k); hd 256 has no room for the O
  // tile, hd 96 / 192 and unequal head dims were not measured. Not varlen (a tile's rows past
  // its sequence would land in the next) nor with the staged epilogue (O through the Q tile).
  p.tmaStoreO = p.templ == "sm90ws" && p.pass == "fwd" && p.headDimQK == p.headDimV &&
                (p.headDimV == 128 || p.headDimV == 64) && !p.varlen && !p.stagedEpilogue &&
                sm90WsFwdSmemBytes(p.headDimQK, p.headDimV, p.blockM, p.blockN, p.stages,
                                   p.tileCounter, true) <= archSmemLimit(p.arch);
  if (p.pass == "bwd")
    p.smemBytes =
        sm80BwdSmemBytes(p.headDimQK, p.headDimV, p.blockM, p.blockN, p.stages, p.varlen);
  else if (p.templ == "sm90")
    p.smemBytes = sm90FwdSmemBytes(p.headDimQK, p.blockM, p.blockN, p.stages);
  else if (p.templ == "sm90ws")
    p.smemBytes = sm90WsFwdSmemBytes(p.headDimQK, p.headDimV, p.blockM, p.blockN, p.stages,
                                     p.tileCounter, p.tmaStoreO);
  else
    p.smemBytes = sm80FwdSmemBytes(p.headDimQK, p.headDimV, p.blockM, p.blockN, p.stages);
  p.prePostThreads = p.pass == "bwd" ? kBwdPrePostThreads : 0;
  p.name = kernelName(p);
}

std::string workloadKey(const KernelPlan &p) {
  std::string key = llvm::formatv("{0} {1} hd{2}x{3} {4}", p.pass, p.dtype, p.headDimQK,
                                  p.headDimV, maskToken(p));
  for (const std::string &feature : featureTokens(p))
    key += " " + feature;
  return key + " " + p.arch;
}

namespace {

/// The wgmma templates' defaults for `p`, measured on the H200 (bf16, 2026-11-30,
/// docs/perf/sm90-fwd.md), two stages (three never helped):
/// - sm90ws (`ws`, the sm_90a default): FlashAttention-3's tiles, hd 64 three consumer
///   warpgroups x 128 keys, hd 128 two x 128 keys, hd 256 two x 80 keys; 1.25-1.30x the sm90
///   template at 16k (runs 5-8). Dense kernels then take builtinSeqlenConfigs' buckets (hd 256
///   non-causal: 64 keys). hd 96 as hd 128 (padded), hd 192 two x 112 keys.
/// - sm90 (cp.async, pinned): hd 64 one warpgroup of 64 rows x 128 keys (three CTAs per SM beat
///   one CTA of two warpgroups by 15-35%); hd 128 two warpgroups, 128 x 128; hd 256 128 x 64,
///   197632 bytes of shared memory (128 x 80 wins only causal 16k by 3-4% and spills 4 bytes).
KernelPlan sm90Plan(KernelPlan p, bool ws) {
  p.spillFallback.reset();
  p.templ = ws ? "sm90ws" : "sm90";
  p.stages = 2;
  // FlashAttention-4's conditional rescaling: O rescaled only when a row max grows by more
  // than 2^8. On the default tiles, interleaved against the exact skip (0; H200, bf16,
  // docs/perf/sm90-fwd.md run 22): hd 128 +1.5-5.7 %, hd 256 +0.6-3.2 %, hd 64 -0.1-+2.2 %.
  p.rescaleTau = ws ? 8 : 0;
  if (!ws) {
    p.blockM = p.headDimQK == 64 ? 64 : 128;
    p.blockN = p.headDimQK == 256 ? 64 : 128;
  } else {
    // The widest key tile, of 128, 112, 96, 80 and 64, whose S, O and P fit the registers and
    // whose K and V stages fit shared memory: hd 64/96/128 128 keys, hd 192 112, hd 256 80.
    // Block-sparse layouts: tiles that divide the layout's block (query tiles 192 -> 128 rows
    // for blocks of 128 and 256, 128 -> 192 for blocks of 192).
    int dim = std::max(sm90WsPaddedHeadDim(p.headDimQK), sm90WsPaddedHeadDim(p.headDimV));
    p.blockM = dim == 64 ? 192 : 128;
    if (p.sparsity != "none" && p.sparseBlock % p.blockM != 0)
      p.blockM = p.blockM == 192 ? 128 : 192;
    p.warps = p.blockM / 16; // sm90ConfigProblem below checks it
    for (int blockN : {128, 112, 96, 80, 64}) {
      // Dropout's Philox rounds need registers beside S, O and P. With O of 192 or 256
      // columns, 112 and 80 keys spilled 28-68 bytes, 96 and 64 none (nvcc 13.0).
      if (p.dropout && sm90WsPaddedHeadDim(p.headDimV) >= 192 && blockN != 96 && blockN != 64)
        continue;
      p.blockN = blockN;
      if (sm90ConfigProblem(p, /*ws=*/true).empty() && sparseBlockProblem(p).empty())
        break;
    }
  }
  p.warps = p.blockM / 16;
  finalizePlan(p);
  return p;
}

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

/// The variant's semantics, copied into a plan.
void copyVariant(const VariantSpec &v, KernelPlan &p) {
  p.dtype = v.dtype;
  p.headDimQK = v.headDimQK;
  p.headDimV = v.headDimV;
  p.mask = v.mask;
  p.maskAlign = v.mask == "none" ? "bottom_right" : v.maskAlign;
  p.scoreMod = v.scoreMod;
  p.dropout = v.dropout;
  p.varlen = v.varlen;
  if (v.blockSparse && !v.blockSparse->isStatic()) {
    p.sparsity = "runtime";
    p.sparseBlock = v.blockSparse->block;
  } else if (v.blockSparse) {
    BlockTable table = blockTable(*v.blockSparse);
    p.sparsity = "static";
    p.sparseBlock = table.block;
    p.sparseRows = table.rows;
    p.sparseCols = table.cols;
    p.sparseTable = std::move(table.table);
    p.sparseHash = table.hash;
  }
  p.deterministic = p.pass == "bwd" && v.deterministic;
}

llvm::Expected<KernelPlan> basePlan(const VariantSpec &v, const std::string &pass,
                                    const std::string &arch) {
  if (!validHeadDim(v.headDimQK) || !validHeadDim(v.headDimV))
    return makeSpecError(v.locOf("head_dim"), "head_dim must be a multiple of 8 in 32..256");
  KernelPlan p;
  p.variant = v.name;
  p.pass = pass;
  p.arch = arch;
  p.templ = "sm80";
  copyVariant(v, p);
  int headDim = paddedHeadDim(std::max(v.headDimQK, v.headDimV));
  Tile t = pass == "bwd" ? defaultBwdTile(headDim) : defaultTile(headDim, arch);
  std::optional<Tile> fallback;
  if (pass == "fwd" && hasElementwiseWork(v))
    fallback = fitSmem(fitSparseBlock(elementwiseVariantTile(t, headDim), p.sparseBlock), pass,
                       v.headDimQK, v.headDimV, v.varlen, arch);
  if (pass == "bwd" && v.scoreMod != "none")
    t = scoreModBwdTile(t, headDim);
  t = fitSmem(fitSparseBlock(t, p.sparseBlock), pass, v.headDimQK, v.headDimV, v.varlen, arch);
  // Head dims whose padded width is an odd multiple of 16 (48, 80, ...) do not split over
  // 8 warps: fewer warps, and a narrower key tile so that each warp's share stays in registers
  // (hd 72 at 64x128 with 4 warps spilled 1264 bytes, at 64x64 none, nvcc 13.0, sm_90; so do
  // 40-136). Padded 176, 208 and 240 still spill with 4 warps (hd 168: 200 bytes, 200: 1280,
  // 232: 3572); 8 warps there need a 128-row tile that does not fit shared memory.
  while (pass == "bwd" && t.warps > 1 && !bwdWarpSplitProblem(t, v.headDimQK, v.headDimV).empty()) {
    t.warps /= 2;
    t.blockN = std::min(t.blockN, 64);
  }
  p.blockM = t.blockM;
  p.blockN = t.blockN;
  p.warps = t.warps;
  p.stages = t.stages;
  p.rescaleTau = pass == "bwd" ? 0 : defaultRescaleTau(headDim, v.mask == "causal", arch);
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
  if (v.tile && pass == "fwd")
    return pinnedPlan(p, *v.tile);
  // sm90ws where it serves the variant and one of its tiles fits (a 192-token sparse block at
  // hd 192/256 needs 192-row tiles whose S + O + P exceed the registers: portable then).
  if (pass == "fwd" && arch == "sm_90a" && sm90ServesVariant(p)) {
    KernelPlan ws = sm90Plan(p, /*ws=*/true);
    llvm::Error err = checkKernelPlan(ws);
    if (!err) {
      if (hasElementwiseWork(v))
        ws.spillFallback = sm90WsElementwiseFallback(ws);
      return ws;
    }
    llvm::consumeError(std::move(err));
  }
  if (llvm::Error err = checkKernelPlan(p)) {
    std::string message = llvm::toString(std::move(err));
    return makeSpecError(v.loc, "no default " + pass + " kernel of variant '" + v.name +
                                    "' fits " + arch + ": " +
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

} // namespace

/// The seqlen buckets for dense sm90ws forwards, from `fagen tune` on the H200
/// (bf16, 2026-11-30, docs/perf/sm90-fwd.md run 14) where bench_fwd.py and the A/B runs of run
/// 13 agreed: hd 128 from 4k on 192 x 80 tiles (+2-6 %), hd 128 causal up to 4k with the
/// staged epilogue (+4-9 %); the rest stays the single default. hd 256 (run 23, a tune with the
/// default tau 8): causal rows staged at every length, up to 4k on 128 x 64 tiles; non-causal
/// rows one bucket, unstaged since session 22 (run 51), on 128 x 64 tiles since session 27
/// (run 69). hd 64 causal: rows up to 1k on
/// 128 x 128 tiles (run 26, a tune with tile counters, had them up to 2k; since the warpgroups
/// without rows pass their tiles, run 39, the default 192 x 128 measured 1.06x faster at 1.5k
/// and 2k, and 0.94x at 512 and 1k, runs 41-42; 1025-1535 rows not measured). fp16 shares the
/// rule (same tiles; not measured). The hd 256 non-causal kernel runs persistent (the grid
/// rule for even tiles).
/// Empty where none applies; a tuning database overrides it.
std::vector<TunedConfig> builtinSeqlenConfigs(const KernelPlan &base) {
  const bool dense = base.scoreMod == "none" && !base.dropout && !base.varlen &&
                     base.sparsity == "none" &&
                     (base.mask == "none" ||
                      (base.mask == "causal" && base.maskAlign == "bottom_right"));
  const bool causal = base.mask == "causal";
  if (base.pass != "fwd" || base.templ != "sm90ws" || base.tuning != "default" || !dense ||
      base.headDimQK != base.headDimV ||
      (base.headDimQK != 128 && base.headDimQK != 256 && !(base.headDimQK == 64 && causal)))
    return {};
  std::string provenance = "built in: fagen tune on an H200, 2026-11-30";
  int64_t shortMax = 4096;
  KernelConfig shortSeq = configOf(base), longSeq = configOf(base);
  if (base.headDimQK == 64) { // causal only; longer rows keep the default
    provenance = "built in: fagen tune on an H200 (2026-12-01), edge by A/B (session 21)";
    shortMax = 1024;
    shortSeq.blockM = 128;
    shortSeq.warps = 8;
  } else if (base.headDimQK == 128) {
    provenance = "built in: fagen tune on an H200 (2026-11-30), epilogue by A/B (2026-12-01)";
    // Short rows on 128 x 128 tiles, storing O with TMA (finalizePlan): that beat the staged
    // epilogue of the session-15 tune by 4-18 % on causal rows up to 4k (docs/perf/sm90-fwd.md
    // run 28). Non-causal rows take 192 x 80 tiles from 1k: with both storing O by TMA they
    // measured 1.00-1.03x the 128 x 128 kernel at 1.5k-4k in either bundle order, causal rows
    // 0.94-1.02x (run 31).
    if (!causal)
      shortMax = 1024;
    longSeq.blockM = 192;
    longSeq.blockN = 80;
    longSeq.warps = 12;
  } else {
    // Causal: staged at every length since the rescale threshold (tau 8) became the default:
    // the session-15 tune put the staged epilogue first in both buckets, and 64 keys a tile
    // first for short causal rows (docs/perf/sm90-fwd.md run 23). Non-causal: unstaged since
    // O leaves the registers with 16-byte stores (store_o_rows' quad transpose), so that Q is
    // handed back after the last S and the next tile's Q loads under the epilogue: 1.01-1.05x
    // the staged kernel at 1k-16k (run 51). Non-causal rows on 128 x 64 tiles (session 27, run
    // 69): 2^k keys divide into 64-key tiles, while 80-key tiles compute 1.6 % padded keys at
    // 1k-4k; back to back under the power cap 64 keys took 0.985-0.996x the time of 80 at 1k-16k
    // (1.1-1.5 % less at 2k-4k), and 0.995-1.04x the speed in bench_fwd.py's rounds.
    if (!causal)
      provenance = "built in: fagen tune on an H200 (2026-11-30), epilogue and tile by A/B "
                   "(sessions 22, 27)";
    shortSeq.stagedEpilogue = causal;
    longSeq.stagedEpilogue = causal;
    shortSeq.blockN = 64;
    if (!causal)
      longSeq.blockN = 64;
  }
  if (shortSeq == longSeq) // one range: tunedPlans would merge two, repeating the provenance
    return {{1, int64_t(1) << 40, shortSeq, provenance}};
  return {{1, shortMax, shortSeq, provenance},
          {shortMax + 1, int64_t(1) << 40, longSeq, provenance}};
}

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
    for (const std::string &pass : v.passes) {
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
        if (tuning && !(v.tile && pass == "fwd")) {
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
    out += llvm::formatv("  mask_align={0} score_mod={1} dropout={2} varlen={3} sparsity={4}",
                         p.maskAlign, p.scoreMod, p.dropout ? "true" : "false",
                         p.varlen ? "true" : "false", p.sparsity)
               .str();
    if (p.sparsity != "none")
      out += llvm::formatv(" sparse_block={0}", p.sparseBlock).str();
    if (p.sparsity == "static")
      out += llvm::formatv(" sparse_table={0}x{1} sparse_hash={2}", p.sparseRows, p.sparseCols,
                           p.sparseHash)
                 .str();
    out += "\n";
    if (p.pass == "bwd")
      out += llvm::formatv("  deterministic={0} pre_post_threads={1}\n",
                           p.deterministic ? "true" : "false", p.prePostThreads)
                 .str();
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
    if (p.spillFallback)
      out += llvm::formatv("  spill_fallback={0} (built instead if ptxas reports over {1} spill "
                           "bytes)\n",
                           p.spillFallback->text(), spillFallbackBytes(p.templ))
                 .str();
    if (p.seqlenMin != 0 || p.seqlenMax != (int64_t(1) << 40))
      out += llvm::formatv("  seqlen={0}..{1}\n", p.seqlenMin, p.seqlenMax).str();
  }
  return out;
}

} // namespace fagen
