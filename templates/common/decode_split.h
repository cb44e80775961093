// fagen: how the split-KV decode divides the keys among CTAs: the key tiles each split takes
// (the kernel) and how many splits a call gets (the runtime's plan). Plain C++, host and
// device (tests/unit/DecodeSplitTest.cpp).
#ifndef FAGEN_TEMPLATES_COMMON_DECODE_SPLIT_H
#define FAGEN_TEMPLATES_COMMON_DECODE_SPLIT_H

#include <stdint.h>

#if defined(__CUDACC__)
#define FAGEN_DECODE_SPLIT_HD __host__ __device__ __forceinline__
#else
#define FAGEN_DECODE_SPLIT_HD inline
#endif

namespace fagen {

/// The key tiles of split `split` of `num_splits` over the visible tiles [n_begin, n_end):
/// tiles first, first + stride, ... below end. Interleaved (every num_splits-th tile from
/// n_begin + split), so that a split's first tiles do not depend on n_end (a paged cache looks
/// their pages up while the sequence's length is still loading) and the splits' tile counts
/// differ by at most one; none (first >= end) for a split past the end. The splits cover
/// [n_begin, n_end) exactly once.
struct DecodeSplitTiles {
  int first, stride, end;
};
FAGEN_DECODE_SPLIT_HD DecodeSplitTiles decode_split_tiles(int n_begin, int n_end, int num_splits,
                                                          int split) {
  return DecodeSplitTiles{n_begin + split, num_splits > 0 ? num_splits : 1, n_end};
}

/// The split rule's defaults: CTAs per SM the split count aims at, and the fewest key tiles a
/// split takes. Measured on an H100 (132 SMs; bf16, hd 128, one query token, GQA 32/8 and MHA,
/// batch 1-16, 2k-128k keys; every cell run with the planned split count and fewer, the
/// combine a programmatic dependent; docs/perf/sm80-decode.md): one CTA per SM and splits of at
/// least 4 tiles give the fastest count of each cell or one within 1 %. Two CTAs per SM and
/// splits of 2 tiles, the first rule, took up to 1.07x longer: the more splits, the more
/// partial rows to write and combine, while one CTA per SM, its 3-stage ring of 64-key tiles
/// (96 KB in flight), already keeps the memory system busy (batch 16 at 2k: one split 62.1 us,
/// two 65.1 us; batch 1 at 2k: 8 splits 13.4 us, 16 splits 14.4 us). A bundle's decode kernel
/// carries its own pair (the manifest's decode_ctas_per_sm and decode_min_tiles): these, or
/// the ones `fagen tune` measured best on the target GPU (docs/tuning.md).
constexpr int kDecodeCtasPerSm = 1;
constexpr int kDecodeMinTilesPerSplit = 4;
/// The ranges a kernel's pair may take (the bundle reader refuses others): at most
/// kDecodeMaxCtasPerSm CTAs per SM (the ring's depth keeps two resident; more is a second wave)
/// and splits of at most kDecodeMaxMinTiles tiles at least.
constexpr int kDecodeMaxCtasPerSm = 4;
constexpr int kDecodeMaxMinTiles = 64;
/// The most splits: bounds the workspace (num_splits partial rows per query row).
constexpr int kDecodeMaxSplits = 128;

/// The split count of a decode call: the most splits whose grid stays one wave of
/// `ctas_per_sm` CTAs per SM, floor(ctas_per_sm * sms / ctas) (ctas: the grid without splits,
/// batch x heads_kv x row blocks; every CTA streams the same number of keys, so a second,
/// partial wave would leave SMs idle while it runs), but none shorter than `min_tiles` of the
/// `key_tiles` visible key tiles and at most kDecodeMaxSplits; then rounded so that no split is
/// empty (every split of decode_split_tiles holds a tile). 1 when the grid already fills the
/// GPU. A pair outside its range counts as the nearest value inside.
FAGEN_DECODE_SPLIT_HD int decode_num_splits(int64_t ctas, int key_tiles, int sms,
                                            int ctas_per_sm = kDecodeCtasPerSm,
                                            int min_tiles = kDecodeMinTilesPerSplit) {
  if (ctas <= 0 || key_tiles <= 0)
    return 1;
  ctas_per_sm = ctas_per_sm < 1 ? 1 : ctas_per_sm > kDecodeMaxCtasPerSm ? kDecodeMaxCtasPerSm
                                                                        : ctas_per_sm;
  min_tiles = min_tiles < 1 ? 1 : min_tiles > kDecodeMaxMinTiles ? kDecodeMaxMinTiles : min_tiles;
  const int64_t slots = int64_t(ctas_per_sm) * (sms > 0 ? sms : 1);
  int64_t want = slots / ctas;
  const int64_t longest = key_tiles / min_tiles;
  want = want < longest ? want : longest;
  want = want < kDecodeMaxSplits ? want : kDecodeMaxSplits;
  if (want <= 1)
    return 1;
  const int per_split = int((key_tiles + want - 1) / want);
  return (key_tiles + per_split - 1) / per_split;
}

} // namespace fagen

#endif // FAGEN_TEMPLATES_COMMON_DECODE_SPLIT_H
