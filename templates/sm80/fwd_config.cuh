// fagen sm80: the forward kernel's configuration. The planner mirrors every constant and
// static_assert here (compiler/plan); a generated kernel checks kSmemBytes against the plan.
#ifndef FAGEN_TEMPLATES_SM80_FWD_CONFIG_CUH
#define FAGEN_TEMPLATES_SM80_FWD_CONFIG_CUH

#include "common/types.cuh"
#include "common/variants.cuh"

namespace fagen {
namespace sm80 {

/// One CTA computes a kBlockM-row query tile of one (batch, head), visiting kBlockN-row key/value
/// tiles through a kStages-deep cp.async ring. Each warp owns kBlockM / kWarps consecutive rows.
template <class Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kStages_,
          class Mask_>
struct FwdConfig {
  using Element = Element_;
  using Mask = Mask_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kStages = kStages_;

  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMinBlocksPerSm = 1;
  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kRowTiles = kRowsPerWarp / 16; // 16-row mma tiles per warp

  // Shared memory: Q tile, then kStages K tiles, then kStages V tiles, every row padded by
  // 16 bytes. A row stride of 16 * odd bytes puts the 8 rows of each ldmatrix phase in 8
  // different 16-byte bank groups for every head dim that is a multiple of 16, so no swizzle is
  // needed. The O epilogue reuses the Q tile.
  static constexpr int kSmemRowBytes = kHeadDim * 2 + 16;
  static constexpr int kSmemQBytes = kBlockM * kSmemRowBytes;
  static constexpr int kSmemKvTileBytes = kBlockN * kSmemRowBytes;
  static constexpr int kSmemBytes = (kBlockM + 2 * kStages * kBlockN) * kSmemRowBytes;

  static_assert(is_element<Element>::value, "Element must be fagen::half_t or fagen::bfloat16_t");
  static_assert(kHeadDim % 16 == 0 && kHeadDim >= 32 && kHeadDim <= 256,
                "kHeadDim must be a multiple of 16 in [32, 256]");
  static_assert(kWarps >= 1 && kWarps <= 16, "kWarps must be in [1, 16]");
  static_assert(kBlockM == 16 * kWarps || kBlockM == 32 * kWarps,
                "kBlockM must be 16 * kWarps or 32 * kWarps (16 or 32 rows per warp)");
  static_assert(kBlockN % 16 == 0 && kBlockN >= 16 && kBlockN <= 256,
                "kBlockN must be a multiple of 16 in [16, 256]");
  static_assert(kStages >= 1 && kStages <= 4, "kStages must be in [1, 4]");
};

} // namespace sm80
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM80_FWD_CONFIG_CUH
