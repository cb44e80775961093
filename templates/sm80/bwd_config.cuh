// fagen sm80: the backward kernels' configuration. The planner mirrors every static_assert here
// (compiler/plan) and shares kSmemBytes's arithmetic (common/smem_layout.h).
#ifndef FAGEN_TEMPLATES_SM80_BWD_CONFIG_CUH
#define FAGEN_TEMPLATES_SM80_BWD_CONFIG_CUH

#include <type_traits>

#include "abi/bwd_params.h"
#include "common/types.cuh"
#include "common/variants.cuh"
#include "sm80/tile_ops.cuh"

namespace fagen {
namespace sm80 {

/// How kWarps warps split a (kRows, kCols) output tile into a kWarpsRows x kWarpsCols grid of
/// equal (kRows / kWarpsRows, kCols / kWarpsCols) warp tiles, both sides multiples of 16. Picks
/// the split with the smallest warp-tile perimeter (the fewest shared-memory bytes loaded per
/// MMA); ties go to more warps along the rows (fewer A fragments and per-row values per
/// thread). kWarpsRows = 0: no valid split.
template <int kRows, int kCols, int kWarps> struct WarpGrid {
  static constexpr int cost(int rows_warps) {
    return kWarps % rows_warps != 0 || kRows % (16 * rows_warps) != 0 ||
                   kCols % (16 * (kWarps / rows_warps)) != 0
               ? 1 << 30
               : kRows / rows_warps + kCols / (kWarps / rows_warps);
  }
  static constexpr int pick() {
    int best = 0, best_cost = 1 << 30;
    for (int w = 1; w <= kWarps; w *= 2)
      if (cost(w) <= best_cost && cost(w) < (1 << 30))
        best = w, best_cost = cost(w);
    return best;
  }
  static constexpr int kWarpsRows = pick();
  static constexpr int kWarpsCols = kWarpsRows ? kWarps / kWarpsRows : 0;
  static constexpr int kTileRows = kWarpsRows ? kRows / kWarpsRows : 0;
  static constexpr int kTileCols = kWarpsCols ? kCols / kWarpsCols : 0;
};

/// Backward in FlashAttention-2 order (Dao, 2023, algorithm 2). One CTA owns a kBlockN-row
/// key/value tile of one (batch, kv head), keeps K and V in shared memory and dK, dV in
/// registers, and walks the query tiles that see it (every query head of the kv head's group),
/// kBlockM rows at a time. Per query tile, three warp grids:
///   S, dP   (kBlockM, kBlockN)   = Q K^T, dO V^T       GridSdP
///   dV, dK  (kBlockN, head dim) += P^T dO, dS^T Q      GridKV (dK and dV share the grid)
///   dQ      (kBlockM, head_dim_qk) = dS K  -> dq_accum GridQ (fp32 atomics, or in key-tile
///                                                     order with kDeterministic)
/// P and dS go through shared memory in the input dtype between the first grid and the others.
/// kStages: Q/dO tile buffers (1, or 2 to load the next query tile during this one).
/// kDeterministic: dQ accumulated in a fixed key-tile order per (batch, head, query tile),
/// ordered by dq_semaphore, so that dQ is bitwise repeatable (kDqAscending says which order).
///
/// Options: a struct (the generated kernel's KernelOptions) that derives from BwdOptions and
/// sets Element, Variant, kHeadDimQK, kHeadDimV, kBlockM, kBlockN, kWarps, kStages and
/// kDeterministic.
struct BwdOptions {}; // no defaults: every option is the plan's
template <class Options> struct BwdConfig : VariantParts<typename Options::Variant> {
  using Variant = typename Options::Variant;
  using Element = typename Options::Element;
  static constexpr int kHeadDimQK = Options::kHeadDimQK;
  static constexpr int kHeadDimV = Options::kHeadDimV;
  /// Floats per dq_accum row (bwd_preprocess zeroes them): the head dim.
  static constexpr int kDqAccumCols = kHeadDimQK;
  static constexpr int kBlockM = Options::kBlockM;
  static constexpr int kBlockN = Options::kBlockN;
  static constexpr int kWarps = Options::kWarps;
  static constexpr int kStages = Options::kStages;
  static constexpr bool kDeterministic = Options::kDeterministic;
  /// The deterministic order of the dQ additions. Causal masks: ascending key tiles, each CTA
  /// walking its query tiles last first, and the grid longest first as the default causal
  /// kernels' (BwdTile): key tile 0, the longest, never waits, and key tile n waits only for
  /// tiles dispatched before it, all of which the mask lets see every query tile it sees (the
  /// sparsity layout's holes are not in the ranks), walking the same way, so a short tile's
  /// wait at its start is the chain's lag, not the long tiles' work. Other masks: descending
  /// key tiles, query tiles first first, last key tile dispatched first (under windows a key
  /// tile's query range moves with it).
  /// Measured over the descending order: hd 128 causal 1.08-1.09x, hd 64 1.03-1.04x, hd 256
  /// 1.06x (H200, docs/perf/sm80-bwd.md). Varlen kernels keep the descending
  /// order (the ascending one spilled 108 bytes at hd 128 causal, nvcc 13.0, sm_90).
  static constexpr bool kDqAscending =
      kDeterministic && Variant::Mask::kCausal && !Variant::kVarlen;
  /// Deterministic kernels without a mask or block sparsity (every key tile adds to every
  /// query tile): dQ goes into fagen_bwd_dq_slots() copies of dq_accum (bwd_params.h), key
  /// tile n into copy n % kDqSlots after that copy's later key tiles only, so a head's CTAs
  /// form kDqSlots semaphore chains instead of one; the first key tile of each chain stores
  /// its dQ instead of adding it (kDqStoreFirst), so _pre zeroes no dq_accum, and _post sums
  /// the copies in order. Measured: docs/perf/sm80-bwd.md items 29-30.
  static constexpr bool kUnmaskedDense =
      std::is_same<typename Variant::Mask, NoMask>::value &&
      !Variant::Sparsity::kSparse;
  static constexpr int kDqSlots = fagen_bwd_dq_slots(kDeterministic, kUnmaskedDense);
  static constexpr bool kDqStoreFirst = kDeterministic && kUnmaskedDense;

  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr int kPrePostThreads = 256;

  // Head dims padded to the 16-deep MMA k step; the pad columns are zero in shared memory.
  static constexpr int kHeadDimQKPad = (kHeadDimQK + 15) / 16 * 16;
  static constexpr int kHeadDimVPad = (kHeadDimV + 15) / 16 * 16;

  using GridSdP = WarpGrid<kBlockM, kBlockN, kWarps>;
  // dK and dV share the split of the key rows; the head-dim split must serve both widths.
  using GridKV = WarpGrid<kBlockN, (kHeadDimQKPad < kHeadDimVPad ? kHeadDimQKPad : kHeadDimVPad),
                          kWarps>;
  using GridQ = WarpGrid<kBlockM, kHeadDimQKPad, kWarps>;
  // dQ is computed and added kDqChunkCols columns of the warp tile at a time: at most 64 fp32
  // accumulators a thread, live beside the 2 * kBlockN * head dim / kThreads of dK and dV.
  static constexpr int kDqChunkCols =
      GridQ::kTileRows * GridQ::kTileCols <= 2048 ? GridQ::kTileCols
      : GridQ::kTileCols % (2048 / GridQ::kTileRows) == 0 ? 2048 / GridQ::kTileRows
                                                          : 16;
  // LSE and D of the next query tile loaded during this one (registers: 4 floats a row tile of
  // the S warp tile). Measured +3-7% at hd <= 128 (H200); at hd 256 the registers are short
  // (255 a thread without it) and it measured 2-4% slower (docs/perf/sm80-bwd.md).
  static constexpr bool kPrefetchRowStats = kHeadDimQKPad + kHeadDimVPad <= 256;
  // dq_accum of a full query tile (kBlockM rows, contiguous kBlockM x head_dim_qk floats) is
  // kept in the order of the dQ reductions (see DqAccumOrder) rather than row-major, so that
  // each warp-wide red.v2 covers 256 contiguous bytes (2 L2 lines, as FA2's MMA-order dQaccum;
  // red.v4, kDqRedV4 below: 512) instead of 8 rows x 32 bytes (8 lines); _post reads it back
  // in that order. Partial tiles stay row-major (their block would reach past the sequence),
  // as do padded head dims.
  // Measured +7-15% over row-major (H200; the LSU queue no longer throttles the reductions).
  static constexpr bool kDqAccumFragmentOrder = kHeadDimQK == kHeadDimQKPad;
  // In fragment order, the non-causal kernels at head dims >= 128 (deterministic ones at 256
  // only) add dQ four floats at a time (red.v4: 512 contiguous bytes a warp-wide instruction,
  // half the reductions of red.v2). Measured (H200, two A/B pairs in one process each,
  // docs/perf/sm80-bwd.md): hd 256 non-causal +2-4 % (deterministic -0.1-+1.7 %), hd 128
  // non-causal +1.5-3.5 %; elsewhere it lost or tied (hd 64 causal -2-3 %, hd 128
  // deterministic -1-2.5 %, causal hd 128/256 and hd 64 non-causal within 1 %), so those keep
  // red.v2. (Scalar reds at hd 256: -16-21 %.)
  static constexpr bool kDqRedV4 = kDqAccumFragmentOrder && kHeadDimQK >= 128 &&
                                   !Variant::Mask::kCausal &&
                                   (!kDeterministic || kHeadDimQK >= 256);
  /// Whether the query tile's dq_accum block is in fragment order. Without varlen every tile
  /// is: the runtime gives each head whole query tiles (bwd_params.h), so a partial tile's
  /// block ends inside its own head, and the choice is made at compile time (one reduction
  /// loop with immediate offsets, no per-address select; rows past the sequence add into the
  /// padding, which _post never reads). Varlen rows are packed: partial tiles stay row-major.
  static __device__ __forceinline__ bool dq_fragment_order(bool full_tile) {
    return kDqAccumFragmentOrder && (!Variant::kVarlen || full_tile);
  }
  /// Varlen rows of dq_accum are packed (cu_seqlens_q[b] + i), not whole tiles a sequence
  /// (bwd_params.h; the sm90ws backward's are).
  static constexpr bool kDqWholeTiles = false;
  static constexpr int kTileDK = kHeadDimQKPad / GridKV::kWarpsCols; // dK columns per warp
  static constexpr int kTileDV = kHeadDimVPad / GridKV::kWarpsCols;  // dV columns per warp

  // Shared memory. Rows as SmemRow lays them out (tile_ops.cuh): head dims that are multiples
  // of 64 unpadded, their 16-byte chunks XOR-swizzled by row % 8 (each cp.async line fills one
  // aligned line, ldmatrix stays conflict-free), other rows padded by 16 bytes (a row stride of
  // 16 * odd bytes puts the 8 rows of each ldmatrix phase, plain or .trans, and of each
  // fragment store in distinct banks).
  //   K (kBlockN, QKPad) | V (kBlockN, VPad) | kStages x Q (kBlockM, QKPad) |
  //   kStages x dO (kBlockM, VPad) | P (kBlockM, kBlockN) | dS (kBlockM, kBlockN)
  // The dK / dV epilogue reuses K and V. The forward swizzles at 192 and 256 only (its hd 64 /
  // 128 tiles spilled); the backward at every multiple of 64 and every mask since the dQ
  // reduction lost its per-address select: hd 256 causal 1.08-1.15x, hd 128 1.05-1.08x, hd 64
  // causal 1.05-1.06x and non-causal 0.98-0.99x (its deterministic kernel 1.04-1.05x) over
  // padded rows (H200, docs/perf/sm80-bwd.md items 13 and 18).
  // Varlen kernels keep padded rows below 192: their partial query tiles choose between two
  // dq_accum orders per address, and with the swizzle's lane offsets hd 128 spilled (causal 116
  // bytes, 32 padded; non-causal 24, 0 padded; nvcc 13.0, sm_90).
  static constexpr int kSwizzleFrom = bwd_swizzle_from(Variant::kVarlen);
  using RowQK = SmemRow<kHeadDimQKPad, kSwizzleFrom>;
  using RowV = SmemRow<kHeadDimVPad, kSwizzleFrom>;
  static constexpr bool kSwizzleQK = RowQK::kSwizzled;
  static constexpr bool kSwizzleV = RowV::kSwizzled;
  static constexpr int kRowQK = RowQK::kBytes;
  static constexpr int kRowV = RowV::kBytes;
  static constexpr int kRowP = sm80_bwd_p_row_bytes(kBlockN);
  static constexpr int kSmemKBytes = kBlockN * kRowQK;
  static constexpr int kSmemVBytes = kBlockN * kRowV;
  static constexpr int kSmemQBytes = kBlockM * kRowQK; // one stage
  static constexpr int kSmemDoBytes = kBlockM * kRowV; // one stage
  static constexpr int kSmemPBytes = kBlockM * kRowP;
  /// = kBlockN * (kRowQK + kRowV) + kStages * kBlockM * (kRowQK + kRowV) + 2 * kBlockM * kRowP:
  /// common/smem_layout.h's count, which the planner's budget reads too.
  static constexpr int kSmemBytes = sm80_bwd_smem_bytes(kHeadDimQKPad, kHeadDimVPad, kBlockM,
                                                        kBlockN, kStages, Variant::kVarlen);
  static_assert(kSmemBytes == kSmemKBytes + kSmemVBytes + kStages * (kSmemQBytes + kSmemDoBytes) +
                                  2 * kSmemPBytes,
                "common/smem_layout.h's count must match the tiles laid out here");

  static_assert(is_element<Element>::value, "Element must be fagen::half_t or fagen::bfloat16_t");
  static_assert(kHeadDimQK % 8 == 0 && kHeadDimQK >= 32 && kHeadDimQK <= 256,
                "kHeadDimQK must be a multiple of 8 in [32, 256]");
  static_assert(kHeadDimV % 8 == 0 && kHeadDimV >= 32 && kHeadDimV <= 256,
                "kHeadDimV must be a multiple of 8 in [32, 256]");
  static_assert(kWarps == 1 || kWarps == 2 || kWarps == 4 || kWarps == 8 || kWarps == 16,
                "kWarps must be a power of 2 in [1, 16]");
  static_assert(kBlockM % 16 == 0 && kBlockM >= 16 && kBlockM <= 256,
                "kBlockM must be a multiple of 16 in [16, 256]");
  static_assert(kBlockN % 16 == 0 && kBlockN >= 16 && kBlockN <= 256,
                "kBlockN must be a multiple of 16 in [16, 256]");
  static_assert(kStages == 1 || kStages == 2, "kStages must be 1 or 2 (Q/dO buffers)");
  static_assert(GridSdP::kWarpsRows != 0,
                "no split of the (kBlockM, kBlockN) S tile into kWarps warp tiles whose sides "
                "are multiples of 16");
  static_assert(GridKV::kWarpsRows != 0 && kHeadDimQKPad % (16 * GridKV::kWarpsCols) == 0 &&
                    kHeadDimVPad % (16 * GridKV::kWarpsCols) == 0,
                "no split of the (kBlockN, head dim) dK/dV tiles into kWarps warp tiles whose "
                "sides are multiples of 16");
  static_assert(GridQ::kWarpsRows != 0,
                "no split of the (kBlockM, head_dim_qk) dQ tile into kWarps warp tiles whose "
                "sides are multiples of 16");
  static_assert(kDqChunkCols % 16 == 0 && GridQ::kTileCols % kDqChunkCols == 0,
                "the dQ warp tile must split into chunks of a multiple of 16 columns");
  static_assert(SparseTilesCheck<typename Variant::Sparsity, kBlockM, kBlockN>::kOk, "");
};

} // namespace sm80
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM80_BWD_CONFIG_CUH
