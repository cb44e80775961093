// fagen sm80: tile-level steps of the forward kernel, built on the atoms of mma.cuh.
//
// Shared-memory tiles are (rows, kHeadDim) row-major (SmemRow): rows of whole 128-byte lines
// (head dims that are multiples of 64) unpadded with their 16-byte chunks XOR-swizzled, other
// rows padded to kHeadDim * 2 + 16 bytes; head dims that are not a multiple of 16 are stored as
// the next multiple, zero-filled (load_tile_padded_async). Register tiles use the C-fragment
// layout of common/softmax.cuh.
#ifndef FAGEN_TEMPLATES_SM80_TILE_OPS_CUH
#define FAGEN_TEMPLATES_SM80_TILE_OPS_CUH

#include <stdint.h>

#include "common/dropout.cuh"
#include "common/epilogue.cuh"
#include "common/key_tiles.cuh"
#include "common/philox.h"
#include "common/smem_layout.h"
#include "sm80/mma.cuh"

namespace fagen {
namespace sm80 {

/// Rows of a key tile of block_n rows that lie one row stride apart in a KV cache of
/// page_size-token pages (abi/decode_params.h; 0: contiguous): the whole tile where a page holds
/// it, else one page's rows (the tile is block_n / page_size pages). The decode's and the
/// paged forward's caches load a tile in such runs.
constexpr int paged_run_rows(int page_size, int block_n) {
  return page_size != 0 && page_size < block_n ? page_size : block_n;
}

/// The shared-memory row of a tile kHeadDim (padded to 16) columns wide. Either way the 8 rows
/// an ldmatrix phase reads at one logical chunk fall in 8 different 16-byte bank groups:
///  - kSwizzled (head dims that are multiples of 64, from kSwizzleFrom on): rows kHeadDim * 2
///    bytes apart, 16-byte chunk c of row r stored at chunk c ^ (r % 8) (a permutation within
///    each 128-byte line), so that every 128-byte line of a row, as cp.async copies it, fills
///    one aligned line of shared memory: with padded rows each line straddled two and cost two
///    wavefronts (ncu, H200: 2.3x the ideal cp.async wavefronts and sectors in the backward at
///    hd 256, docs/perf/sm80-bwd.md);
///  - otherwise rows padded by 16 bytes (an odd multiple of 16 bytes apart).
/// kSwizzleFrom: the forward's rows swizzle from 192 (kFwdSwizzleFrom: at hd 64 and 128 the
/// swizzle's per-lane chunk offsets cost registers that its 255-register default tiles do not
/// have, hd 128 spilled 40-64 bytes, nvcc 13.0); the backward's from 64 (BwdConfig).
/// The arithmetic is common/smem_layout.h's, which the planner's budget reads too.
/// Row indices are counted from a multiple of 8 (tile and warp origins are).
template <int kHeadDim, int kSwizzleFrom = kFwdSwizzleFrom> struct SmemRow {
  static constexpr bool kSwizzled = smem_row_swizzled(kHeadDim, kSwizzleFrom);
  static constexpr int kBytes = smem_row_bytes(kHeadDim, kSwizzleFrom);
  /// Byte offset of 16-byte chunk `chunk` of row `row` from the tile's origin.
  __device__ __forceinline__ static int offset(int row, int chunk) {
    return row * kBytes + (kSwizzled ? chunk ^ (row & 7) : chunk) * 16;
  }
};

/// Issues the cp.async copies of a (kRows, 8 * kChunksPerRow) tile by all kThreads threads,
/// rows kRow bytes apart; rows >= rows_valid and 16-byte chunks >= kValidChunks are zero-filled,
/// so masked keys and padded columns multiply zeros, never stale NaNs.
/// kSwizzled: chunk c of row r goes to chunk c ^ (r % 8) (SmemRow; needs kChunksPerRow % 8 == 0).
/// kL2Prefetch: cp_async_16's.
template <int kRows, int kChunksPerRow, int kValidChunks, int kRow, int kThreads,
          bool kSwizzled = false, bool kL2Prefetch = false, class Element>
__device__ __forceinline__ void load_chunks_async(u32 smem, const Element *gmem,
                                                  int64_t row_stride, int rows_valid) {
  static_assert(!kSwizzled || kChunksPerRow % 8 == 0, "swizzled rows are whole 128-byte lines");
  if constexpr (kThreads % kChunksPerRow == 0) {
    // Each thread keeps one column chunk and walks down the rows with one pointer: 64-bit
    // addresses for every chunk, hoisted out of the main loop, would cost ~30 registers, and
    // even this thread's row offset, hoisted, cost the spills of hd128 128x64 on sm_90.
    constexpr int kRowsPerRound = kThreads / kChunksPerRow;
    const int tid = thread_index_rematerialized();
    const int row0 = tid / kChunksPerRow, chunk = tid % kChunksPerRow;
    const bool chunk_valid = kValidChunks == kChunksPerRow || chunk < kValidChunks;
    const Element *src = gmem + row0 * row_stride + chunk * 8;
    const u32 dst = smem + row0 * kRow + (kSwizzled ? chunk ^ (row0 & 7) : chunk) * 16;
    // Row tests as (constant < rows_left): testing row0 + i * kRowsPerRound instead made nvcc
    // hoist (and on sm_100a spill) one register per round.
    const int rows_left = chunk_valid ? rows_valid - row0 : 0;
#pragma unroll
    for (int i = 0; i < ceil_div(kRows, kRowsPerRound); ++i) {
      if (kRows % kRowsPerRound == 0 || row0 + i * kRowsPerRound < kRows) {
        const bool valid = i * kRowsPerRound < rows_left;
        // Swizzled: row0 + i R has row0 % 8 ^ (i R) % 8 as its low bits when R is a power of
        // two and row0 < R (or R % 8 == 0: no change); else recomputed.
        u32 d = dst + i * kRowsPerRound * kRow;
        if constexpr (kSwizzled && kRowsPerRound % 8 != 0) {
          const u32 row_start = smem + (row0 + i * kRowsPerRound) * kRow;
          if constexpr ((kRowsPerRound & (kRowsPerRound - 1)) == 0)
            d = row_start + ((chunk ^ (row0 & 7) ^ ((i * kRowsPerRound) & 7)) * 16);
          else
            d = row_start + ((chunk ^ ((row0 + i * kRowsPerRound) & 7)) * 16);
        }
        cp_async_16<kL2Prefetch>(d, valid ? src : gmem, valid);
      }
      src += kRowsPerRound * row_stride;
    }
  } else {
    constexpr int kChunks = kRows * kChunksPerRow;
#pragma unroll
    for (int i = 0; i < ceil_div(kChunks, kThreads); ++i) {
      const int c = threadIdx.x + i * kThreads;
      if (kChunks % kThreads == 0 || c < kChunks) {
        const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
        const bool valid =
            row < rows_valid && (kValidChunks == kChunksPerRow || chunk < kValidChunks);
        cp_async_16<kL2Prefetch>(smem + row * kRow + (kSwizzled ? chunk ^ (row & 7) : chunk) * 16,
                                 gmem + (valid ? row : 0) * row_stride + chunk * 8, valid);
      }
    }
  }
}

/// Issues the cp.async copies of a (kRows, kHeadDim) tile by all kThreads threads; rows >=
/// rows_valid are zero-filled, so masked keys multiply zeros, never stale NaNs.
template <int kRows, int kHeadDim, int kThreads, class Element>
__device__ __forceinline__ void load_tile_async(u32 smem, const Element *gmem, int64_t row_stride,
                                                int rows_valid) {
  load_chunks_async<kRows, kHeadDim / 8, kHeadDim / 8, SmemRow<kHeadDim>::kBytes, kThreads,
                    SmemRow<kHeadDim>::kSwizzled>(smem, gmem, row_stride, rows_valid);
}

/// As load_tile_async for a (kRows, kCols) tile stored kColsPad columns wide (kColsPad: kCols
/// rounded up to the 16-deep MMA k step, rows SmemRow<kColsPad>::kBytes apart): the 16-byte
/// chunks in [kCols, kColsPad) are zero-filled, so a k step over them adds 0 * 0.
template <int kRows, int kCols, int kColsPad, int kThreads, bool kL2Prefetch = false,
          class Element>
__device__ __forceinline__ void load_tile_padded_async(u32 smem, const Element *gmem,
                                                       int64_t row_stride, int rows_valid) {
  static_assert(kCols % 8 == 0 && kColsPad % 8 == 0 && kCols <= kColsPad,
                "columns come in 16-byte chunks");
  load_chunks_async<kRows, kColsPad / 8, kCols / 8, SmemRow<kColsPad>::kBytes, kThreads,
                    SmemRow<kColsPad>::kSwizzled, kL2Prefetch>(smem, gmem, row_stride,
                                                               rows_valid);
}

/// As load_tile_padded_async for a tile whose rows lie anywhere: row r of the (kRows, kCols)
/// tile is read from row_ptr(r) (a const Element *), rows >= rows_valid and the columns in
/// [kCols, kColsPad) zero-filled. For rows that are not one stride apart (a decode tile's
/// packed query rows; a paged KV cache's key rows, through its block table).
template <int kRows, int kCols, int kColsPad, int kThreads, class RowPtr>
__device__ __forceinline__ void load_rows_async(u32 smem, RowPtr row_ptr, int rows_valid) {
  static_assert(kCols % 8 == 0 && kColsPad % 8 == 0 && kCols <= kColsPad,
                "columns come in 16-byte chunks");
  using Row = SmemRow<kColsPad>;
  constexpr int kChunksPerRow = kColsPad / 8, kValidChunks = kCols / 8;
  constexpr int kChunks = kRows * kChunksPerRow;
  // Addresses from a fresh read of the thread index: hoisted out of a caller's loop, one per
  // chunk would hold 2 registers each (hd 256 decode: 64, and spills).
  const int tid = thread_index_rematerialized();
#pragma unroll
  for (int i = 0; i < ceil_div(kChunks, kThreads); ++i) {
    const int c = tid + i * kThreads;
    if (kChunks % kThreads == 0 || c < kChunks) {
      const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
      const bool valid = row < rows_valid && (kValidChunks == kChunksPerRow || chunk < kValidChunks);
      cp_async_16(smem + Row::offset(row, chunk), row_ptr(valid ? row : 0) + chunk * 8, valid);
    }
  }
}

/// s (16 * kRowTiles, 8 * kColTiles) = q (16 * kRowTiles, kHeadDim) *
///                                    k (8 * kColTiles, kHeadDim)^T.
/// q_smem: the warp's first Q row; k_smem: the key tile's first row.
template <class Element, int kHeadDim, int kRowTiles, int kColTiles>
__device__ __forceinline__ void gemm_qk(float (&s)[kRowTiles][kColTiles][4], u32 q_smem,
                                        u32 k_smem) {
  static_assert(kColTiles % 2 == 0, "key tiles come in pairs of 8 rows");
  using Row = SmemRow<kHeadDim>;
  constexpr int kRow = Row::kBytes;
  const int lane = threadIdx.x % 32;
  // A (Q, row-major): matrices (rows 0-7|8-15) x (cols 0-7|8-15), lanes 0-15 then 16-31.
  const u32 a_addr = q_smem + (lane % 16) * kRow + (Row::kSwizzled ? 0 : (lane / 16) * 16);
  // B (K rows as columns): matrices (keys 0-7, k 0-7), (keys 0-7, k 8-15), (keys 8-15, ...).
  const u32 b_addr =
      k_smem + (lane % 8 + (lane / 16) * 8) * kRow + (Row::kSwizzled ? 0 : (lane / 8 % 2) * 16);
  // Byte offset of k step k's chunk (2 k + half) in this lane's row, past the base's (padded
  // rows: half is in the base). Swizzled: every row this lane addresses is lane % 8 past a
  // multiple of 8, so the chunk sits at (2 k + half) ^ (lane % 8) = 2 k ^ half ^ (lane % 8):
  // one of 4 per-lane offsets within each 128-byte line k / 4.
  auto chunk_offset = [lane](int k, int half) {
    return Row::kSwizzled ? (k / 4) * 128 + (((2 * (k % 4)) ^ half ^ (lane % 8)) * 16) : k * 32;
  };
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
    for (int j = 0; j < kColTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s[t][j][e] = 0.f;
#pragma unroll
  for (int k = 0; k < kHeadDim / 16; ++k) {
    u32 a[kRowTiles][4];
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t)
      ldmatrix_x4(a[t], a_addr + t * 16 * kRow + chunk_offset(k, lane / 16));
#pragma unroll
    for (int j = 0; j < kColTiles; j += 2) {
      u32 b[4];
      ldmatrix_x4(b, b_addr + j * 8 * kRow + chunk_offset(k, lane / 8 % 2));
#pragma unroll
      for (int t = 0; t < kRowTiles; ++t) {
        mma<Element>(s[t][j], a[t], b[0], b[1]);
        mma<Element>(s[t][j + 1], a[t], b[2], b[3]);
      }
    }
  }
}

/// Rounds probabilities to Element, reusing the C fragments of two adjacent 8-column tiles as
/// the A fragment of one 16-deep k step (no shared-memory round trip).
template <class Element, int kRowTiles, int kColTiles>
__device__ __forceinline__ void convert_p(u32 (&p)[kRowTiles][kColTiles / 2][4],
                                          const float (&s)[kRowTiles][kColTiles][4]) {
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
    for (int k = 0; k < kColTiles / 2; ++k) {
      p[t][k][0] = pack2<Element>(s[t][2 * k][0], s[t][2 * k][1]);
      p[t][k][1] = pack2<Element>(s[t][2 * k][2], s[t][2 * k][3]);
      p[t][k][2] = pack2<Element>(s[t][2 * k + 1][0], s[t][2 * k + 1][1]);
      p[t][k][3] = pack2<Element>(s[t][2 * k + 1][2], s[t][2 * k + 1][3]);
    }
}

/// o (16 * kRowTiles, kHeadDim) += p (16 * kRowTiles, 16 * kKTiles) * v (16 * kKTiles, kHeadDim).
template <class Element, int kHeadDim, int kRowTiles, int kKTiles>
__device__ __forceinline__ void gemm_pv(float (&o)[kRowTiles][kHeadDim / 8][4],
                                        const u32 (&p)[kRowTiles][kKTiles][4], u32 v_smem) {
  using Row = SmemRow<kHeadDim>;
  constexpr int kRow = Row::kBytes;
  const int lane = threadIdx.x % 32;
  // B (V, row-major over keys) through .trans: matrices (keys 0-7|8-15) x (dims 0-7|8-15).
  const u32 b_addr = v_smem + (lane % 16) * kRow + (Row::kSwizzled ? 0 : (lane / 16) * 16);
  // Byte offset of chunk d + lane / 16 (d even) in this lane's row, past the base's; as in
  // gemm_qk, swizzled chunks take one of 4 per-lane offsets within each 128-byte line.
  auto chunk_offset = [lane](int d) {
    return Row::kSwizzled ? (d / 8) * 128 + (((d % 8) ^ (lane / 16) ^ (lane % 8)) * 16) : d * 16;
  };
#pragma unroll
  for (int k = 0; k < kKTiles; ++k)
#pragma unroll
    for (int d = 0; d < kHeadDim / 8; d += 2) {
      u32 b[4];
      ldmatrix_x4_trans(b, b_addr + k * 16 * kRow + chunk_offset(d));
#pragma unroll
      for (int t = 0; t < kRowTiles; ++t) {
        mma<Element>(o[t][d], p[t][k], b[0], b[1]);
        mma<Element>(o[t][d + 1], p[t][k], b[2], b[3]);
      }
    }
}

/// Copies a warp's kRows x kChunksPerRow 16-byte chunks from shared memory to global memory
/// (rows >= rows_valid are not written) with coalesced 16-byte stores: consecutive lanes take
/// consecutive chunks of a row. smem_chunk(row, chunk) is a chunk's shared-memory address.
template <int kRows, int kChunksPerRow, class Element, class SmemChunk>
__device__ __forceinline__ void copy_rows_to_global(Element *gmem, int64_t row_stride,
                                                    int rows_valid, int lane,
                                                    SmemChunk smem_chunk) {
  constexpr int kChunks = kRows * kChunksPerRow;
#pragma unroll
  for (int i = 0; i < ceil_div(kChunks, 32); ++i) {
    const int c = lane + 32 * i;
    const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
    if ((kChunks % 32 == 0 || c < kChunks) && row < rows_valid) {
      u32 v[4];
      ld_shared_v4(v, smem_chunk(row, chunk));
      st_global_v4(gmem + row * row_stride + chunk * 8, v);
    }
  }
}

/// Writes the warp's (16 * kRowTiles, kCols) output rows from fragments kColsPad wide (the
/// padded columns are dropped): fragments go to the warp's own rows of shared memory (rows
/// SmemRow<kColsPad>::kBytes apart; no other warp reads them, so __syncwarp suffices), then out
/// with coalesced 16-byte stores. Rows >= rows_valid are not written.
template <class Element, int kCols, int kColsPad, int kRowTiles>
__device__ __forceinline__ void store_o_cols(Element *gmem, int64_t row_stride, int rows_valid,
                                             u32 smem,
                                             const float (&o)[kRowTiles][kColsPad / 8][4]) {
  using Row = SmemRow<kColsPad>;
  constexpr int kRow = Row::kBytes;
  const int lane = threadIdx.x % 32;
  __syncwarp();
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
    for (int d = 0; d < kCols / 8; ++d) {
      // Rows 16 t + lane / 4 and 8 below it: the same row % 8. Padded rows keep their own
      // expression: through Row::offset ptxas scheduled hd 64-128 differently (SASS compared).
      const u32 addr = Row::kSwizzled
                           ? smem + Row::offset(16 * t + lane / 4, d) + (lane % 4) * 4
                           : smem + (16 * t + lane / 4) * kRow + (8 * d + 2 * (lane % 4)) * 2;
      st_shared_b32(addr, pack2<Element>(o[t][d][0], o[t][d][1]));
      st_shared_b32(addr + 8 * kRow, pack2<Element>(o[t][d][2], o[t][d][3]));
    }
  __syncwarp();
  copy_rows_to_global<16 * kRowTiles, kCols / 8>(
      gmem, row_stride, rows_valid, lane,
      [smem](int row, int chunk) {
        return Row::kSwizzled ? smem + Row::offset(row, chunk) : smem + row * kRow + chunk * 16;
      });
}

} // namespace sm80
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM80_TILE_OPS_CUH
