//===- PlanSm80.cpp - the portable mma.sync template's rules -------------===//
//
// Shared-memory bytes (templates/common/smem_layout.h), register and warp-grid limits of
// templates/sm80/: the planner's mirror of the static_asserts in fwd_config.cuh and
// bwd_config.cuh.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/PlanRules.h"
#include "templates/common/smem_layout.h"
#include "templates/common/ws_registers.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

namespace fagen {

using namespace planner;

// The shared-memory arithmetic is templates/common/smem_layout.h's, which the template's
// SmemRow, FwdConfig and BwdConfig compute their constants through (the emitted code
// static_asserts that planner and template agree). Head dims are padded to 16 here.
int sm80FwdSmemBytes(int headDimQK, int headDimV, int blockM, int blockN, int stages) {
  return sm80_fwd_smem_bytes(paddedHeadDim(headDimQK), paddedHeadDim(headDimV), blockM, blockN,
                             stages);
}

int sm80BwdSmemBytes(int headDimQK, int headDimV, int blockM, int blockN, int stages,
                     bool varlen) {
  return sm80_bwd_smem_bytes(paddedHeadDim(headDimQK), paddedHeadDim(headDimV), blockM, blockN,
                             stages, varlen);
}

namespace planner {

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

} // namespace planner

} // namespace fagen
