// fagen: dropout on P, one way for every forward: each thread draws the keep flags of its
// fragment elements (dropout_keep_bits, Philox patches of common/philox.h) where the kernel has
// issue slots and registers for it, and zeroes the dropped probabilities of P as packed for the
// P V MMAs (apply_dropout_packed). The kept ones are scaled by 1 / (1 - p) with O. The
// backward applies the same flags (patch_keep_flags, byte_sign_mask) inside its dS step; the
// sm90ws backward's transposed tiles take them from dropout_keep_bits_transposed and
// keep_mask_transposed.
#ifndef FAGEN_TEMPLATES_COMMON_DROPOUT_CUH
#define FAGEN_TEMPLATES_COMMON_DROPOUT_CUH

#include "common/philox.h"
#include "common/ptx.cuh"
#include "common/types.cuh"

namespace fagen {

/// Bit 7 of each byte of the result: whether that byte of r is >= the byte of the threshold
/// (t_low7 = threshold & 0x7f in every byte, t_not = ~threshold in every byte); other bits are
/// garbage. SWAR: (r | 0x80) - (t & 0x7f) borrows nothing across bytes, and its bit 7 is the
/// borrow into bit 7; the borrow out of a byte of r - t is then a majority. 3 instructions for 4
/// bytes (__vcmpgeu4 and the bit gathering that followed it took ~30 on sm_90).
__device__ __forceinline__ u32 bytes_ge_msb(u32 r, u32 t_low7, u32 t_not) {
  const u32 low = (r | 0x80808080u) - t_low7;
  return (r & t_not) | (low & (r | t_not)); // majority(r, ~t, low): one LOP3
}

/// A dropout threshold repeated in each byte, in the two forms bytes_ge_msb takes.
struct ByteThreshold {
  u32 low7, inv;
  __device__ __forceinline__ explicit ByteThreshold(u32 threshold)
      : low7(threshold * 0x01010101u & 0x7f7f7f7fu), inv(~(threshold * 0x01010101u)) {}
};

/// Dropout's keep flags of one Philox patch (philox.h) whose first element is (row, col): bit 7
/// of each byte of the patch's words x, y, z, w, set where that element is kept.
template <class Dropout>
__device__ __forceinline__ void patch_keep_flags(u32 (&flags)[4], const Dropout &dropout,
                                                 ByteThreshold t, int row, int col) {
  const Philox4 r = dropout_patch(dropout.seed, dropout.offset, dropout.bh, row, col);
  flags[0] = bytes_ge_msb(r.x, t.low7, t.inv), flags[1] = bytes_ge_msb(r.y, t.low7, t.inv);
  flags[2] = bytes_ge_msb(r.z, t.low7, t.inv), flags[3] = bytes_ge_msb(r.w, t.low7, t.inv);
}

/// 0xffffffff where bit 7 of byte `b` of `flags` is set, else 0: prmt's sign replication (one
/// PRMT once `b` is a constant, as in unrolled loops).
__device__ __forceinline__ u32 byte_sign_mask(u32 flags, int b) {
  switch (b) {
  case 0: return prmt<0x8888u>(flags, 0);
  case 1: return prmt<0x9999u>(flags, 0);
  case 2: return prmt<0xaaaau>(flags, 0);
  default: return prmt<0xbbbbu>(flags, 0);
  }
}

/// `x` where `mask` (a byte_sign_mask) is all ones, +0 where it is 0: a dropped element.
__device__ __forceinline__ float keep_masked(float x, u32 mask) {
  return __uint_as_float(__float_as_uint(x) & mask);
}

/// (a & mask) | (b & ~mask): one LOP3.
__device__ __forceinline__ u32 bit_mux(u32 a, u32 b, u32 mask) { return (a & mask) | (b & ~mask); }

/// Dropout's keep flags of a transposed score tile, the backward's S^T (rows: keys, columns:
/// query rows), in the m16n8 accumulator layout (wgmma's too) of kColTiles 8-column tiles: the
/// thread holds keys key16 + lane / 4 + 8 (e / 2) and query rows q0 + 8 j + 2 (lane % 4) + e % 2,
/// and element (j, e)'s flag (set where kept) is bit 8 e + 7 - j % 8 of bits[j / 8]
/// (keep_mask_transposed): byte e of a word holds the flags of 8 tiles. key16: the warp's first
/// key (a multiple of 16); q0: the tile's first query row (a multiple of 16). Whole warps call
/// it (shuffles).
/// The flags are the forward's (philox.h's rule at (query, key)): a patch holds query rows
/// {i, i + 8} and keys {c, c + 1, c + 8, c + 9, ...}, so transposed a thread meets 4 of its 16
/// bytes, and the partner lane (lane ^ 4: key ^ 1, the same query rows) needs the same patches.
/// Each of the two draws the patch of its own parity (i % 2 = key % 2) and they swap the flags:
/// one Philox call per 8 elements of a thread (the forward: per 16). One byte permute a row
/// half puts a tile's four flags in bit 7 of its four bytes, and two bit operations place them.
template <int kColTiles, class Dropout>
__device__ __forceinline__ void dropout_keep_bits_transposed(u32 (&bits)[ceil_div(kColTiles, 8)],
                                                             const Dropout &dropout, int key16,
                                                             int q0) {
  static_assert(kColTiles % 2 == 0, "whole pairs of 8-column tiles (16 query rows)");
  const ByteThreshold t(dropout.threshold);
  const int lane = threadIdx.x % 32, par = (lane >> 2) & 1;
  const bool odd16 = (key16 & 16) != 0; // keys 16..31 of their 32: words y and w of a patch
  // Key k's flag at row half h is byte 2 (k >> 3 & 1) + (k & 1) = 2 (e / 2) + par of word
  // 2 h + (k >> 4 & 1): byte e of __byte_perm(mine, other, sel) is element e's, from this
  // lane's draw where e % 2 = par (bytes 0-3), else the partner's (bytes 4-7).
  const u32 sel = par ? 0x3715u : 0x6240u;
#pragma unroll
  for (int w = 0; w < ceil_div(kColTiles, 8); ++w)
    bits[w] = 0;
#pragma unroll
  for (int g = 0; g < kColTiles / 2; ++g) {
    // Tiles j = 2 g (query row i = q0 + 16 g + 2 (lane % 4) + parity) and 2 g + 1 (row i + 8).
    const Philox4 r = dropout_patch(dropout.seed, dropout.offset, dropout.bh,
                                    q0 + 16 * g + 2 * (lane % 4) + par, key16 + lane / 4);
    const u32 mine0 = bytes_ge_msb(odd16 ? r.y : r.x, t.low7, t.inv);
    const u32 mine1 = bytes_ge_msb(odd16 ? r.w : r.z, t.low7, t.inv);
    const u32 other0 = __shfl_xor_sync(0xffffffffu, mine0, 4);
    const u32 other1 = __shfl_xor_sync(0xffffffffu, mine1, 4);
    const u32 pair = (__byte_perm(mine0, other0, sel) & 0x80808080u) |
                     (__byte_perm(mine1, other1, sel) >> 1 & 0x40404040u);
    bits[g / 4] |= pair >> (2 * (g % 4));
  }
}

/// 0xffffffff where dropout keeps element (j, e) of a dropout_keep_bits_transposed tile, else 0:
/// tile j's flags shifted to bit 7 of the bytes (one shift for the tile's four elements), then
/// byte e's replicated (one prmt).
template <int kWords>
__device__ __forceinline__ u32 keep_mask_transposed(const u32 (&bits)[kWords], int j, int e) {
  return byte_sign_mask(bits[j / 8] << (j % 8), e);
}

/// Dropout's keep flags of this thread's (16 * kRowTiles, 8 * kColTiles) fragment elements.
/// kColTiles % 4 == 0: one Philox call per 16-row tile and four 8-column tiles (philox.h's
/// patch): call c = t * kColTiles / 4 + g keeps its 16 flags in register c / 2, bits 7 - 4 (c
/// even) or 3 - 0 (c odd) of each byte b: the flags of byte b of the patch's words x, y, z, w in
/// that order (apply_dropout_packed turns them into masks with prmt). Otherwise element (t, j,
/// e) is bit 4 * (t * kColTiles + j) + e (one draw per 8-column tile). Called where its Philox
/// rounds find registers (fwd_kernel: before QK^T, or during the previous tile's P @ V when O is
/// small). row0 % 16 == 0; (row0, col0) as apply_mask.
template <int kRowTiles, int kColTiles, class Dropout>
__device__ __forceinline__ void dropout_keep_bits(u32 (&bits)[ceil_div(kRowTiles * kColTiles, 8)],
                                                  const Dropout &dropout, int row0, int col0) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int w = 0; w < ceil_div(kRowTiles * kColTiles, 8); ++w)
    bits[w] = 0;
  if constexpr (kColTiles % 4 == 0) {
    const ByteThreshold threshold(dropout.threshold);
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
      for (int g = 0; g < kColTiles / 4; ++g) {
        const int c = t * (kColTiles / 4) + g;
        const int row = row0 + 16 * t + lane / 4, col = col0 + 32 * g + 2 * (lane % 4);
        u32 f[4];
        patch_keep_flags(f, dropout, threshold, row, col);
        const u32 kx = f[0], ky = f[1], kz = f[2], kw = f[3];
        if (c % 2 == 0)
          bits[c / 2] = bit_mux(bit_mux(kx, ky >> 1, 0x80808080u),
                                bit_mux(kz >> 2, kw >> 3, 0x20202020u), 0xc0c0c0c0u);
        else
          bits[c / 2] = bit_mux(bits[c / 2],
                                bit_mux(bit_mux(kx >> 4, ky >> 5, 0x08080808u),
                                        bit_mux(kz >> 6, kw >> 7, 0x02020202u), 0x0c0c0c0cu),
                                0xf0f0f0f0u);
      }
  } else {
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
      for (int j = 0; j < kColTiles; ++j) {
        const int i = t * kColTiles + j;
        const int row = row0 + 16 * t + lane / 4, col = col0 + 8 * j + 2 * (lane % 4);
        bits[i / 8] |= dropout.keep4(row, col) << 4 * (i % 8);
      }
  }
}

/// Zeroes the probabilities that dropout drops (keep flags from dropout_keep_bits), on P as
/// convert_p packs it: p[t][k][0] = tile 2k, elements 0-1, [1] = tile 2k, 2-3, [2] and [3] =
/// tile 2k + 1; the low half of each register is the even column. The kept values are scaled
/// by 1 / (1 - p) later, with O.
template <int kRowTiles, int kKTiles>
__device__ __forceinline__ void
apply_dropout_packed(u32 (&p)[kRowTiles][kKTiles][4],
                     const u32 (&bits)[ceil_div(kRowTiles * 2 * kKTiles, 8)]) {
  if constexpr (kKTiles % 2 == 0) {
    // Call c's flags of word x / y / z / w at bit 7 of each byte after a left shift by
    // 4 (c % 2) + 0 / 1 / 2 / 3; prmt replicates byte 0 / 1 (2 / 3) of the word's flags into
    // the low / high half of the mask of an 8-column tile's even (odd) tile of the pair.
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
      for (int g = 0; g < kKTiles / 2; ++g) {
        const int c = t * (kKTiles / 2) + g, s = 4 * (c % 2);
        const u32 fx = bits[c / 2] << s, fy = bits[c / 2] << (s + 1);
        const u32 fz = bits[c / 2] << (s + 2), fw = bits[c / 2] << (s + 3);
        p[t][2 * g][0] &= prmt<0x9988>(fx, 0);     // 8-column tile 4g, row lane / 4
        p[t][2 * g][2] &= prmt<0xbbaa>(fx, 0);     // tile 4g + 1
        p[t][2 * g][1] &= prmt<0x9988>(fz, 0);     // tile 4g, row lane / 4 + 8
        p[t][2 * g][3] &= prmt<0xbbaa>(fz, 0);
        p[t][2 * g + 1][0] &= prmt<0x9988>(fy, 0); // tile 4g + 2
        p[t][2 * g + 1][2] &= prmt<0xbbaa>(fy, 0); // tile 4g + 3
        p[t][2 * g + 1][1] &= prmt<0x9988>(fw, 0);
        p[t][2 * g + 1][3] &= prmt<0xbbaa>(fw, 0);
      }
  } else {
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t)
#pragma unroll
      for (int j = 0; j < 2 * kKTiles; ++j) {
        const int i = t * 2 * kKTiles + j;
        const u32 keep = bits[i / 8] >> 4 * (i % 8);
        const u32 upper = (keep & 1u ? 0x0000ffffu : 0u) | (keep & 2u ? 0xffff0000u : 0u);
        const u32 lower = (keep & 4u ? 0x0000ffffu : 0u) | (keep & 8u ? 0xffff0000u : 0u);
        p[t][j / 2][2 * (j % 2)] &= upper;
        p[t][j / 2][2 * (j % 2) + 1] &= lower;
      }
  }
}

} // namespace fagen

#endif // FAGEN_TEMPLATES_COMMON_DROPOUT_CUH
