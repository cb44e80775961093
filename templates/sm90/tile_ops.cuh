// fagen sm90: tile-level steps of the forward kernel, built on the atoms of wgmma.cuh.
//
// Shared-memory tiles (rows, kHeadDim) are stored as kHeadDim / 64 column blocks of
// (rows, 64) elements, each row 128 bytes with the 128-byte swizzle (wgmma.cuh); column block
// b starts at b * rows * 128 bytes. Q and K are read K-major (head dim contiguous), V MN-major
// (its rows are the keys, the K of P V), so all three share this one layout and one loader.
// Register tiles of a warpgroup: float[N / 8][4] per thread, the layout of wgmma.cuh.
#ifndef FAGEN_TEMPLATES_SM90_TILE_OPS_CUH
#define FAGEN_TEMPLATES_SM90_TILE_OPS_CUH

#include <stdint.h>

#include "common/softmax.cuh"
#include "sm80/mma.cuh"
#include "sm90/softmax.cuh"
#include "sm90/wgmma.cuh"

namespace fagen {
namespace sm90 {

using sm80::cp_async_16;
using sm80::pack2;

/// Byte offset of 16-byte chunk `chunk` (8 elements) of row `row` in a swizzled (kRows, *) tile.
template <int kRows> __device__ __forceinline__ u32 swizzled_offset(int row, int chunk) {
  return (chunk / 8) * kRows * 128 + row * 128 + (((chunk % 8) ^ (row % 8)) << 4);
}

/// Issues the cp.async copies of a (kRows, kHeadDim) tile by all kThreads threads into the
/// swizzled layout; rows >= rows_valid are zero-filled, so masked keys multiply zeros, never
/// stale NaNs. Global reads stay coalesced: consecutive threads take consecutive chunks.
template <int kRows, int kHeadDim, int kThreads, class Element>
__device__ __forceinline__ void load_tile_sw128(u32 smem, const Element *gmem, int64_t row_stride,
                                                int rows_valid) {
  constexpr int kChunksPerRow = kHeadDim / 8;
  static_assert(kThreads % kChunksPerRow == 0, "each thread keeps one column chunk");
  constexpr int kRowsPerRound = kThreads / kChunksPerRow;
  static_assert(kRows % kRowsPerRound == 0, "whole rounds of rows");
  static_assert(kRowsPerRound % 8 == 0,
                "a round must cover whole swizzle atoms (8 rows): more threads or a smaller "
                "kHeadDim");
  const int tid = thread_index_rematerialized();
  const int row0 = tid / kChunksPerRow, chunk = tid % kChunksPerRow;
  const Element *src = gmem + row0 * row_stride + chunk * 8;
  // kRowsPerRound is a multiple of 8, so the swizzle of a thread's chunk is the same every round.
  const u32 dst = smem + swizzled_offset<kRows>(row0, chunk);
  const int rows_left = rows_valid - row0;
#pragma unroll
  for (int i = 0; i < kRows / kRowsPerRound; ++i) {
    const bool valid = i * kRowsPerRound < rows_left;
    cp_async_16(dst + i * kRowsPerRound * 128, valid ? src : gmem, valid);
    src += kRowsPerRound * row_stride;
  }
}

/// A warpgroup's accumulator tile set to 0 (O before the first P V).
template <int kN> __device__ __forceinline__ void zero_fill(float (&acc)[kN][4]) {
#pragma unroll
  for (int j = 0; j < kN; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc[j][e] = 0.f;
}

/// s (64, kBlockN) = q (64, kHeadDim) * k (kBlockN, kHeadDim)^T, issued (not awaited) by one
/// warpgroup. q_smem: the warpgroup's first Q row in a (kRowsQ, kHeadDim) tile; k_smem: the
/// first of kBlockN K rows in a (kRowsK, kHeadDim) tile (a multiple of 8 rows in).
template <class Element, int kHeadDim, int kRowsQ, int kBlockN, int kRowsK = kBlockN>
__device__ __forceinline__ void gemm_qk_issue(float (&s)[kBlockN / 8][4], u32 q_smem,
                                              u32 k_smem) {
  const SmemDescSw128<16, 1024> q(q_smem), kd(k_smem);
#pragma unroll
  for (int k = 0; k < kHeadDim / 16; ++k) {
    const u32 column = (k / 4), within = (k % 4) * 32; // 64-column block, 16-column step in it
    Wgmma<kBlockN, Element>::ss(s, q.at(column * kRowsQ * 128 + within),
                                kd.at(column * kRowsK * 128 + within), k > 0);
  }
}

/// o (64, kHeadDim) += p (64, kBlockN) * v (kBlockN, kHeadDim), issued (not awaited) by one
/// warpgroup; p: kBlockN / 16 A fragments (16 keys each).
template <class Element, int kHeadDim, int kBlockN>
__device__ __forceinline__ void gemm_pv_issue(float (&o)[kHeadDim / 8][4],
                                              const u32 (&p)[kBlockN / 16][4], u32 v_smem) {
  const SmemDescSw128<kBlockN * 128, 1024> v(v_smem);
#pragma unroll
  for (int k = 0; k < kBlockN / 16; ++k)
    Wgmma<kHeadDim, Element>::rs(o, p[k], v.at(k * 16 * 128), 1);
}

/// One warp's 16 rows of gemm_qk_issue's s (rows 16 warp .. 16 warp + 15 of the warpgroup's 64,
/// the same accumulator layout), with mma.sync from the same shared-memory tiles, for a warp that
/// recomputes its rows alone (wgmma needs the whole warpgroup). The products and fp32 sums are
/// the same; the order of the additions inside the tensor cores may differ in the last bits.
template <class Element, int kHeadDim, int kRowsQ, int kBlockN>
__device__ __forceinline__ void gemm_qk_warp(float (&s)[kBlockN / 8][4], u32 q_smem, u32 k_smem) {
  static_assert(kBlockN % 16 == 0, "pairs of 8-key groups a ldmatrix");
  const int tid = thread_index_rematerialized(), warp = tid / 32 % 4, lane = tid % 32;
  zero_fill(s);
  const int a_row = 16 * warp + lane % 16; // ldmatrix: lane l addresses row l % 8 of matrix l / 8
  const int m = lane / 8;
  // A pair of 8-key groups at a time, over the whole head dim: few registers beside the live
  // S, O and P (a rare path; the A fragments are loaded again for each pair).
#pragma unroll
  for (int j = 0; j < kBlockN / 8; j += 2) {
    const int b_row = 8 * (j + m / 2) + lane % 8;
#pragma unroll 1
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      // swizzled_offset's address, spelled out: with the chunk split into its 64-column block
      // and a first chunk whose +0/1 cannot carry (swizzled_offset<kRowsQ>(a_row, 2 * kk +
      // lane / 16) made ptxas emit 19 more SHF / LOP3 here, nvcc 13.0).
      const int block = kk / 4, chunk0 = 2 * (kk % 4); // 64-column block, first 16-byte chunk
      u32 a[4], b[4];
      sm80::ldmatrix_x4(a, q_smem + block * kRowsQ * 128 + a_row * 128 +
                               (((chunk0 + lane / 16) ^ (a_row % 8)) << 4));
      sm80::ldmatrix_x4(b, k_smem + block * kBlockN * 128 + b_row * 128 +
                               (((chunk0 + m % 2) ^ (b_row % 8)) << 4));
      sm80::mma<Element>(s[j], a, b[0], b[1]);
      sm80::mma<Element>(s[j + 1], a, b[2], b[3]);
    }
  }
}

/// Rounds probabilities to Element: accumulator tiles 2k and 2k+1 are A fragment k.
template <class Element, int kColTiles>
__device__ __forceinline__ void convert_p(u32 (&p)[kColTiles / 2][4],
                                          const float (&s)[kColTiles][4]) {
#pragma unroll
  for (int k = 0; k < kColTiles / 2; ++k) {
    p[k][0] = pack2<Element>(s[2 * k][0], s[2 * k][1]);
    p[k][1] = pack2<Element>(s[2 * k][2], s[2 * k][3]);
    p[k][2] = pack2<Element>(s[2 * k + 1][0], s[2 * k + 1][1]);
    p[k][3] = pack2<Element>(s[2 * k + 1][2], s[2 * k + 1][3]);
  }
}

/// Writes one warp's 16 output rows (rows >= rows_valid are not written) straight from the
/// accumulator fragments, with 16-byte stores: for each row and 4 column tiles (32 columns), the
/// quad that holds the row transposes its 4 x 4 words (lane q then holds column tile q's 8
/// columns), in two butterfly stages of shuffles (partner lane ^ 2: the 2 x 2 blocks off the
/// diagonal swap; then ^ 1: the words within each block). 4x fewer stores than a 4-byte store
/// per word, in whole 16-byte chunks, and no shared memory. Only the first kCols columns (a
/// multiple of 32): the rest are padding.
template <class Element, int kHeadDim, int kCols = kHeadDim>
__device__ __forceinline__ void store_o_rows(Element *gmem, int64_t row_stride, int rows_valid,
                                             const float (&o)[kHeadDim / 8][4]) {
  static_assert(kCols % 32 == 0, "store_o_rows: whole groups of 4 column tiles");
  const int lane = threadIdx.x % 32, q = lane % 4;
  // One exchange of a butterfly stage: this lane's word m of the pair whose index bit `bit`
  // differs from its own lane bit goes to the partner (lane ^ bit), which puts it at the same
  // position of its own pair.
  auto exchange = [q](u32(&w)[4], int bit) {
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      // The pair's word m: indices (bit 2: m, m + 2; bit 1: 2m, 2m + 1); the lane sends the
      // one whose index bit differs from its own.
      const int lo = bit == 2 ? m : 2 * m, hi = lo + bit;
      const bool mine_hi = (q & bit) != 0; // the lane keeps hi when its bit is set
      const u32 send = mine_hi ? w[lo] : w[hi];
      const u32 got = __shfl_xor_sync(0xffffffffu, send, bit);
      w[lo] = mine_hi ? got : w[lo];
      w[hi] = mine_hi ? w[hi] : got;
    }
  };
  // The thread's two rows: lane / 4 and lane / 4 + 8, from its column chunk q on.
  Element *rows[2] = {gmem + (lane / 4) * row_stride + 8 * q,
                      gmem + (lane / 4 + 8) * row_stride + 8 * q};
  auto store_all = [&](auto valid) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int g = 0; g < kCols / 32; ++g) {
        u32 w[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
          w[j] = pack2<Element>(o[4 * g + j][2 * h], o[4 * g + j][2 * h + 1]);
        exchange(w, 2);
        exchange(w, 1);
        // w[j] is now lane j's word q: columns 8 (4g + q) + 2j, + 1.
        if (valid(h))
          st_global_v4(rows[h] + 32 * g, w);
      }
    }
  };
  // A warp whose 16 rows are all in the sequence (every warp but those of a last, short query
  // tile) stores without a condition: no branch around each store, and every address the row's
  // base plus a constant.
  if (__all_sync(0xffffffffu, rows_valid >= 16))
    store_all([](int) { return true; });
  else
    store_all([&](int h) { return lane / 4 + 8 * h < rows_valid; });
}

/// Writes one warp's 16 rows of O fragments (rows row0..row0+15, the first kCols columns) to a
/// swizzled (kTileRows, >= kDimV) tile at `tile` (the layout above, which TMA reads too); lane:
/// the thread's lane, read by the caller where it does not cost the accumulators registers.
template <class Element, int kDimV, int kCols, int kTileRows>
__device__ __forceinline__ void stage_o_rows(u32 tile, int row0, int lane,
                                             const float (&o)[kDimV / 8][4]) {
  // Rows lane / 4 and lane / 4 + 8 share their swizzle (row % 8): chunk d of either lies at
  // base ^ (d % 8) << 4, plus its column block, as the base has bits 4-6 clear.
  const u32 base = (tile + (row0 + lane / 4) * 128 + 4 * (lane % 4)) ^ ((row0 + lane / 4) % 8) << 4;
#pragma unroll
  for (int d = 0; d < kCols / 8; ++d)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      st_shared_b32((base ^ (d % 8) << 4) + (d / 8) * kTileRows * 128 + h * 8 * 128,
                          pack2<Element>(o[d][2 * h], o[d][2 * h + 1]));
}

/// Writes one warp's 16 output rows (rows >= rows_valid are not written) through shared
/// memory: the fragments go to the warp's own 16 rows of a swizzled (kTileRows, >= kDimV) tile
/// at `tile` (the layout above; rows row0..row0+15, which no other warp touches), then out with
/// coalesced 16-byte stores of the first kCols columns (whole rows a warp instruction, where
/// store_o_rows writes 8 rows x 64 bytes). The caller makes those rows free (and, where TMA
/// fills them next, fences the generic proxy after this).
template <class Element, int kDimV, int kCols, int kTileRows>
__device__ __forceinline__ void store_o_rows_staged(Element *gmem, int64_t row_stride,
                                                    int rows_valid, u32 tile, int row0,
                                                    const float (&o)[kDimV / 8][4]) {
  // The thread index read here, not hoisted: kept from before the main loop, the addresses
  // below took registers the accumulators need (hd 256 spilled 72-112 bytes).
  const int lane = thread_index_rematerialized() % 32;
  __syncwarp();
  stage_o_rows<Element, kDimV, kCols, kTileRows>(tile, row0, lane, o);
  __syncwarp();
  auto chunk_addr = [tile, row0](int row, int chunk) {
    return tile + swizzled_offset<kTileRows>(row0 + row, chunk);
  };
  sm80::copy_rows_to_global<16, kCols / 8>(gmem, row_stride, rows_valid, lane, chunk_addr);
}

} // namespace sm90
} // namespace fagen

#endif // FAGEN_TEMPLATES_SM90_TILE_OPS_CUH
