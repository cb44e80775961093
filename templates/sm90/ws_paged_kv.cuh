// fagen sm90: the warp-specialized forward over a paged KV cache (chunked prefill): where a
// sequence's keys are, and the producer warpgroup's gather of a key or value tile from its
// pages (abi/decode_params.h layout and checks, as the portable sm80/fwd_kv_cache.cuh).
#ifndef FAGEN_TEMPLATES_SM90_WS_PAGED_KV_CUH
#define FAGEN_TEMPLATES_SM90_WS_PAGED_KV_CUH

#include <stddef.h>

#include "abi/decode_params.h"
#include "abi/tma_params.h"
#include "sm80/fwd_kv_cache.cuh"
#include "sm90/tile_ops.cuh"
#include "sm90/tma.cuh"

namespace fagen {
namespace sm90 {

/// A paged kernel's parameter block is a fagen_decode_params (fwd_ws_paged_kernel), whose first
/// member is the forward's block that the warp-specialized code passes around: the paged fields
/// are read from the block around it. Only for Config::kPaged kernels.
__device__ __forceinline__ const fagen_decode_params &ws_paged_params(const fagen_fwd_params &p) {
  static_assert(offsetof(fagen_decode_params, fwd) == 0,
                "fagen_decode_params must begin with the forward's block");
  return reinterpret_cast<const fagen_decode_params &>(p);
}

/// Entry `entry` of sequence `batch`'s block-table row when it is a page id of the cache, else -1
/// (reported; sm80::checked_page), by a lane that reads entries apart. A length the sequence
/// span clamped to seqlen_k (seqused_k past the keys) is reported first, by the same lane: the
/// status record keeps the first report, and the pages past the sequence's own that the clamped
/// length reaches are its consequence, so that a bad length is what the caller is told.
__device__ __forceinline__ int ws_checked_page(const fagen_decode_params &params, int batch,
                                               int entry, int seqlen_k) {
  if (const int used = params.seqused_k[batch]; used != seqlen_k)
    sm80::report_kv_status(params.kv_status, FAGEN_KV_STATUS_SEQUSED_K, batch, 0, used,
                           /*reporter=*/true);
  return sm80::checked_page(params.block_table + batch * params.block_table_batch_stride, entry,
                            params.num_pages, params.kv_status, batch, /*reporter=*/true);
}

/// The copies of key or value tile n_block of sequence `batch` (kv head `kv_head`), a (kBlockN,
/// kDim) tile of kDim / 64 swizzled column blocks at `slot`, by the 128 threads of the producer
/// warpgroup: thread t copies 16-byte chunk t % 8 of rows t / 8 + 16 i of each column block (so
/// the 8 threads of a row read its 128 contiguous bytes). Lane l of each warp reads the tile's
/// l-th block-table entry, checks it against the cache (a bad one is reported in the status
/// record) and holds the address of that page's first row for the kv head; a row's thread takes
/// its page's address by a shuffle and adds the row's place in the page, so that the copies
/// cost few instructions (the forward is issue-bound: the producer's instructions take the
/// consumer warps' issue slots). Rows past the sequence, through a bad page id or in the padding
/// columns past kHeadDim are zero-filled, nothing read, so that P V multiplies zeros there,
/// never a stale NaN of the cache. Then one arrival on `full` once the thread's copies have
/// landed (the barrier counts 128 a fill).
template <class Config, int kHeadDim, int kDim>
__device__ __forceinline__ void ws_gather_paged_tile(u32 slot, u32 full, const void *cache,
                                                     int64_t page_stride, int64_t head_stride,
                                                     int64_t row_stride,
                                                     const fagen_decode_params &params,
                                                     int batch, int kv_head, int n_block,
                                                     int seqlen_k) {
  using Element = typename Config::Element;
  constexpr int kBlockN = Config::kBlockN, kPageSize = Config::kPageSize;
  // Block-table entries a tile's keys can reach (a tile not aligned to pages reaches one more).
  constexpr int kEntries = kBlockN / kPageSize + 2;
  static_assert(kBlockN % 16 == 0, "whole rounds of 16 rows");
  static_assert(kEntries <= 32, "a warp holds a tile's page ids, one a lane");
  const int t = threadIdx.x % 128, chunk = t % 8, row0 = t / 8, lane = t % 32;
  const int key0 = n_block * kBlockN, entry0 = key0 / kPageSize;
  const Element *const kv = static_cast<const Element *>(cache) + kv_head * head_stride;
  // Lane l: entry l's page for the kv head, or page 0's (a readable address, never read) where
  // the entry is past the sequence or bad; `has_page`: which lanes hold a page.
  const Element *lane_page = kv;
  bool lane_has_page = false;
  if (lane < kEntries && (entry0 + lane) * kPageSize < seqlen_k) {
    const int page = ws_checked_page(params, batch, entry0 + lane, seqlen_k);
    if (page >= 0) {
      lane_page = kv + page * page_stride;
      lane_has_page = true;
    }
  }
  const unsigned has_page = __ballot_sync(0xffffffffu, lane_has_page);
  // Rows 16 apart keep the swizzle of row0 (row % 8).
  const u32 dst = slot + swizzled_offset<kBlockN>(row0, chunk);
  const int first = key0 % kPageSize + row0; // row0's place from the tile's first page
  // Whole tiles unrolled; above 128 columns (hd 192 x 112 keys: 21 copies a thread) two rounds
  // at a time, as the producer's registers allow (fully unrolled it spilled 8 bytes, nvcc 13.0).
  constexpr int kUnroll = kDim > 128 ? 2 : kBlockN / 16;
#pragma unroll kUnroll
  for (int i = 0; i < kBlockN / 16; ++i) {
    const int at = first + 16 * i, entry = at / kPageSize; // in the tile's pages
    const Element *src =
        reinterpret_cast<const Element *>(__shfl_sync(
            0xffffffffu, reinterpret_cast<unsigned long long>(lane_page), entry)) +
        (at % kPageSize) * row_stride + chunk * 8;
    const bool row_valid = (has_page >> entry & 1u) && key0 + row0 + 16 * i < seqlen_k;
#pragma unroll
    for (int b = 0; b < kDim / 64; ++b) {
      const bool in_head = 64 * b + 8 * chunk < kHeadDim; // (a padding column: past the row)
      cp_async_16(dst + b * kBlockN * 128 + i * 16 * 128, in_head ? src + 64 * b : kv,
                  row_valid && in_head);
    }
  }
  cp_async_mbarrier_arrive_noinc(full);
}

/// Key or value tile n_block of sequence `batch` by TMA from its pages (Config::kTmaPages): `map`
/// holds the cache as {head dim, page rows, kv heads, pages} (abi/tma_params.h), each run of
/// kRun = min(kPageSize, kBlockN) rows one box per 64 columns at its page, a run past the
/// sequence or through a bad page id (reported) at page num_pages, which TMA fills with zeros.
/// kZeroTail (V): the run that holds the sequence's end is gathered by the 128 threads with
/// cp.async instead, its rows past the end zero-filled, so that P V never multiplies a stale NaN
/// of the cache's last page (K's such rows are masked out of S). Every producer thread arrives
/// once on `full`: thread 0 with the TMA bytes, the others at once, or (a gathered run) each
/// once its copies landed.
template <class Config, int kHeadDim, int kDim, bool kZeroTail>
__device__ __forceinline__ void ws_load_paged_tile(u32 slot, u32 full, const fagen_tensor_map &map,
                                                   const void *cache, int64_t page_stride,
                                                   int64_t head_stride, int64_t row_stride,
                                                   const fagen_decode_params &params, int batch,
                                                   int kv_head, int n_block, int seqlen_k) {
  using Element = typename Config::Element;
  constexpr int kBlockN = Config::kBlockN, kPageSize = Config::kPageSize;
  constexpr int kRun = Config::kPagedBoxRows, kRuns = kBlockN / kRun;
  static_assert(kRuns <= 32, "a warp holds a tile's page ids, one a lane");
  const int t = threadIdx.x % 128, lane = t % 32;
  const int key0 = n_block * kBlockN, entry0 = key0 / kPageSize;
  int lane_page = -1;
  if (lane < kRuns && key0 + lane * kRun < seqlen_k)
    lane_page = ws_checked_page(params, batch, entry0 + lane * kRun / kPageSize, seqlen_k);
  const int left = seqlen_k - key0; // rows of the tile in the sequence
  const int tail = kZeroTail && left > 0 && left < kBlockN && left % kRun != 0 ? left / kRun : -1;
  constexpr u32 kRunBytes = kRun * 128 * (kDim / 64);
  if (t < 32) { // warp 0: its lanes hold the page ids; thread 0 issues the boxes
    if (t == 0)
      mbarrier_expect_tx(full, tail >= 0 ? (kRuns - 1) * kRunBytes : kRuns * kRunBytes);
#pragma unroll
    for (int r = 0; r < kRuns; ++r) {
      const int page = __shfl_sync(0xffffffffu, lane_page, r);
      if (t == 0 && r != tail)
#pragma unroll
        for (int b = 0; b < kDim / 64; ++b)
          tma_load_4d(slot + b * kBlockN * 128 + r * kRun * 128, map, full, 64 * b,
                      (key0 + r * kRun) % kPageSize, kv_head,
                      page >= 0 ? page : params.num_pages);
    }
  }
  if (tail < 0) {
    mbarrier_arrive(full);
    return;
  }
  // The tail run: thread t copies chunk t % 8 of rows t / 8 + 16 i of each column block.
  const int page = __shfl_sync(0xffffffffu, lane_page, tail);
  const int chunk = t % 8, row0 = t / 8;
  const Element *base = static_cast<const Element *>(cache) + kv_head * head_stride + chunk * 8;
  const int first = key0 + tail * kRun; // the run's first key
  const Element *src = base + max(page, 0) * page_stride + (first % kPageSize) * row_stride;
  const u32 dst = slot + swizzled_offset<kBlockN>(tail * kRun + row0, chunk);
#pragma unroll 1
  for (int i = 0; i < (kRun + 15) / 16; ++i) {
    const int row = row0 + 16 * i;
    const bool row_valid = row < kRun && first + row < seqlen_k && page >= 0;
#pragma unroll
    for (int b = 0; b < kDim / 64; ++b)
      if (row < kRun)
        cp_async_16(dst + b * kBlockN * 128 + i * 16 * 128,
                    row_valid && 64 * b + 8 * chunk < kHeadDim ? src + row * row_stride + 64 * b
                                                               : base,
                    row_valid && 64 * b + 8 * chunk < kHeadDim);
  }
  cp_async_mbarrier_arrive_noinc(full);
}

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_WS_PAGED_KV_CUH
