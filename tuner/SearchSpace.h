//===- SearchSpace.h - what `fagen tune` measures: candidates and buckets -===//
//
// The search space is data (SearchSpace), not code paths. The search is staged to stay
// within minutes per spec:
//   1. "tile": every (block_m, block_n, warps, stages) that the planner's checks accept
//      (rows per warp, shared memory, accumulator budget), with the exact softmax
//      (rescale_tau 0, no exp2 emulation); the planner's default tile first;
//   2. "softmax": on the best `softmaxTiles` tiles of stage 1, per bucket, every
//      (rescale_tau, exp2_emu_percent, staged epilogue) of the space, plus the planner's
//      default config itself where stage 1 did not run it (e.g. sm90ws's tau 8).
// Backward kernels have no softmax parameters: their space has one stage-2 point, so stage 1
// (tiles, warps, stages) is their whole search.
// After static pruning, ptxas prunes again (spills > 0), and numerics gate every candidate.
// Nothing here needs a GPU: this is what the unit tests pin.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_TUNER_SEARCHSPACE_H
#define FAGEN_TUNER_SEARCHSPACE_H

#include "compiler/plan/Plan.h"
#include "compiler/spec/Spec.h"
#include "tuner/TuningDb.h"

#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace fagen {

/// The parameter values the tuner tries for a forward template (defaults: the sm80 and sm90
/// templates'; searchSpaceFor gives each template its own).
struct SearchSpace {
  std::vector<int> blockM = {64, 128};
  std::vector<int> blockN = {32, 64, 128};
  std::vector<int> warps = {4, 8};
  std::vector<int> stages = {1, 2, 3};
  std::vector<int> rescaleTau = {-1, 0, 8};
  std::vector<int> exp2EmuPercent = {0, 10, 25};
  int exp2PolyDegree = 3;
  std::vector<bool> stagedEpilogue = {false}; ///< sm90ws: also {true} (stage 2)
  std::vector<bool> rotateQueryWalk = {false}; ///< sm90ws backward: also {true} (stage 1)
  /// sm90ws backward: the dQ writer or the consumers adding dQ, {false, true} (stage 1; the
  /// deterministic mode only the writer); unset: the plan's.
  std::vector<std::optional<bool>> dqWriter = {std::nullopt};
  /// sm80decode: the split rule's CTAs per SM and fewest key tiles a split takes (0: the
  /// plan's, every other template).
  std::vector<int> decodeCtasPerSm = {0};
  std::vector<int> decodeMinTiles = {0};
  unsigned softmaxTiles = 2; ///< stage 2 runs on this many best tiles per bucket
};

/// The space for the template and pass of `base`. Forward sm90ws: block_m 128/192 (2 or 3
/// consumer warpgroups, warps = block_m / 16), block_n 64/80/96/112/128/176 (176: +3-8 % at
/// hd 128 and seqlen >= 8k, -7 % at 2k; H200, docs/perf/sm90-fwd.md), two stages, rescale
/// threshold 0 or 8 (stage 2; 8 is the default, +0.6-5.7 % on the H200), emulated exp2 0 or
/// 25 % (it lost on the H200; another GPU may differ), the staged epilogue or not (stage 2; on
/// the H200 it wins at 2k, loses at 16k causal).
/// Backward (no softmax stage): block_m and block_n 64/128, 4 or 8 warps, 1-3 Q/dO stages, of
/// which the planner's checks leave, for sm80, 1 or 2 stages and the tiles whose warp grids
/// and shared memory the template takes; for sm90ws, the template's one tile per head dim (hd
/// 64: 128 x 128, hd 128: 64 x 128, hd 256: 64 x 64; bwd_ws_config.cuh's static_asserts) and
/// the stages that fit shared memory (hd 64: 1-2, hd 128: 1-3, hd 256: 1), each with the query
/// walk rotated or not (not in the deterministic mode; measured default: rotated at hd 64 only,
/// common/ws_bwd_layout.h), and with its dQ added by a producer warp (the dQ writer) or by the
/// consumer warpgroups (the deterministic mode: the writer only; measured default:
/// ws_bwd_dq_writer). The portable backward's dQ strategy follows the variant (fp32 atomics, or
/// a deterministic kernel's semaphore order, which is another workload).
SearchSpace searchSpaceFor(const KernelPlan &base);

/// A config made into a plan, or why the planner's checks refuse it.
struct Candidate {
  TuneConfig config;
  KernelPlan plan;
  std::string stage; ///< "tile" or "softmax"
};

/// Stage 1: the tile grid (with the sm90ws backward's query walks) with the exact softmax;
/// configs the planner's checks refuse are left out and counted in `pruned`. The base plan's own config is always included (first).
std::vector<Candidate> tileCandidates(const KernelPlan &base, const SearchSpace &space,
                                      unsigned *pruned = nullptr);

/// Stage 2: every (rescale_tau, exp2_emu_percent, staged epilogue) of the space on each of
/// `tiles`, except each tile's stage-1 point (tau 0, no emulation, the base's epilogue); plus
/// the base plan's own config when it is not its stage-1 point (e.g. sm90ws's default tau 8),
/// so the default is always measured.
std::vector<Candidate> softmaxCandidates(const KernelPlan &base, const SearchSpace &space,
                                         const std::vector<TuneConfig> &tiles,
                                         unsigned *pruned = nullptr);

/// The `n` fastest Ok records' tiles among `records` (one workload and bucket), fastest
/// first, each tile once, with tau 0 and no emulation.
std::vector<TuneConfig> bestTiles(const std::vector<const TuningRecord *> &records, unsigned n);

/// Buckets for representative seqlens (sorted ascending): bucket i serves the seqlens from
/// just above the geometric mean of seqlen i-1 and i up to that of i and i+1; the first
/// starts at 1, the last is unbounded. Shape: batch 16384/seqlen (at least 1), heads_q
/// 2048/head_dim (at least 1), heads_kv = heads_q / groupSize (at least 1).
std::vector<ShapeBucket> makeBuckets(std::vector<int> seqlens, int headDim, int groupSize);

/// A decode kernel's buckets: the calls its split rule is measured on, one query token at
/// batch 1, 4 and 16 over each cache length in `contexts`, 8 kv heads and `groupSize` query
/// heads each; every bucket serves every call (the rule is one for all), named "b4k16384".
std::vector<ShapeBucket> decodeBuckets(std::vector<int> contexts, int groupSize);

/// The cache lengths of decodeBuckets without --decode-contexts: 2048, 16384, 65536.
const std::vector<int> &defaultDecodeContexts();

/// The default representative seqlens: 512 (1..1024), 2048 (1025..4096), 8192 (4097..).
const std::vector<int> &defaultBucketSeqlens();

/// Parses "--shapes 512,2048,8192" (or another option's list of lengths; errors name `option`).
llvm::Expected<std::vector<int>> parseSeqlenList(const std::string &text,
                                                 const std::string &option = "--shapes",
                                                 const std::string &example = "512,2048,8192");

/// The GQA group size (heads_q / heads_kv) of the first variant of `plan` that states heads
/// in `spec`; 1 when none does.
int groupSizeOf(const KernelPlan &plan, const AttentionSpec &spec);

/// Forward FLOPs of a shape: 4 * B * Hq * Sq * Sk * D, halved when causal.
double forwardFlops(const ShapeBucket &bucket, int headDim, bool causal);

/// FLOPs of a pass over a shape: the forward's, and 2.5x that for the backward (its five
/// matrix products to the forward's two; FlashAttention's convention, bench/bench_bwd.py).
double passFlops(Pass pass, const ShapeBucket &bucket, int headDim, bool causal);

} // namespace fagen

#endif // FAGEN_TUNER_SEARCHSPACE_H
