//===- Plan.h - KernelPlan: one kernel per variant x pass x arch ----------===//
//
// Second stage. Turns a validated AttentionSpec into pure data: which template, which tile
// sizes, warps, pipeline stages, how much shared memory. No CUDA here. Every constraint the
// templates state with static_assert is mirrored here as a spec error naming the spec line.
//
//===----------------------------------------------------------------------===//
#ifndef FAGEN_COMPILER_PLAN_H
#define FAGEN_COMPILER_PLAN_H

#include "compiler/spec/Spec.h"

#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fagen {

/// The tunable fields of a KernelPlan: one point of the template's parameter space.
struct KernelConfig {
  int blockM = 0, blockN = 0, warps = 0, stages = 0;
  int rescaleTau = 0;     ///< -1 always rescale, 0 exact skip, > 0 FA4's threshold (log2 units)
  int exp2EmuPercent = 0; ///< percent of exp2 on the FMA units
  int exp2PolyDegree = 3;
  bool stagedEpilogue = false; ///< sm90ws: O out through shared memory (KernelPlan)
  bool rotateQueryWalk = false; ///< sm90ws backward: rotated query walks (KernelPlan)
  /// sm90ws backward: the dQ writer warp or not (KernelPlan::dqWriter); unset for other
  /// templates, and in a tuning record made before the field existed (the plan's default).
  std::optional<bool> dqWriter;
  /// sm80decode: the split rule (KernelPlan::decodeCtasPerSm, decodeMinTiles); 0 for other
  /// templates.
  int decodeCtasPerSm = 0, decodeMinTiles = 0;

  /// "m128n64w4s2" plus " tau8" / " emu25d3" / " staged" / " rotq" / " dqw" (the dQ writer)
  /// where not the default; a decode plan's split rule as " split1x4" (CTAs per SM x the
  /// fewest tiles a split takes).
  std::string text() const;
  bool operator==(const KernelConfig &o) const;
  bool operator!=(const KernelConfig &o) const { return !(*this == o); }
  bool operator<(const KernelConfig &o) const;
};

/// A plan's spillFallback is built instead when ptxas reports more spill bytes than this. Up
/// to 16 bytes (4 registers) the first config stays: on the H200 each such kernel measured
/// faster than its spill-free alternatives (portable hd 128 softcap 1.29x over 64 x 64, hd 64
/// softcap 1.02x, hd 128 window with windows of 1k-4k keys 1.12-1.23x; docs/perf/sm80-fwd.md),
/// while 116 bytes (portable hd 64 causal softcap) measured 3 % slower than its fallback.
constexpr int kSpillFallbackBytes = 16;
/// The spill bytes above which a plan's spillFallback is built instead: kSpillFallbackBytes,
/// or 0 for the sm90ws template, whose kernels issue 5 wants spill-free (checked in CI).
inline int spillFallbackBytes(const std::string &templ) {
  return templ == "sm90ws" ? 0 : kSpillFallbackBytes;
}

/// Everything the emitter and the bundle need to know about one kernel: its variant
/// (core/Variant.h) and its config.
struct KernelPlan : Variant {
  std::string name;     ///< the kernel's symbol; spells its specialization
  std::string variant;  ///< spec variant name(s) served, comma-separated
  std::string arch;     ///< canonical target arch, e.g. "sm_90a"
  std::string templ;    ///< template family: "sm80" (portable mma.sync), "sm90" (wgmma, sm_90a,
                        ///< cp.async), "sm90ws" (wgmma + TMA, warp-specialized, sm_90a),
                        ///< "sm80decode" (portable split-KV decode, a forward kernel)
  /// sm80decode: the most query tokens per sequence of the calls it serves (spec
  /// decode.q_tokens); 0 for other templates.
  int qTokens = 0;
  /// sm80decode: the split rule the runtime plans a call's split count with
  /// (templates/common/decode_split.h decode_num_splits: one wave of decodeCtasPerSm CTAs per
  /// SM, no split shorter than decodeMinTiles key tiles); the header's defaults, or a tuning
  /// record's. Not in the kernel's code; its name spells a rule other than the defaults
  /// (_split2x1). 0 for other templates.
  int decodeCtasPerSm = 0, decodeMinTiles = 0;
  int sparseRows = 0, sparseCols = 0;     ///< static layout: table size in blocks
  std::vector<uint8_t> sparseTable;       ///< static layout: rows x cols, 1 = computed
  int prePostThreads = 0;                 ///< bwd: threads of the _pre and _post kernels;
                                          ///< sm80decode: of NAME_combine and NAME_merge
  int blockM = 0, blockN = 0, warps = 0, stages = 0;
  int threads = 0;
  int smemBytes = 0;
  /// FlashAttention-4's conditional rescaling threshold, log2 units of the scaled logits:
  /// -1 rescale O and l every tile (branch-free), 0 only when a row max grew (exact), tau > 0
  /// keep a stale max until a row max exceeds it by more than tau (FA4: 8).
  int rescaleTau = 0;
  int exp2EmuPercent = 0; ///< percent of exp2 computed by a polynomial on the FMA units
  int exp2PolyDegree = 3; ///< degree of that polynomial
  /// sm90ws: each warp writes O through its rows of the Q tile, with 16-byte stores (the
  /// template's kStagedEpilogue); a tuning choice (H200: +2-9 % at seqlen 2k for hd 128 causal
  /// and hd 256, -2..-6 % at 16k causal; docs/perf/sm90-fwd.md).
  bool stagedEpilogue = false;
  /// sm90ws backward: each key tile walks its query tiles from a different one (the template's
  /// kRotateQueryWalk); default ws_bwd_rotates_query_walk (common/ws_bwd_layout.h: head dim 64,
  /// not deterministic), a tuning choice. Kernel names spell it where it is not the default.
  bool rotateQueryWalk = false;
  /// sm90ws backward: a warp of the producer warpgroup adds the consumers' dQ blocks (the
  /// template's kDqWriter) or each consumer warpgroup adds its own; default ws_bwd_dq_writer
  /// (common/ws_bwd_layout.h; always in the deterministic mode), a tuning choice. Kernel names
  /// spell it where it is not the default.
  bool dqWriter = false;
  /// sm90ws launch: one CTA per SM, each walking its share of the work tiles (else one CTA per
  /// work tile); derived by finalizePlan.
  bool persistent = false;
  /// sm90ws forward: the kernel can take its work tiles from a counter in the caller's forward
  /// workspace (the template's kTileCounter; with one, the runtime launches one CTA per SM that
  /// takes the next tile as it frees up); derived by finalizePlan for uneven work tiles.
  bool tileCounter = false;
  /// sm90ws forward: each consumer warpgroup stages its O rows in an O tile of shared memory
  /// and stores them with TMA (the template's kTmaStoreO); derived by finalizePlan (head dims
  /// 64 and 128, not varlen, not the staged epilogue, where the O tile fits).
  bool tmaStoreO = false;
  /// The calls the kernel is meant for, on max(seqlen_q, seqlen_k): the whole range for
  /// planner defaults, a shape bucket for tuned kernels.
  int64_t seqlenMin = 0;
  int64_t seqlenMax = int64_t(1) << 40;
  std::string tuning;   ///< "default", "spec" (forced by the spec's tile:) or a tuning record
  /// A planner default's second choice: `fagen build` compiles this config instead when ptxas
  /// reports more than spillFallbackBytes() of spills for the first and the second spills less
  /// (forward variants with per-logit work, portable or sm90ws, whose register needs differ by
  /// arch and nvcc version). Empty for plans that pin a tile dimension, tuned plans (cleared by
  /// applyConfig) and kernels shared by variants whose fallbacks differ.
  std::optional<KernelConfig> spillFallback;
};

/// The kernel's symbol, spelling its specialization (docs/design/variants-and-backward.md):
/// fagen_{pass}_{dtype}_hd{qk}[x{v}]_{mask}[_{features}]_{templ}_{config}, e.g.
/// fagen_fwd_bf16_hd128_causal_sm80_m128n64w4s2_r8 or
/// fagen_bwd_bf16_hd192x128_windowtl_softcap_drop_bs128_1a2b3c4d_varlen_det_sm80_m64n64w8s1.
/// A backward plan's cubin also holds NAME_pre and NAME_post.
std::string kernelName(const KernelPlan &plan);

/// The entry points of a plan's cubin, main kernel first: {NAME} for a forward plan,
/// {NAME, NAME_pre, NAME_post} for a backward plan (docs/design/variants-and-backward.md),
/// {NAME, NAME_combine, NAME_merge} for a decode plan, and NAME_append for a paged one
/// (templates/abi/decode_params.h).
std::vector<std::string> entryPointNames(const KernelPlan &plan);

/// Whether the sm90ws (wgmma, TMA) forward template serves `plan`'s variant: any mask, score
/// mod, dropout and varlen, head dims (Q/K and V each) in {64, 96, 128, 192, 256}, block-sparse
/// blocks of 128, 192 or 256 tokens (192: only where a 192-row tile fits, head_dim_v <= 128; the
/// planner falls back to the portable template otherwise).
bool sm90ServesVariant(const KernelPlan &plan);

/// A static block layout as a table: rows x cols bytes, row-major, 1 = computed.
struct BlockTable {
  int block = 0, rows = 0, cols = 0;
  std::vector<uint8_t> table;
  std::string hash; ///< 8 hex digits of a hash of (block, rows, cols, table)
};
/// The table of a static layout (local_global, strided, file); docs/spec.md#block-sparse.
BlockTable blockTable(const BlockSparseSpec &sparse);

/// Whether the sm80 template can build `plan` for its arch (the template's static_asserts,
/// mirrored). The error names the config and the fix; without a spec location.
llvm::Error checkKernelPlan(const KernelPlan &plan);

/// Recomputes the derived fields (threads, smemBytes, name) after a config change.
void finalizePlan(KernelPlan &plan);

/// The tunable fields of a plan.
KernelConfig configOf(const KernelPlan &plan);

/// `base` with `config` applied (derived fields and name recomputed), or the planner's reason
/// the template cannot build it.
llvm::Expected<KernelPlan> applyConfig(const KernelPlan &base, const KernelConfig &config);


/// A configuration measured best for one range of calls (from `fagen tune`'s database).
struct TunedConfig {
  int64_t seqlenMin = 0, seqlenMax = int64_t(1) << 40; ///< on max(seqlen_q, seqlen_k)
  KernelConfig config;
  std::string provenance; ///< recorded in the bundle: where and how this config won
};

/// Tuned configs per workload (workloadKey()), each list sorted by seqlenMin.
using TuningTable = std::map<std::string, std::vector<TunedConfig>>;

/// The canonical workload of a plan, as the tuning database keys it: every variant feature, so
/// that records of different variants never mix: "fwd bf16 hd128x128 causal sm_90a" for a
/// dense kernel, "bwd bf16 hd128x128 windowtl softcap drop bsr128 varlen det sm_90" otherwise,
/// "fwd bf16 hd128x128 causal decode sm_90a" for a decode kernel.
std::string workloadKey(const KernelPlan &plan);
/// Whether `key` (workloadKey) is a decode kernel's.
bool isDecodeWorkload(const std::string &key);

/// The largest dynamic shared memory a block may opt into on `arch`, in bytes.
int archSmemLimit(const std::string &arch);

/// A head dim as the sm80 templates store it: padded to their MMA granularity (16).
int paddedHeadDim(int headDim);
/// Shared memory of the sm80 forward template: FwdConfig::kSmemBytes (common/smem_layout.h).
int sm80FwdSmemBytes(int headDimQK, int headDimV, int blockM, int blockN, int stages);
/// Shared memory of the sm80 backward template's main kernel: BwdConfig::kSmemBytes (ditto).
int sm80BwdSmemBytes(int headDimQK, int headDimV, int blockM, int blockN, int stages,
                     bool varlen);
/// Shared memory of the sm80 decode template: DecodeConfig::kSmemBytes (common/smem_layout.h).
int sm80DecodeSmemBytes(int headDimQK, int headDimV, int blockM, int blockN, int stages,
                        int warps);
/// Shared memory of the sm90 (wgmma) forward template; mirrors sm90::FwdConfig::kSmemBytes.
int sm90FwdSmemBytes(int headDim, int blockM, int blockN, int stages);
/// Shared memory of the sm90ws backward template: WsBwdConfig::kSmemBytes (both read
/// templates/common/ws_bwd_layout.h).
int sm90WsBwdSmemBytes(int headDim, int blockM, int blockN, int stages);
/// Shared memory of the sm90ws (TMA, warp-specialized) forward template; mirrors
/// sm90::WsFwdConfig::kSmemBytes.
int sm90WsFwdSmemBytes(int headDimQK, int headDimV, int blockM, int blockN, int stages,
                       bool tileCounter = false, bool tmaStoreO = false);

/// Whether `plan` is a split-KV decode kernel (template sm80decode).
inline bool isDecodePlan(const KernelPlan &plan) { return plan.templ == "sm80decode"; }

/// Plans every kernel of `spec`: one per variant x pass x arch (x tuned seqlen range), and a
/// decode kernel per arch for a variant whose passes list decode (never tuned; kernels of
/// equal names keep the largest qTokens).
/// `archs`, when non-empty, replaces the spec's targets. Backward kernels use the sm80
/// template on every arch; forward kernels the sm90ws template on sm_90a where it serves the
/// variant (sm90ServesVariant), else sm80. A spec's `tile:` pins the forward kernel only.
/// With `tuning`, a workload that has tuned configs gets one kernel per tuned seqlen range
/// (contiguous ranges with the same config merged), plus the default kernel for calls no
/// range covers; a spec's `tile:` still wins over tuning. Without tuning for a workload, the
/// planner's own seqlen buckets apply where it has measured some (dense sm90ws forwards at hd
/// 128 and 256: builtinSeqlenConfigs), unless `builtinBuckets` is false (the tuner's view: one
/// default per workload). Kernels that come out identical for several variants are planned
/// once. Sorted by (name, arch, seqlenMin): deterministic.
llvm::Expected<std::vector<KernelPlan>> planKernels(const AttentionSpec &spec,
                                                    const std::vector<std::string> &archs,
                                                    const TuningTable *tuning = nullptr,
                                                    bool builtinBuckets = true);

/// The planner's seqlen buckets for `base` (one config per range of max(seqlen_q, seqlen_k)),
/// measured on the H200; empty for workloads without any.
std::vector<TunedConfig> builtinSeqlenConfigs(const KernelPlan &base);

/// The printable artifact of this stage (`fagen plan`): one block per kernel.
std::string formatPlans(const std::vector<KernelPlan> &plans);

/// A range of max(seqlen_q, seqlen_k) in words: "any", "up to 4096", "4097 and longer",
/// "2049 to 8192" (1 << 40 is open-ended).
std::string seqlenRangeText(int64_t min, int64_t max);

} // namespace fagen

#endif // FAGEN_COMPILER_PLAN_H
