// fagen sm80decode: the split-KV decode kernel's configuration. The planner mirrors every
// static_assert here (compiler/plan/PlanDecode.cpp) and shares the shared-memory arithmetic
// (common/smem_layout.h); a generated kernel checks kSmemBytes against the plan.
#ifndef FAGEN_TEMPLATES_SM80_DECODE_CONFIG_CUH
#define FAGEN_TEMPLATES_SM80_DECODE_CONFIG_CUH

#include <type_traits>

#include "abi/decode_params.h"
#include "common/types.cuh"
#include "common/variants.cuh"
#include "sm80/tile_ops.cuh"

namespace fagen {
namespace sm80 {

/// One CTA computes kBlockM packed query rows of one (batch, kv head) (the group's query heads
/// x the call's query tokens, abi/decode_params.h) over one split of the visible key tiles,
/// streaming kBlockN-row K/V tiles through a kStages-deep cp.async ring. The warps share the
/// rows and split each key tile: warp w takes keys [w, w + 1) * kBlockN / kWarps of every tile
/// with its own online softmax, and the warps' (O, max, sum) are merged at the end. The math
/// is small (a few rows); the kernel is built to keep many K/V bytes in flight.
///
/// Options: a struct (the generated kernel's KernelOptions) that derives from DecodeOptions and
/// sets Element, Variant, kHeadDimQK, kHeadDimV, kBlockM, kBlockN, kWarps and kStages, and
/// kPageSize for a paged KV cache.
struct DecodeOptions {
  /// Tokens per page of a paged KV cache (abi/decode_params.h); 0: contiguous K and V.
  static constexpr int kPageSize = 0;
};

template <class Options> struct DecodeConfig : VariantParts<typename Options::Variant> {
  using Variant = typename Options::Variant;
  using Element = typename Options::Element;
  static constexpr int kHeadDimQK = Options::kHeadDimQK;
  static constexpr int kHeadDimV = Options::kHeadDimV;
  static constexpr int kBlockM = Options::kBlockM;
  static constexpr int kBlockN = Options::kBlockN;
  static constexpr int kWarps = Options::kWarps;
  static constexpr int kStages = Options::kStages;
  static constexpr int kPageSize = Options::kPageSize;
  static constexpr bool kPaged = kPageSize != 0;
  static constexpr int kRunRows = paged_run_rows(kPageSize, kBlockN);

  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr int kRowTiles = kBlockM / 16;         // 16-row mma tiles, every warp all of them
  static constexpr int kKeysPerWarp = kBlockN / kWarps;  // keys of each tile a warp takes
  static constexpr int kMergeThreads = FAGEN_MERGE_THREADS;

  // Head dims as the MMAs see them (zero-filled padding, as the forward's).
  static constexpr int kHeadDimQKPad = (kHeadDimQK + 15) / 16 * 16;
  static constexpr int kHeadDimVPad = (kHeadDimV + 15) / 16 * 16;

  // Shared memory: the Q tile, then kStages K tiles and kStages V tiles (SmemRow rows); the
  // end reuses the K/V ring for the warps' fp32 O rows, maxima and sums.
  static constexpr int kSmemQBytes = kBlockM * SmemRow<kHeadDimQKPad>::kBytes;
  static constexpr int kSmemKTileBytes = kBlockN * SmemRow<kHeadDimQKPad>::kBytes;
  static constexpr int kSmemVTileBytes = kBlockN * SmemRow<kHeadDimVPad>::kBytes;
  static constexpr int kReduceRowFloats = kHeadDimVPad + 8; // common/smem_layout.h
  static constexpr int kSmemBytes = sm80_decode_smem_bytes(kHeadDimQKPad, kHeadDimVPad, kBlockM,
                                                           kBlockN, kStages, kWarps);
  static_assert(kSmemBytes >= kSmemQBytes + kStages * (kSmemKTileBytes + kSmemVTileBytes) &&
                    kSmemBytes >= kSmemQBytes + sm80_decode_reduce_bytes(kHeadDimVPad, kBlockM,
                                                                         kWarps),
                "common/smem_layout.h's count must hold the tiles laid out here");

  static_assert(is_element<Element>::value, "Element must be fagen::half_t or fagen::bfloat16_t");
  static_assert(kHeadDimQK % 8 == 0 && kHeadDimQK >= 32 && kHeadDimQK <= 256,
                "kHeadDimQK must be a multiple of 8 in [32, 256]");
  static_assert(kHeadDimV % 8 == 0 && kHeadDimV >= 32 && kHeadDimV <= 256,
                "kHeadDimV must be a multiple of 8 in [32, 256]");
  // A row block's query tokens are the rows of one query tile to the mask (decode_kernel.cuh).
  static_assert(kBlockM == 16 || kBlockM == 32,
                "kBlockM must be 16 or 32 (at least FAGEN_DECODE_MAX_Q_TOKENS rows)");
  static_assert(kBlockM >= FAGEN_DECODE_MAX_Q_TOKENS, "kBlockM must hold every query token");
  static_assert(kWarps == 2 || kWarps == 4 || kWarps == 8, "kWarps must be 2, 4 or 8");
  static_assert(kBlockN % kWarps == 0 && kKeysPerWarp % 16 == 0 && kBlockN <= 256,
                "kBlockN must be a multiple of 16 * kWarps, at most 256 (16 keys a warp step)");
  static_assert(kStages >= 2 && kStages <= 8, "kStages must be in [2, 8]");
  static_assert(kPageSize == 0 || FAGEN_PAGE_SIZE_VALID(kPageSize),
                "kPageSize must be 0 or a power of two in [FAGEN_PAGE_SIZE_MIN, "
                "FAGEN_PAGE_SIZE_MAX]");
  static_assert(kPageSize % kBlockN == 0 || kBlockN % kPageSize == 0,
                "a key tile must lie in one page or span whole pages");
  // O accumulators: every warp holds all kBlockM rows of O.
  static_assert(kRowTiles * kHeadDimVPad / 2 <= 128,
                "kBlockM x kHeadDimV accumulators exceed 128 registers a thread: kBlockM 32 "
                "needs kHeadDimV <= 128");
  // The variants served: every mask (a row's token is its query index), no score mod or
  // softcap (which reads no query index); not ALiBi (a slope per query head, and a row block
  // holds several), dropout (an inference kernel), block sparsity, varlen (issue 34 part 2).
  static_assert(std::is_same<typename Variant::ScoreMod, NoScoreMod>::value ||
                    std::is_same<typename Variant::ScoreMod, Softcap>::value,
                "the decode kernel serves the score mods none and softcap");
  static_assert(!Variant::Dropout::kEnabled, "the decode kernel has no dropout");
  static_assert(!Variant::Sparsity::kSparse, "the decode kernel has no block sparsity");
  static_assert(!Variant::kVarlen,
                "the decode kernel reads a contiguous or paged KV cache, not varlen");
};

} // namespace sm80
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM80_DECODE_CONFIG_CUH
