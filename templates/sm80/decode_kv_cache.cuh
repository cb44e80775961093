// fagen sm80decode: where the decode kernel's keys and values are. One interface, two caches:
// a contiguous KV cache (rows one stride apart) and a paged one (rows in fixed-size pages found
// through a block table, abi/decode_params.h). The kernel asks a cache for its sequence's
// length and for the cp.async copies of a key tile; nothing else in it addresses K or V.
#ifndef FAGEN_TEMPLATES_SM80_DECODE_KV_CACHE_CUH
#define FAGEN_TEMPLATES_SM80_DECODE_KV_CACHE_CUH

#include "abi/decode_params.h"
#include "common/variants.cuh"
#include "sm80/tile_ops.cuh"

namespace fagen {
namespace sm80 {

/// The caches' K/V rows are streamed once, whole: cp.async with the .L2::128B prefetch hint
/// (H100, bench_decode.py: 1-2 % more bandwidth at every cell, 128 B as good as 256 B).
constexpr bool kDecodeL2Prefetch = true;

/// The K and V rows of one (batch, kv head) in a contiguous cache: key j at row j, one row
/// stride apart.
template <class Config> struct ContiguousKv {
  using Element = typename Config::Element;
  const Element *k, *v;
  int64_t k_row_stride, v_row_stride;
  int seqlen_k;

  __device__ __forceinline__ ContiguousKv(const fagen_decode_params &params, int batch,
                                          int kv_head) {
    const fagen_fwd_params &p = params.fwd;
    k = static_cast<const Element *>(p.k) + batch * p.k_batch_stride + kv_head * p.k_head_stride;
    v = static_cast<const Element *>(p.v) + batch * p.v_batch_stride + kv_head * p.v_head_stride;
    k_row_stride = p.k_row_stride;
    v_row_stride = p.v_row_stride;
    seqlen_k = p.seqlen_k;
  }

  /// Nothing to look up before a tile's copies (PagedKv's page ids).
  struct TilePages {};
  __device__ __forceinline__ TilePages lookup(int /*key0*/) const { return {}; }
  __device__ __forceinline__ int length() { return seqlen_k; }

  /// The cp.async copies of key tile [key0, key0 + kBlockN) into (kBlockN, kHeadDim) tiles at
  /// k_dst and v_dst; rows past the sequence zero-filled. The rows are one stride apart, so
  /// each thread walks its rows with one pointer (load_rows_async's address per row and chunk,
  /// all computed before the copies, took 153 registers at hd 128; nvcc 13.0, sm_90).
  __device__ __forceinline__ void load_tile(u32 k_dst, u32 v_dst, int key0, TilePages) const {
    load_tile_padded_async<Config::kBlockN, Config::kHeadDimQK, Config::kHeadDimQKPad,
                           Config::kThreads, kDecodeL2Prefetch>(k_dst, k + key0 * k_row_stride,
                                                          k_row_stride, seqlen_k - key0);
    load_tile_padded_async<Config::kBlockN, Config::kHeadDimV, Config::kHeadDimVPad,
                           Config::kThreads, kDecodeL2Prefetch>(v_dst, v + key0 * v_row_stride,
                                                          v_row_stride, seqlen_k - key0);
  }
};

/// Records the first bad block-table entry or length a kernel meets (abi/decode_params.h
/// kv_status); later ones leave it as it is. Thread 0 of the CTA reports (every thread met the
/// same entry), or each `reporter` (the threads that read entries apart).
__device__ __forceinline__ void report_kv_status(int32_t *status, int code, int batch, int index,
                                                 int value, bool reporter = threadIdx.x == 0) {
  if (!reporter || atomicCAS(status, FAGEN_KV_STATUS_OK, code) != FAGEN_KV_STATUS_OK)
    return;
  status[1] = batch;
  status[2] = index;
  status[3] = value;
}

/// A paged decode kernel's CTA's own status record among `records` (abi/decode_params.h
/// kv_status), which thread 0 marks OK as the CTA starts, with its share of the `stale` records
/// past the grid's; reports of the CTA's other threads must follow a barrier.
__device__ __forceinline__ int32_t *cta_kv_status(int32_t *records, int stale = 0) {
  const int ctas = gridDim.x * gridDim.y * gridDim.z;
  const int cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (threadIdx.x == 0)
    for (int r = cta; r < ctas + stale; r += ctas)
      records[FAGEN_KV_STATUS_WORDS * r] = FAGEN_KV_STATUS_OK;
  return records + FAGEN_KV_STATUS_WORDS * cta;
}

/// `page`, the entry of a block-table row's slot `slot`, when it is a page id in
/// [0, num_pages), else -1 (reported in the status record, as report_kv_status's `reporter`).
__device__ __forceinline__ int checked_page_id(int page, int slot, int num_pages, int32_t *status,
                                               int batch, bool reporter = threadIdx.x == 0) {
  if (page >= 0 && page < num_pages)
    return page;
  report_kv_status(status, FAGEN_KV_STATUS_PAGE_ID, batch, slot, page, reporter);
  return -1;
}

/// Entry `slot` of a sequence's block-table row `pages`, checked as checked_page_id.
__device__ __forceinline__ int checked_page(const int32_t *pages, int slot, int num_pages,
                                            int32_t *status, int batch,
                                            bool reporter = threadIdx.x == 0) {
  return checked_page_id(pages[slot], slot, num_pages, status, batch, reporter);
}

/// The K and V rows of one (batch, kv head) in a paged cache: key j at row j % kPageSize of
/// page block_table[batch][j / kPageSize]. A tile's page ids are looked up (lookup) apart from
/// its copies (load_tile), so that they can be requested early: before the sequence's length
/// has arrived (the table's row spans the call's longest length, params.fwd.seqlen_k) and a
/// tile ahead of the copies. Every page id is checked against the cache before a copy goes
/// through it, and the length against seqlen_k: a bad entry is reported and loads nothing (its
/// rows are zero-filled; a bad length is clamped), so no table reads outside the caches.
template <class Config> struct PagedKv {
  using Element = typename Config::Element;
  static constexpr int kPageSize = Config::kPageSize, kRunRows = Config::kRunRows;
  static constexpr int kRuns = Config::kBlockN / kRunRows;
  const Element *k, *v; // the caches at this kv head: page 0, row 0
  int64_t k_page_stride, v_page_stride, k_row_stride, v_row_stride;
  const int32_t *pages; // this sequence's row of the block table
  int32_t *status;
  int num_pages, batch, table_keys, seqlen_k;

  __device__ __forceinline__ PagedKv(const fagen_decode_params &params, int batch_, int kv_head) {
    const fagen_fwd_params &p = params.fwd;
    k = static_cast<const Element *>(p.k) + kv_head * p.k_head_stride;
    v = static_cast<const Element *>(p.v) + kv_head * p.v_head_stride;
    k_page_stride = p.k_batch_stride;
    v_page_stride = p.v_batch_stride;
    k_row_stride = p.k_row_stride;
    v_row_stride = p.v_row_stride;
    pages = params.block_table + batch_ * params.block_table_batch_stride;
    status = cta_kv_status(params.kv_status, params.kv_status_stale); // thread 0 reports
    num_pages = params.num_pages;
    batch = batch_;
    table_keys = p.seqlen_k;
    seqlen_k = params.seqused_k[batch_]; // requested here, used by length()
  }

  /// The sequence's length, seqused_k clamped to [0, params.fwd.seqlen_k] (reported if it had to).
  __device__ __forceinline__ int length() {
    const int used = seqlen_k;
    seqlen_k = min(max(used, 0), table_keys);
    if (seqlen_k != used)
      report_kv_status(status, FAGEN_KV_STATUS_SEQUSED_K, batch, 0, used);
    return seqlen_k;
  }

  /// The table's entries of the runs of key tile [key0, key0 + kBlockN), unchecked; -1 past the
  /// table's row (params.fwd.seqlen_k keys).
  struct TilePages {
    int page[kRuns];
  };
  __device__ __forceinline__ TilePages lookup(int key0) const {
    TilePages t;
#pragma unroll
    for (int run = 0; run < kRuns; ++run) {
      const int key = key0 + run * kRunRows;
      t.page[run] = key < table_keys ? pages[key / kPageSize] : -1;
    }
    return t;
  }

  /// As ContiguousKv::load_tile, with the tile's entries from lookup(key0) (after length()): the
  /// tile is kRuns runs of rows one stride apart (each inside one page), one pointer per run;
  /// runs past the sequence are zero-filled, their entries neither checked nor used.
  __device__ __forceinline__ void load_tile(u32 k_dst, u32 v_dst, int key0,
                                            const TilePages &t) const {
#pragma unroll
    for (int run = 0; run < kRuns; ++run) {
      const int key = key0 + run * kRunRows;
      const int page = key < seqlen_k ? checked_page_id(t.page[run], key / kPageSize, num_pages,
                                                         status, batch)
                                       : -1;
      load_run<Config::kHeadDimQK, Config::kHeadDimQKPad>(k_dst, k, k_page_stride, k_row_stride,
                                                          run, key, page);
      load_run<Config::kHeadDimV, Config::kHeadDimVPad>(v_dst, v, v_page_stride, v_row_stride,
                                                        run, key, page);
    }
  }

private:
  /// Run `run` of a tile, its first key `key` in page `page` (-1: zero-filled, nothing read).
  template <int kDim, int kDimPad>
  __device__ __forceinline__ void load_run(u32 dst, const Element *cache, int64_t page_stride,
                                           int64_t row_stride, int run, int key,
                                           int page) const {
    const int rows = page < 0 ? 0 : seqlen_k - key;
    const int64_t in_page = key % kPageSize;
    load_tile_padded_async<kRunRows, kDim, kDimPad, Config::kThreads, kDecodeL2Prefetch>(
        dst + run * kRunRows * SmemRow<kDimPad>::kBytes,
        cache + max(page, 0) * page_stride + in_page * row_stride, row_stride, rows);
  }
};

/// The decode kernel's cache: paged when Config::kPageSize is set.
template <class Config>
using DecodeKvCache =
    typename std::conditional<Config::kPaged, PagedKv<Config>, ContiguousKv<Config>>::type;

} // namespace sm80
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM80_DECODE_KV_CACHE_CUH
