//===- Naming.cpp - a plan's kernel name and its cubin's entry points ------===//
//
// The name says what the kernel computes and how it is tiled (Plan.h kernelName); a cubin's
// entry points are that name and its suffixes (templates/abi/*_params.h).
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/PlanRules.h"
#include "templates/common/decode_split.h"
#include "templates/common/ws_bwd_layout.h"

#include "llvm/Support/FormatVariadic.h"

namespace fagen {

using namespace planner;

std::string kernelName(const KernelPlan &p) {
  std::string dims = p.headDimQK == p.headDimV
                         ? std::to_string(p.headDimQK)
                         : llvm::formatv("{0}x{1}", p.headDimQK, p.headDimV).str();
  std::string name = llvm::formatv("fagen_{0}_{1}_hd{2}_{3}", toText(p.pass), toText(p.dtype), dims,
                                   p.maskToken());
  for (const std::string &feature : p.featureTokens())
    name += "_" + feature;
  name += llvm::formatv("_{0}_m{1}n{2}w{3}s{4}", p.templ, p.blockM, p.blockN, p.warps, p.stages)
              .str();
  if (p.rescaleTau != 0)
    name += p.rescaleTau < 0 ? "_ra" : llvm::formatv("_r{0}", p.rescaleTau).str();
  if (p.exp2EmuPercent != 0)
    name += llvm::formatv("_e{0}d{1}", p.exp2EmuPercent, p.exp2PolyDegree).str();
  if (p.stagedEpilogue)
    name += "_so";
  // The sm90ws backward's query walk where it is not the head dim's default: rotated (_qr) or
  // from the first tile (_qf); the defaults keep their names.
  if (p.pass == Pass::Backward && p.templ == "sm90ws" &&
      p.rotateQueryWalk != ws_bwd_rotates_query_walk(p.headDimQK, p.deterministic))
    name += p.rotateQueryWalk ? "_qr" : "_qf";
  // Its dQ strategy where it is not the default: the dQ writer warp (_dw) or the consumers
  // adding their own blocks (_dc).
  if (p.pass == Pass::Backward && p.templ == "sm90ws" && p.dqWriter != sm90WsBwdDqWriter(p))
    name += p.dqWriter ? "_dw" : "_dc";
  // A decode kernel's split rule where it is not the default (a tuned one): _split2x1.
  if (isDecodePlan(p) &&
      (p.decodeCtasPerSm != kDecodeCtasPerSm || p.decodeMinTiles != kDecodeMinTilesPerSplit))
    name += llvm::formatv("_split{0}x{1}", p.decodeCtasPerSm, p.decodeMinTiles).str();
  return name;
}

std::vector<std::string> entryPointNames(const KernelPlan &p) {
  if (p.pass == Pass::Backward)
    return {p.name, p.name + "_pre", p.name + "_post"};
  if (isDecodePlan(p) && p.isPaged())
    return {p.name, p.name + "_combine", p.name + "_merge", p.name + "_append"};
  if (isDecodePlan(p))
    return {p.name, p.name + "_combine", p.name + "_merge"};
  return {p.name};
}

} // namespace fagen
