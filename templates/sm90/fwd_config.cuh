// fagen sm90: the forward kernel's configuration (sm_90a, wgmma). The planner mirrors every
// constant and static_assert here (compiler/plan); a generated kernel checks kSmemBytes against
// the plan.
#ifndef FAGEN_TEMPLATES_SM90_FWD_CONFIG_CUH
#define FAGEN_TEMPLATES_SM90_FWD_CONFIG_CUH

#include <type_traits>

#include "abi/decode_params.h"
#include "abi/tma_params.h"
#include "common/types.cuh"
#include "common/variants.cuh"
#include "common/ws_registers.h"

namespace fagen {
namespace sm90 {

/// The emulated-exp2 parameters of both wgmma configs, checked in one place.
template <int kExp2EmuPercent, int kExp2PolyDegree> struct Exp2EmuChecks {
  static_assert(kExp2EmuPercent >= 0 && kExp2EmuPercent <= 50,
                "kExp2EmuPercent must be in [0, 50]");
  static_assert(kExp2PolyDegree >= 3 && kExp2PolyDegree <= 5,
                "kExp2PolyDegree must be in [3, 5] (degrees 1 and 2 fail the tolerance rule, "
                "measured on the sm80 template)");
  static constexpr bool kOk = true;
};

/// One CTA computes a kBlockM-row query tile of one (batch, head) with kBlockM / 64 consumer
/// warpgroups (64 rows each, the M of one wgmma), visiting kBlockN-row key/value tiles held in
/// a ring of kStages K slots and kStages V slots (cp.async, prefetch distance kStages - 1 tiles).
///
/// Softmax: O is rescaled only when some row max of the warp grew (exact max). Of each thread's
/// kBlockN / 4 probabilities per row and key tile, the first round(kBlockN / 4 *
/// kExp2EmuPercent / 100) are computed by exp2_poly<kExp2PolyDegree> (FMA pipe) instead of
/// ex2.approx (MUFU), as in sm80::FwdConfig (FlashAttention-4, section 3.1.3).
///
/// Variant (common/variants.cuh): dense NoMask or CausalMask only, with no score mod, dropout,
/// block sparsity or varlen (the sm80 and sm90ws templates serve the other variants).
///
/// kRefillAfterIssue: each key step issues its cp.async refill after its wgmmas instead of
/// before them, so the tensor cores do not wait for 16-20 cp.async a thread. Default at hd 256
/// only: +2-7 % there, neutral to -6 % at hd 128 (H200, 2026-11-30, docs/perf/sm90-fwd.md).
///
/// Options: a struct (the generated kernel's KernelOptions) that derives from FwdOptions and
/// sets Element, Variant, kHeadDim, kBlockM, kBlockN and kStages (and any of FwdOptions'
/// defaults; kRefillAfterIssue, where it sets none, is kHeadDim == 256).
struct FwdOptions {
  static constexpr int kExp2EmuPercent = 0;
  static constexpr int kExp2PolyDegree = 3;
};

/// Options::kRefillAfterIssue where the options set it, else the measured default.
template <class Options, class = void> struct RefillAfterIssue {
  static constexpr bool value = Options::kHeadDim == 256;
};
template <class Options>
struct RefillAfterIssue<Options, std::void_t<decltype(Options::kRefillAfterIssue)>> {
  static constexpr bool value = Options::kRefillAfterIssue;
};

template <class Options> struct FwdConfig : VariantParts<typename Options::Variant> {
  using Variant = typename Options::Variant;
  using Element = typename Options::Element;
  static constexpr int kHeadDim = Options::kHeadDim;
  static constexpr int kBlockM = Options::kBlockM;
  static constexpr int kBlockN = Options::kBlockN;
  static constexpr int kStages = Options::kStages;
  static constexpr int kExp2EmuPercent = Options::kExp2EmuPercent;
  static constexpr int kExp2PolyDegree = Options::kExp2PolyDegree;
  static constexpr bool kRefillAfterIssue = RefillAfterIssue<Options>::value;
  static constexpr int kExp2EmuColumns = (kBlockN / 4 * kExp2EmuPercent + 50) / 100;

  static constexpr int kWarpgroups = kBlockM / 64;
  static constexpr int kThreads = 128 * kWarpgroups;
  // 1: no register cap beyond the 255 per thread. Small tiles still get several CTAs per SM when
  // registers and shared memory allow (hd64 64x128: 3, hd128 64x64: 2), and those CTAs, unlike
  // the warpgroups of one CTA, are not in lockstep (measured: +15-35 % at hd64, H200,
  // 2026-11-30, docs/perf/sm90-fwd.md).
  static constexpr int kMinBlocksPerSm = 1;

  // Shared memory, every tile in 128-byte-swizzled 64-column blocks (sm90/tile_ops.cuh): the Q
  // tile, kStages K tiles, kStages V tiles, plus 1024 bytes to align the base to a swizzle atom
  // (dynamic shared memory is only guaranteed 16-byte alignment).
  static constexpr int kSmemQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kSmemKvTileBytes = kBlockN * kHeadDim * 2;
  static constexpr int kSmemAlignBytes = 1024;
  static constexpr int kSmemBytes =
      (kBlockM + 2 * kStages * kBlockN) * kHeadDim * 2 + kSmemAlignBytes;

  static_assert(is_element<Element>::value, "Element must be fagen::half_t or fagen::bfloat16_t");
  static_assert((std::is_same<typename Variant::Mask, NoMask>::value ||
                 std::is_same<typename Variant::Mask, CausalMask>::value) &&
                    std::is_same<typename Variant::ScoreMod, NoScoreMod>::value &&
                    std::is_same<typename Variant::Dropout, NoDropout>::value &&
                    std::is_same<typename Variant::Sparsity, DenseBlocks>::value &&
                    !Variant::kVarlen,
                "the sm90 template serves only dense Variant<NoMask> and Variant<CausalMask> (no "
                "score mod, dropout, block sparsity or varlen): use the sm80 template");
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
                "kHeadDim must be 64, 128 or 256 (whole 128-byte swizzle rows; wgmma N of O)");
  static_assert(kBlockM == 64 || kBlockM == 128 || kBlockM == 192,
                "kBlockM must be 64, 128 or 192 (1 to 3 warpgroups of 64 rows)");
  static_assert(kBlockN == 64 || kBlockN == 80 || kBlockN == 128 || kBlockN == 176 ||
                    kBlockN == 256,
                "kBlockN must be 64, 80, 128, 176 or 256 (the wgmma N of S, with an atom in "
                "sm90/wgmma.cuh; whole 8-row swizzle atoms; 16-key steps of P V)");
  static_assert(kStages >= 2 && kStages <= 4, "kStages must be in [2, 4]");
  static_assert(Exp2EmuChecks<kExp2EmuPercent, kExp2PolyDegree>::kOk, "");
  static_assert(kSmemBytes <= 227 * 1024,
                "kSmemBytes exceeds the 227 KB of shared memory a Hopper CTA may use: lower "
                "kStages, kBlockN or kBlockM");
  // Registers per thread of a warpgroup: S (kBlockN / 2) + O (kHeadDim / 2) + P (kBlockN / 4),
  // at most 192 of the 255 a thread may have.
  static_assert(kBlockN / 2 + kHeadDim / 2 + kBlockN / 4 <= 192,
                "S + O + P accumulators need more than 192 registers per thread: lower kBlockN");
};

/// The warp-specialized forward (sm90/fwd_ws_kernel.cuh): a producer warpgroup (one thread
/// issues every TMA load; setmaxnreg lowers its registers to kProducerRegs) in front of
/// kBlockM / 64 consumer warpgroups (raised to kConsumerRegs), FwdConfig's wgmma tiles and
/// softmax. K and V slots are handed over through mbarriers (full: TMA landed; empty: every
/// consumer warp's wgmmas that read the slot completed), so no barrier spans the whole CTA.
///
/// Head dims: kHeadDimQK (Q, K) and kHeadDimV (V, O), each 64, 96, 128, 192 or 256. The MMAs see
/// them padded to whole 64-column swizzle blocks (kDimQK, kDimV: 96 -> 128); TMA fills the
/// padding with zeros (the tensor maps' head-dim extent is the real one), so it adds nothing to
/// S and O's padded columns are never stored.
///
/// Variant (common/variants.cuh): every mask, score mod, dropout, block sparsity (the tiles must
/// divide the layout's block) and varlen.
///
/// kPingPong: the consumer warpgroups take turns to issue their wgmmas (named barriers, a
/// ring), so that one warpgroup's softmax overlaps the others' tensor-core work
/// (FlashAttention-3, section 3.1) instead of all of them exponentiating at once.
/// kExp2EmuPercent, kExp2PolyDegree: as FwdConfig.
/// kStagedEpilogue: each warp writes its O rows through its own (dead) rows of the Q tile and
/// out with 16-byte stores (O no wider than Q); the Q tile is then handed back to the producer
/// after the epilogue instead of after the last S, which delays a persistent kernel's next Q.
/// A tuning choice (H200, docs/perf/sm90-fwd.md): +2-9 % at seqlen 2k for hd 128 causal
/// and hd 256, -2..-6 % at 16k causal, -4..-7 % for the persistent hd 64 kernels.
/// kTileCounter: the kernel can take its work tiles from a global counter
/// (fagen_fwd_params::tile_counter, zeroed before the launch; null: the static deal of
/// WsTileScheduler), which the producer reads and hands to the consumers through a two-entry
/// ring in shared memory (ws_tile_scheduler.cuh's WsTileRing). For uneven work tiles (causal,
/// windows, varlen; not block sparsity, whose producer then spills): one CTA per SM that takes
/// the next tile, heaviest first, when it frees up.
/// kTmaStoreO: each consumer warpgroup writes its 64 rows of O into an O tile of its own in
/// shared memory and stores them with TMA (fagen_fwd_tma_maps::o), one bulk copy per 64
/// columns that runs while the warpgroup goes on to its next tile; the Q tile is handed back
/// after the last S as without staging. Not for varlen (a tile's rows past its sequence would
/// land in the next one's) nor with kStagedEpilogue.
/// kStaggerSlack (the planner's kernels: the default): in persistent grids of dense tiles
/// without a mask on the static deal (no tile counter, varlen or sparsity), where the tiles do
/// not divide into whole rounds and every tile is full (WsTileScheduler::has_spare_tile), the
/// CTAs that get one tile fewer start half a tile late, so that their tile boundaries (each a
/// burst of Q loads and O stores from every SM at once) fall between the others'; they had a
/// whole tile to spare. (H200, docs/perf/sm90-fwd.md: hd 256 2k, where 32 of 132 CTAs
/// start late, a tile's cost beyond its steps 2.74 -> 2.47 steps in one trace, 0.5-1.2 % less
/// time back to back.) tests/gpu/ws_trace.cu turns it off to trace without it.
///
/// kPageSize: tokens per page of a paged KV cache (chunked prefill: varlen queries over the
/// pages of abi/decode_params.h; 0: contiguous K and V). K and V then come by TMA page run by
/// page run where kTmaPages (V's run that holds a sequence's end gathered with cp.async, its rows
/// past the end zeroed: a TMA box cannot stop there, and stale values would reach P V), else
/// the whole producer warpgroup gathers each tile with cp.async (sm90/ws_paged_kv.cuh); Q still
/// by TMA; 2 consumer warpgroups (the gather's register split); the kernel's entry point is
/// fwd_ws_paged_kernel.
///
/// Options: a struct (the generated kernel's KernelOptions) that derives from WsFwdOptions and
/// sets Element, Variant, kHeadDimQK, kHeadDimV, kBlockM, kBlockN and kStages (and any of
/// WsFwdOptions' defaults).
struct WsFwdOptions {
  static constexpr int kPageSize = 0;
  static constexpr bool kPingPong = true;
  static constexpr int kExp2EmuPercent = 0;
  static constexpr int kExp2PolyDegree = 3;
  static constexpr bool kStagedEpilogue = false;
  static constexpr int kRescaleTau = 0;
  static constexpr bool kTileCounter = false;
  static constexpr bool kTmaStoreO = false;
  static constexpr bool kStaggerSlack = true;
};

template <class Options> struct WsFwdConfig : VariantParts<typename Options::Variant> {
  using Variant = typename Options::Variant;
  using Element = typename Options::Element;
  static constexpr int kHeadDimQK = Options::kHeadDimQK;
  static constexpr int kHeadDimV = Options::kHeadDimV;
  static constexpr int kDimQK = (kHeadDimQK + 63) / 64 * 64; // as the MMAs see them
  static constexpr int kDimV = (kHeadDimV + 63) / 64 * 64;
  static constexpr int kBlockM = Options::kBlockM;
  static constexpr int kBlockN = Options::kBlockN;
  static constexpr int kStages = Options::kStages;
  static constexpr bool kPingPong = Options::kPingPong;
  static constexpr int kExp2EmuPercent = Options::kExp2EmuPercent;
  static constexpr int kExp2PolyDegree = Options::kExp2PolyDegree;
  static constexpr int kExp2EmuColumns = (kBlockN / 4 * kExp2EmuPercent + 50) / 100;
  static constexpr bool kStagedEpilogue = Options::kStagedEpilogue;
  /// FlashAttention-4's rescale threshold (softmax_exp): 0 rescales O whenever a row max
  /// grows, 1..8 only when it grows by more than that many powers of two.
  static constexpr int kRescaleTau = Options::kRescaleTau;
  static_assert(kRescaleTau >= 0 && kRescaleTau <= 8, "kRescaleTau must be in 0..8");
  /// Steps after the first start the exponentials from the kept running max (ws_consumer.cuh,
  /// softmax_exp_kept_max; the kRescaleTau rule keeps a row's max in most steps), a warp whose
  /// max moves recomputes its S. Not in the 192-row hd 64 kernels with dropout or a score mod:
  /// with the recompute ptxas spilled 8-160 bytes there (nvcc 13.0; dropout, ALiBi), and the
  /// planner's spill fallback would then take 128-row tiles, measured 1.11-1.15x slower with
  /// dropout (H200, docs/perf/sm90-fwd.md).
  static constexpr bool kKeptMax =
      kRescaleTau > 0 && !(kBlockM == 192 && kHeadDimV <= 64 &&
                           (Variant::Dropout::kEnabled ||
                            !std::is_same<typename Variant::ScoreMod, NoScoreMod>::value));
  static constexpr bool kTileCounter = Options::kTileCounter;
  static constexpr bool kTmaStoreO = Options::kTmaStoreO;
  static constexpr int kPageSize = Options::kPageSize;
  static constexpr bool kPaged = kPageSize != 0;
  /// Paged: K and V by TMA page by page where a key tile lies in one page or spans whole ones,
  /// boxes of kPagedBoxRows rows (sm90/ws_paged_kv.cuh ws_load_paged_tile), else gathered with
  /// cp.async (ws_gather_paged_tile).
  static constexpr int kPagedBoxRows = kPaged ? FAGEN_PAGED_TMA_BOX_ROWS(kPageSize, kBlockN) : 0;
  static constexpr bool kTmaPages = kPagedBoxRows != 0;
  /// Arrivals that fill a K or V slot: the TMA thread's (with the bytes), or one per producer
  /// thread of a paged kernel.
  static constexpr int kKvFullArrivals = kPaged ? 128 : 1;
  static constexpr bool kStaggerSlack =
      Options::kStaggerSlack && !kTileCounter &&
      std::is_same<typename Variant::Mask, NoMask>::value && !Variant::kVarlen &&
      !Variant::Sparsity::kSparse;

  static constexpr int kConsumers = kBlockM / 64;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int kMinBlocksPerSm = 1;
  // Registers a thread (common/ws_registers.h, which the planner's budget reads too).
  static constexpr int kProducerRegs = ws_producer_registers(kConsumers, Variant::kVarlen, kPaged);
  static constexpr int kConsumerRegs = ws_consumer_registers(kConsumers, Variant::kVarlen, kPaged);
  static_assert(ws_registers_fit(kConsumers, Variant::kVarlen, kPaged),
                "the warpgroups' registers after setmaxnreg exceed what the CTA was launched "
                "with (common/ws_registers.h)");

  // Shared memory, every tile in 128-byte-swizzled 64-column blocks (sm90/tile_ops.cuh): the Q
  // tile, kStages K tiles, kStages V tiles, kTmaStoreO: the O tile, then the mbarriers (Q full,
  // Q empty, then K full, V full, K empty, V empty per stage), plus 1024 bytes to align the base
  // to a swizzle atom; kTileCounter: then the tile ring's mbarriers (full, empty per entry) and
  // its two entries.
  static constexpr int kSmemQBytes = kBlockM * kDimQK * 2;
  static constexpr int kSmemKTileBytes = kBlockN * kDimQK * 2;
  static constexpr int kSmemVTileBytes = kBlockN * kDimV * 2;
  static constexpr int kSmemOBytes = kTmaStoreO ? kBlockM * kDimV * 2 : 0;
  static constexpr int kSmemAlignBytes = 1024;
  static constexpr int kOOffset = kSmemQBytes + kStages * (kSmemKTileBytes + kSmemVTileBytes);
  static constexpr int kBarrierOffset = kOOffset + kSmemOBytes;
  static constexpr int kTileRingOffset = kBarrierOffset + 8 * (2 + 4 * kStages);
  static constexpr int kSmemBytes =
      kTileRingOffset + kSmemAlignBytes + (kTileCounter ? 8 * 4 + 16 * 2 : 0);

  static_assert(is_element<Element>::value, "Element must be fagen::half_t or fagen::bfloat16_t");
  static constexpr bool served_head_dim(int d) {
    return d == 64 || d == 96 || d == 128 || d == 192 || d == 256;
  }
  static_assert(served_head_dim(kHeadDimQK) && served_head_dim(kHeadDimV),
                "kHeadDimQK and kHeadDimV must be 64, 96, 128, 192 or 256 (padded to 64-column "
                "swizzle blocks; wgmma N of O)");
  static_assert(kConsumers * 64 == kBlockM && (kConsumers == 2 || kConsumers == 3),
                "the warp-specialized kernel needs kBlockM 128 or 192 (2 or 3 consumer "
                "warpgroups; registers are split for those)");
  static_assert(kBlockN == 64 || kBlockN == 80 || kBlockN == 96 || kBlockN == 112 ||
                    kBlockN == 128 || kBlockN == 176 || kBlockN == 256,
                "kBlockN must be 64, 80, 96, 112, 128, 176 or 256 (the wgmma N of S, with an atom "
                "in sm90/wgmma.cuh; whole 8-row swizzle atoms; 16-key steps of P V)");
  static_assert(kStages >= 2 && kStages <= 4, "kStages must be in [2, 4]");
  static_assert(Exp2EmuChecks<kExp2EmuPercent, kExp2PolyDegree>::kOk, "");
  static_assert(kSmemBytes <= 227 * 1024,
                "kSmemBytes exceeds the 227 KB of shared memory a Hopper CTA may use: lower "
                "kStages, kBlockN or kBlockM");
  // Registers per consumer thread: S (kBlockN / 2) + O (kDimV / 2) + P (kBlockN / 4), at most
  // its share less 32.
  static constexpr int kAccumulatorRegs =
      ws_accumulator_registers(kConsumers, Variant::kVarlen, kPaged);
  static_assert(kBlockN / 2 + kDimV / 2 + kBlockN / 4 <= kAccumulatorRegs,
                "S + O + P accumulators need more registers than a consumer thread has for them: "
                "lower kBlockN (or kBlockM: three consumer warpgroups have 160 registers a "
                "thread)");
  static_assert(kOOffset % 1024 == 0, "the O tile must start on a 128-byte swizzle atom");
  static_assert(!(kTmaStoreO && (kStagedEpilogue || Variant::kVarlen)),
                "kTmaStoreO is an epilogue of its own (not with kStagedEpilogue), and not for "
                "varlen: TMA would store a tile's rows past its sequence into the next one");
  static_assert(!kStagedEpilogue || kDimV <= kDimQK,
                "kStagedEpilogue writes O through the Q tile: kHeadDimV must not be wider (in "
                "64-column blocks) than kHeadDimQK");
  static_assert(SparseTilesCheck<typename Variant::Sparsity, kBlockM, kBlockN>::kOk, "");
  static_assert(kPageSize == 0 || FAGEN_PAGE_SIZE_VALID(kPageSize),
                "kPageSize must be 0 or a power of two in [FAGEN_PAGE_SIZE_MIN, "
                "FAGEN_PAGE_SIZE_MAX]");
  static_assert(!kPaged || (Variant::kVarlen && !Variant::Dropout::kEnabled &&
                            !Variant::Sparsity::kSparse && Variant::ScoreMod::kIdentity &&
                            !kTileCounter && kConsumers == 2),
                "a paged forward (chunked prefill) is varlen, without dropout, block sparsity, "
                "a score mod or the tile counter, on 128-row tiles (its producer's registers)");
};

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_FWD_CONFIG_CUH
