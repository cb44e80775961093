//===- PlanRules.h - the planner's internals (private) ----------------------===//
//
// Plan.cpp holds the shared base (default tiles, fitting, kernel names, configs, planKernels);
// PlanSm80.cpp, PlanSm90.cpp and PlanDecode.cpp the rules of each template family. Not included outside
// compiler/plan.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_COMPILER_PLAN_PLANRULES_H
#define FAGEN_COMPILER_PLAN_PLANRULES_H

#include "compiler/plan/Plan.h"

#include <optional>
#include <string>

namespace fagen {
namespace planner {

/// A kernel's tile: rows and keys per block, warps, pipeline stages.
struct Tile {
  int blockM, blockN, warps, stages;
};

// PlanSm80.cpp
/// "" when templates/sm80/fwd_config.cuh can build the forward config, else what is wrong.
std::string sm80ConfigProblem(const Tile &t, int headDimQK, int headDimV, const std::string &arch);
/// "" when the backward's warps split the tile into multiples of 16 columns, else why not.
std::string bwdWarpSplitProblem(const Tile &t, int headDimQK, int headDimV);
/// "" when templates/sm80/bwd_config.cuh can build the backward config, else what is wrong.
std::string sm80BwdConfigProblem(const KernelPlan &p);

// PlanSm90.cpp
/// The sm90ws fallback for a variant with per-logit work, when its default tile spills.
std::optional<KernelConfig> sm90WsElementwiseFallback(const KernelPlan &ws);
/// What the sm90 template (`ws`: sm90ws) serves, for error messages.
const char *sm90Serves(bool ws);
/// What of `p`'s variant the sm90 template (`ws`: sm90ws) cannot serve ("" when it serves it).
std::string sm90VariantProblem(const KernelPlan &p, bool ws);
/// "" when templates/sm90/fwd_config.cuh can build the config, else what is wrong.
std::string sm90ConfigProblem(const KernelPlan &p, bool ws);
/// The wgmma templates' defaults for `p` (`ws`: sm90ws).
KernelPlan sm90Plan(KernelPlan p, bool ws);
/// What of backward plan `p`'s variant the sm90ws backward cannot serve ("" when it serves it).
std::string sm90WsBwdVariantProblem(const KernelPlan &p);
/// "" when templates/sm90/bwd_ws_config.cuh can build backward plan `p`, else what is wrong.
std::string sm90WsBwdConfigProblem(const KernelPlan &p);
/// The sm90ws backward's defaults for backward plan `p`.
KernelPlan sm90WsBwdPlan(KernelPlan p);
/// The sm90ws backward's default dQ strategy for `p`'s variant: ws_bwd_dq_writer
/// (templates/common/ws_bwd_layout.h).
bool sm90WsBwdDqWriter(const KernelPlan &p);

// PlanDecode.cpp
/// What the decode template serves, for error messages.
const char *decodeServes();
/// What of `p`'s variant the decode template cannot serve ("" when it serves it).
std::string decodeVariantProblem(const KernelPlan &p);
/// "" when templates/sm80/decode_config.cuh can build decode plan `p`, else what is wrong.
std::string decodeConfigProblem(const KernelPlan &p);
/// The decode kernel of variant `v` (which lists decode in its passes) for `arch`, or a spec
/// error at `passes: [decode]` naming what the template does not serve.
llvm::Expected<KernelPlan> decodePlan(const VariantSpec &v, const std::string &arch);
/// `decode` with the split rule `fagen tune` recorded for it (`tuning`: one pair over the
/// measured calls), or, a paged decode kernel, which the tuner cannot time, its contiguous
/// twin's; unchanged where the table has neither.
llvm::Expected<KernelPlan> tunedDecodePlan(KernelPlan decode, const TuningTable &tuning);

// Plan.cpp
/// Tiles must divide the block of a block mask or layout (variants.cuh static_asserts it).
std::string sparseBlockProblem(const KernelPlan &p);
/// "" when templates/sm80/fwd_config.cuh can build paged forward plan `p` (chunked prefill).
std::string pagedForwardProblem(const KernelPlan &p);
/// A multiple of 8 in 32..256.
bool validHeadDim(int headDim);

} // namespace planner
} // namespace fagen

#endif // FAGEN_COMPILER_PLAN_PLANRULES_H
