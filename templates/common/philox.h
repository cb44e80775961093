// fagen: Philox4x32-10 counter-based random numbers (Salmon et al., SC'11) and the dropout
// keep rule every template and the CPU reference share.
//
// Host and device: plain C++ with no CUDA headers; under nvcc the functions are
// __host__ __device__. The rule is part of the numerics contract (the backward regenerates the
// forward's mask from it, and `fagen check` reproduces it on the CPU): changing it changes
// every dropout result, so it is versioned with the params (FAGEN_FWD_PARAMS_VERSION).
//
// Element (b, h, i, j) of the attention matrix (i, j: query / key index within the sequence)
// belongs to the 2x2 patch {r, r + 8} x {c, c + 1} with r = (i & ~15) | (i & 7), c = j & ~1:
// exactly the four elements one thread holds in an m16n8 MMA accumulator (rows lane/4 and
// lane/4 + 8, columns 2 (lane % 4) and + 1), so one Philox call serves one thread's patch.
//   counter = {j >> 1, (i >> 4) * 8 + (i & 7), b * heads_q + h, uint32(offset)}
//   key     = {uint32(seed), uint32(seed >> 32) ^ uint32(offset >> 32)}
//   word    = ((i >> 3) & 1) * 2 + (j & 1)
//   kept   <=> output[word] >= threshold   (threshold = round(p * 2^32), saturated)
#ifndef FAGEN_TEMPLATES_COMMON_PHILOX_H
#define FAGEN_TEMPLATES_COMMON_PHILOX_H

#include <stdint.h>

#if defined(__CUDACC__)
#define FAGEN_HD __host__ __device__ __forceinline__
#else
#define FAGEN_HD inline
#endif

namespace fagen {

struct Philox4 {
  uint32_t x, y, z, w;
};

FAGEN_HD uint32_t philox_mulhi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return uint32_t((uint64_t(a) * b) >> 32);
#endif
}

/// Philox4x32 with 10 rounds.
FAGEN_HD Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
  const uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  const uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = philox_mulhi(kM0, c.x), lo0 = kM0 * c.x;
    const uint32_t hi1 = philox_mulhi(kM1, c.z), lo1 = kM1 * c.z;
    c = Philox4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

/// The four words of the patch that holds (i, j) (see the file comment).
FAGEN_HD Philox4 dropout_patch(uint64_t seed, uint64_t offset, uint32_t bh, int i, int j) {
  Philox4 c{uint32_t(j) >> 1, (uint32_t(i) >> 4) * 8u + (uint32_t(i) & 7u), bh, uint32_t(offset)};
  return philox4x32_10(c, uint32_t(seed), uint32_t(seed >> 32) ^ uint32_t(offset >> 32));
}

/// Whether element (bh = b * heads_q + h, i, j) survives dropout.
FAGEN_HD bool dropout_keep(uint64_t seed, uint64_t offset, uint32_t threshold, uint32_t bh, int i,
                           int j) {
  const Philox4 r = dropout_patch(seed, offset, bh, i, j);
  const int word = ((i >> 3) & 1) * 2 + (j & 1);
  const uint32_t v = word == 0 ? r.x : word == 1 ? r.y : word == 2 ? r.z : r.w;
  return v >= threshold;
}

/// round(p * 2^32) saturated to [0, 2^32 - 1] (p in [0, 1)).
inline uint32_t dropout_threshold(float p) {
  const double t = double(p) * 4294967296.0 + 0.5;
  return t >= 4294967295.0 ? 0xFFFFFFFFu : t <= 0 ? 0u : uint32_t(t);
}

} // namespace fagen

#undef FAGEN_HD

#endif // FAGEN_TEMPLATES_COMMON_PHILOX_H
