// fagen: Philox4x32 counter-based random numbers (Salmon et al., SC'11) and the dropout
// keep rule every template and the CPU reference share.
//
// Dropout draws Philox4x32-7 (kDropoutPhiloxRounds), as FlashAttention-2 does (its philox.cuh:
// six rounds, then a seventh); Random123 lists Philox4x32-7 among the generators that pass
// TestU01's BigCrush (10 rounds is its default, for a safety margin). Each round is two
// 32x32->64 multiplies and two 3-input XORs a thread, and the forward's dropout cost tracks its
// instruction count (docs/perf/sm80-fwd.md): 7 rounds instead of 10 drop 30 % of the Philox work.
// Until params version 4 (fwd) / 2 (bwd) the rule used 10 rounds.
//
// Host and device: plain C++ with no CUDA headers; under nvcc the functions are
// __host__ __device__. The rule is part of the numerics contract (the backward regenerates the
// forward's mask from it, and `fagen check` reproduces it on the CPU): changing it changes
// every dropout result, so it is versioned with the params (FAGEN_FWD_PARAMS_VERSION).
//
// One Philox call gives 16 bytes; each decides one element with 8 bits (as FlashAttention-2
// does: one 32-bit draw per element made dropout cost +75% at hd 128 on the H200, 2026-11-30),
// so p is quantized to 1/256: threshold = min(255, round(p * 256)), effective p = threshold /
// 256, kept values scaled by 256 / (256 - threshold).
// Element (b, h, i, j) of the attention matrix (i, j: query / key index within the sequence)
// belongs to the patch {r, r + 8} x {c + 8 t + e : t = 0..3, e = 0, 1} with
// r = (i & ~15) | (i & 7) and c = j & ~25 (bits 0, 3, 4 cleared): exactly the 16 elements one
// thread holds in four adjacent m16n8 MMA accumulators (rows lane/4 and lane/4 + 8, columns
// 2 (lane % 4) + {0, 1} of each 8-column tile), so one Philox call serves a thread's 32 columns.
//   counter = {(j >> 5) * 4 + ((j >> 1) & 3), (i >> 4) * 8 + (i & 7), b * heads_q + h,
//              uint32(offset)}
//   key     = {uint32(seed), uint32(seed >> 32) ^ uint32(offset >> 32)}
//   byte    = ((i >> 3) & 1) * 8 + ((j >> 3) & 3) * 2 + (j & 1)   (byte k of the output is
//             bits 8 (k % 4) .. of word k / 4, words in the order x, y, z, w)
//   kept   <=> byte value >= threshold
#ifndef FAGEN_TEMPLATES_COMMON_PHILOX_H
#define FAGEN_TEMPLATES_COMMON_PHILOX_H

#include <stdint.h>

#if defined(__CUDACC__)
#define FAGEN_PHILOX_HD __host__ __device__ __forceinline__
#else
#define FAGEN_PHILOX_HD inline
#endif

namespace fagen {

struct Philox4 {
  uint32_t x, y, z, w;
};

FAGEN_PHILOX_HD uint32_t philox_mulhi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return uint32_t((uint64_t(a) * b) >> 32);
#endif
}

/// The rounds of the dropout rule's Philox4x32 (see the file comment).
constexpr int kDropoutPhiloxRounds = 7;

/// Philox4x32 with kRounds rounds (Random123's philox4x32_R).
template <int kRounds>
FAGEN_PHILOX_HD Philox4 philox4x32(Philox4 c, uint32_t k0, uint32_t k1) {
  const uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  const uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < kRounds; ++round) {
    const uint32_t hi0 = philox_mulhi(kM0, c.x), lo0 = kM0 * c.x;
    const uint32_t hi1 = philox_mulhi(kM1, c.z), lo1 = kM1 * c.z;
    c = Philox4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

/// The 16 bytes of the patch that holds (i, j) (see the file comment).
FAGEN_PHILOX_HD Philox4 dropout_patch(uint64_t seed, uint64_t offset, uint32_t bh, int i, int j) {
  Philox4 c{(uint32_t(j) >> 5) * 4u + ((uint32_t(j) >> 1) & 3u),
            (uint32_t(i) >> 4) * 8u + (uint32_t(i) & 7u), bh, uint32_t(offset)};
  return philox4x32<kDropoutPhiloxRounds>(c, uint32_t(seed),
                                          uint32_t(seed >> 32) ^ uint32_t(offset >> 32));
}

/// Byte k (0..15) of a patch.
FAGEN_PHILOX_HD uint32_t dropout_byte(Philox4 r, int k) {
  const uint32_t w = k < 4 ? r.x : k < 8 ? r.y : k < 12 ? r.z : r.w;
  return (w >> (8 * (k & 3))) & 0xFFu;
}

/// Whether element (bh = b * heads_q + h, i, j) survives dropout.
FAGEN_PHILOX_HD bool dropout_keep(uint64_t seed, uint64_t offset, uint32_t threshold, uint32_t bh, int i,
                           int j) {
  const Philox4 r = dropout_patch(seed, offset, bh, i, j);
  return dropout_byte(r, ((i >> 3) & 1) * 8 + ((j >> 3) & 3) * 2 + (j & 1)) >= threshold;
}

/// The 8-bit threshold for drop probability p in [0, 1): min(255, round(p * 256)).
inline uint32_t dropout_threshold(float p) {
  const double t = double(p) * 256.0 + 0.5;
  return t >= 255.0 ? 255u : t <= 0 ? 0u : uint32_t(t);
}

/// The scale of kept values for a threshold: 1 / (1 - threshold / 256).
inline float dropout_rescale(uint32_t threshold) { return 256.0f / float(256u - threshold); }

} // namespace fagen

#undef FAGEN_PHILOX_HD

#endif // FAGEN_TEMPLATES_COMMON_PHILOX_H
