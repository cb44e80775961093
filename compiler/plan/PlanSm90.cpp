//===- PlanSm90.cpp - the wgmma templates' rules (sm90, sm90ws) ----------===//
//
// Shared-memory bytes, served variants and head dims, config limits and measured defaults of
// templates/sm90/ (sm90: cp.async; sm90ws: warp-specialized TMA), and the seqlen buckets of
// dense sm90ws forwards.
//
//===----------------------------------------------------------------------===//

#include "compiler/plan/PlanRules.h"
#include "templates/abi/tma_params.h"
#include "templates/common/ws_bwd_layout.h"
#include "templates/common/ws_registers.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

namespace fagen {

using namespace planner;

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

int sm90WsBwdSmemBytes(int headDim, int blockM, int blockN, int stages) {
  return WsBwdLayout(ws_bwd_dim(headDim), blockM, blockN, stages).bytes;
}

namespace planner {

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
  if (p.pass != Pass::Forward)
    return "the backward pass";
  // sm90ws loads a paged cache's K and V tiles by TMA page by page, or gathers them with
  // cp.async (sm90/ws_paged_kv.cuh); sm90's loads are of contiguous rows.
  if (!ws && p.isPaged())
    return "a paged KV cache";
  if (!ws && p.mask == Mask::Window)
    return "the window mask";
  if (!ws && p.mask == Mask::Causal && p.maskAlign != MaskAlign::BottomRight)
    return "the top-left causal mask";
  if (!ws && p.scoreMod != ScoreMod::None)
    return std::string("score_mod ") + toText(p.scoreMod);
  if (!ws && p.dropout)
    return "dropout";
  if (!ws && p.sparsity != Sparsity::None)
    return "block sparsity";
  if (ws && p.sparsity != Sparsity::None && p.sparseBlock % 128 != 0 && p.sparseBlock % 192 != 0)
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
  int budget = ws_accumulator_registers(p.blockM / 64, p.varlen, p.isPaged());
  if (ws && accumulators > budget)
    return llvm::formatv("S + O + P need more than the {0} registers a consumer thread has for "
                         "them at block_m {1}, block_n {2}: lower block_n or block_m",
                         budget, p.blockM, p.blockN);
  return "";
}

} // namespace planner

bool sm90ServesVariant(const KernelPlan &p) { return sm90VariantProblem(p, /*ws=*/true).empty(); }

namespace planner {

std::string sm90WsBwdVariantProblem(const KernelPlan &p) {
  const bool equal = p.headDimQK == p.headDimV &&
                     (p.headDimQK == 64 || p.headDimQK == 96 || p.headDimQK == 128 ||
                      p.headDimQK == 192 || p.headDimQK == 256);
  if (!equal && !(p.headDimQK == 192 && p.headDimV == 128))
    return llvm::formatv("head dims {0}/{1} (it serves 64/64, 96/96, 128/128, 192/192, 192/128 "
                         "and 256/256)",
                         p.headDimQK, p.headDimV);
  // Its 128-row query tiles at hd 64 spilled 68-1616 bytes with ALiBi (softcap none; nvcc 13.0).
  if (p.scoreMod == ScoreMod::Alibi && p.headDimQK == 64)
    return "ALiBi at head dim 64";
  // Where its kernels of the newer variants spilled (bytes of spill stores over a bf16 matrix of
  // masks x score mods x dropout x varlen x deterministic at hd 64 and 128, nvcc 13.0;
  // docs/perf/sm90-bwd.md). A later matrix of every dropout kernel it serves found 19 (window
  // masks, deterministic causal) spilling 4-40 bytes: they stay served, as the portable
  // backward they would fall to took 1.27-1.57x the time at hd 96 / 192 (the spills not timed).
  // The two dropout exclusions below were measured with the keep flags before that matrix.
  const bool causal = p.mask == Mask::Causal, softcap = p.scoreMod == ScoreMod::Softcap;
  const bool hd64 = p.headDimQK == 64;
  if (softcap && causal && hd64) // 164-236 (bf16 and fp16, both alignments)
    return "softcap under a causal mask at head dim 64";
  if (softcap && p.dropout && causal) // 8-284
    return "softcap with dropout under a causal mask";
  if (softcap && p.deterministic) // 4-140 (causal, and hd 64 without a mask)
    return "softcap in the deterministic mode";
  if (softcap && p.varlen && hd64) // 4-160
    return "softcap with varlen at head dim 64";
  if (p.dropout && causal && p.maskAlign == MaskAlign::TopLeft) // 8-28
    return "dropout under a top-left causal mask";
  if (p.dropout && p.deterministic && p.mask == Mask::Window && hd64) // 64-96
    return "dropout with a window mask in the deterministic mode at head dim 64";
  return "";
}

/// Mirrors the static_asserts of templates/sm90/bwd_ws_config.cuh.
std::string sm90WsBwdConfigProblem(const KernelPlan &p) {
  if (p.arch != "sm_90a")
    return "the sm90ws backward template (TMA, wgmma) needs the sm_90a target";
  if (std::string variant = sm90WsBwdVariantProblem(p); !variant.empty())
    return "the sm90ws backward template does not serve " + variant + " (use template sm80)";
  const int dim = ws_bwd_dim(p.headDimQK);
  const bool split = ws_bwd_split_s(dim);
  if (split && (p.blockN != 64 || p.blockM != 64))
    return llvm::formatv("backward block_m and block_n must be 64 at head dim {0} (two consumer "
                         "warpgroups split S^T by query columns), got {1} x {2}",
                         p.headDimQK, p.blockM, p.blockN);
  if (!split && p.blockN != 128)
    return llvm::formatv("backward block_n must be 128 (two consumer warpgroups of 64 keys), "
                         "got {0}",
                         p.blockN);
  // One 64 x 64 dQ sub-block per consumer warpgroup.
  if (!split && p.blockM * dim != 2 * 64 * 64)
    return llvm::formatv("backward block_m must be {0} at head dim {1} (one 64 x 64 dQ block per "
                         "consumer warpgroup), got {2}",
                         2 * 64 * 64 / dim, p.headDimQK, p.blockM);
  const int consumerWarps = 4 * ws_bwd_consumers(dim, p.blockN);
  if (p.warps != consumerWarps)
    return llvm::formatv("warps must be {0} (the consumer warps; the producer warpgroup comes on "
                         "top), got {1}",
                         consumerWarps, p.warps);
  if (p.stages < 1 || p.stages > 3)
    return llvm::formatv("backward stages must be in 1..3, got {0}", p.stages);
  if (p.rescaleTau != 0 || p.exp2EmuPercent != 0 || p.stagedEpilogue)
    return "the backward template has no rescale_tau, exp2 emulation or staged epilogue";
  if (p.rotateQueryWalk && p.deterministic)
    return "the rotated query walk does not serve the deterministic mode (its dQ order needs "
           "every key tile to walk its query tiles from the first)";
  if (!p.dqWriter && p.deterministic)
    return "the deterministic mode's dQ order is the dQ writer's (dq_writer must be true)";
  int smem = sm90WsBwdSmemBytes(p.headDimQK, p.blockM, p.blockN, p.stages);
  if (smem > archSmemLimit(p.arch))
    return llvm::formatv("needs {0} bytes of shared memory; sm_90a allows {1}", smem,
                         archSmemLimit(p.arch));
  return "";
}

KernelPlan sm90WsBwdPlan(KernelPlan p) {
  p.spillFallback.reset();
  p.templ = "sm90ws";
  // Tiles of 256 columns (ws_bwd_split_s: hd 256, and hd 192 and 192/128 padded): 64 x 64
  // tiles, two Q stages beside one dO stage (ws_bwd_do_stages; two of each do not fit 227 KB
  // beside K, V, the P^T and dS^T tiles and the dQ staging). H100, hd 256, harness A/B of three
  // rounds in one call, time against one stage of each: 0.91-0.98x, causal 0.94-0.97x, causal
  // dropout 0.97-0.99x, causal deterministic 0.99-1.02x (docs/perf/sm90-bwd.md).
  const int dim = ws_bwd_dim(p.headDimQK); // hd 96 as 128, 192 as 256 (zero padding columns)
  const bool split = ws_bwd_split_s(dim);
  p.blockN = split ? 64 : 128;
  p.blockM = split ? 64 : 2 * 64 * 64 / dim;
  p.warps = 4 * ws_bwd_consumers(dim, p.blockN);
  p.stages = 2;
  p.rescaleTau = 0;
  p.rotateQueryWalk = ws_bwd_rotates_query_walk(p.headDimQK, p.deterministic);
  p.dqWriter = sm90WsBwdDqWriter(p);
  finalizePlan(p);
  return p;
}

bool sm90WsBwdDqWriter(const KernelPlan &p) {
  return ws_bwd_dq_writer(p.headDimQK, p.deterministic, p.scoreMod == ScoreMod::None, p.varlen,
                          p.mask == Mask::None || p.mask == Mask::Causal,
                          p.sparsity != Sparsity::None);
}

} // namespace planner

namespace planner {

/// The wgmma templates' defaults for `p`, measured on the H200 (bf16, 2026-11-30,
/// docs/perf/sm90-fwd.md), two stages (three never helped, but for a paged cache's gather):
/// - sm90ws (`ws`, the sm_90a default): FlashAttention-3's tiles, hd 64 three consumer
///   warpgroups x 128 keys, hd 128 two x 128 keys, hd 256 two x 80 keys; 1.25-1.30x the sm90
///   template at 16k. Dense kernels then take builtinSeqlenConfigs' buckets (hd 256
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
  // docs/perf/sm90-fwd.md): hd 128 +1.5-5.7 %, hd 256 +0.6-3.2 %, hd 64 -0.1-+2.2 %.
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
    // Paged: 128 (the gather's producer threads need the registers of a 2-consumer split).
    p.blockM = dim == 64 && !p.isPaged() ? 192 : 128;
    if (p.sparsity != Sparsity::None && p.sparseBlock % p.blockM != 0)
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
    // A paged cache gathered with cp.async (pages under 64 tokens: abi/tma_params.h): three
    // stages, so that each tile's gather has two tiles of compute to land under. H100, bf16
    // hd 128 causal GQA 32/8, 16-token pages, `bench/bench_prefill.py` two rounds each in one
    // call (2026-12-07): 0.90-0.97x the time of two stages at every cell; pages loaded by TMA
    // (128 tokens) 0.97-1.02x, so those keep two. Other head dims take it where it fits (hd 64
    // and 96 not timed; hd 192 / 256 do not fit three).
    if (p.isPaged() && FAGEN_PAGED_TMA_BOX_ROWS(p.pageSize, p.blockN) == 0) {
      KernelPlan three = p;
      three.stages = 3;
      if (sm90ConfigProblem(three, /*ws=*/true).empty())
        p.stages = 3;
    }
  }
  p.warps = p.blockM / 16;
  finalizePlan(p);
  return p;
}

} // namespace planner

/// The seqlen buckets for dense sm90ws forwards, from `fagen tune` on the H200
/// (bf16, 2026-11-30, docs/perf/sm90-fwd.md) where bench_fwd.py and the A/B runs agreed:
/// hd 128 from 4k on 192 x 80 tiles (+2-6 %), hd 128 causal up to 4k with the staged epilogue
/// (+4-9 %); the rest stays the single default. hd 256 (a tune with the default tau 8): causal
/// rows staged at every length, up to 4k on 128 x 64 tiles; non-causal rows one bucket,
/// unstaged, on 128 x 64 tiles. hd 64 causal: rows up to 1k on 128 x 128 tiles (a tune with
/// tile counters had them up to 2k; since the warpgroups without rows pass their tiles, the
/// default 192 x 128 measured 1.06x faster at 1.5k and 2k, and 0.94x at 512 and 1k; 1025-1535
/// rows not measured). fp16 shares the rule (same tiles; not measured). The hd 256 non-causal
/// kernel runs persistent (the grid rule for even tiles).
/// Empty where none applies; a tuning database overrides it.
std::vector<TunedConfig> builtinSeqlenConfigs(const KernelPlan &base) {
  const bool dense = base.scoreMod == ScoreMod::None && !base.dropout && !base.varlen &&
                     base.sparsity == Sparsity::None &&
                     (base.mask == Mask::None ||
                      (base.mask == Mask::Causal && base.maskAlign == MaskAlign::BottomRight));
  const bool causal = base.mask == Mask::Causal;
  if (base.pass != Pass::Forward || base.templ != "sm90ws" || base.tuning != "default" || !dense ||
      base.headDimQK != base.headDimV ||
      (base.headDimQK != 128 && base.headDimQK != 256 && !(base.headDimQK == 64 && causal)))
    return {};
  std::string provenance = "built in: fagen tune on an H200, 2026-11-30";
  int64_t shortMax = 4096;
  KernelConfig shortSeq = configOf(base), longSeq = configOf(base);
  if (base.headDimQK == 64) { // causal only; longer rows keep the default
    provenance = "built in: fagen tune on an H200 (2026-12-01), edge by A/B (2026-12-01)";
    shortMax = 1024;
    shortSeq.blockM = 128;
    shortSeq.warps = 8;
  } else if (base.headDimQK == 128) {
    provenance = "built in: fagen tune on an H200 (2026-11-30), epilogue by A/B (2026-12-01)";
    // Short rows on 128 x 128 tiles, storing O with TMA (finalizePlan): that beat the staged
    // epilogue of the first tune by 4-18 % on causal rows up to 4k (H200, docs/perf/sm90-fwd.md).
    // Non-causal rows take 192 x 80 tiles from 1k: with both storing O by TMA they measured
    // 1.00-1.03x the 128 x 128 kernel at 1.5k-4k in either bundle order, causal rows
    // 0.94-1.02x.
    if (!causal)
      shortMax = 1024;
    longSeq.blockM = 192;
    longSeq.blockN = 80;
    longSeq.warps = 12;
  } else {
    // Causal: staged at every length since the rescale threshold (tau 8) became the default:
    // the H200 tune put the staged epilogue first in both buckets, and 64 keys a tile first
    // for short causal rows (docs/perf/sm90-fwd.md). Non-causal: unstaged since O leaves the
    // registers with 16-byte stores (store_o_rows' quad transpose), so that Q is handed back
    // after the last S and the next tile's Q loads under the epilogue: 1.01-1.05x the staged
    // kernel at 1k-16k (H200). Non-causal rows on 128 x 64 tiles: 2^k keys divide into 64-key
    // tiles, while 80-key tiles compute 1.6 % padded keys at 1k-4k on the H200; back to back
    // under the power cap 64 keys took 0.985-0.996x the time of 80 at 1k-16k (1.1-1.5 % less at
    // 2k-4k), and 0.995-1.04x the speed in bench_fwd.py's rounds.
    if (!causal)
      provenance = "built in: fagen tune on an H200 (2026-11-30), epilogue and tile by A/B "
                   "(2026-12-01, 2026-12-02)";
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

} // namespace fagen
