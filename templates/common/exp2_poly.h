// fagen: 2^x on the FMA pipe, for the share of softmax exponentials that the forward templates
// move off the MUFU (ex2.approx) pipe (FlashAttention-4, section 3.1.3).
//
// Cody-Waite range reduction: 2^x = 2^j * 2^f with j = floor(x), f = x - j in [0, 1). 2^f comes
// from a polynomial by Horner's rule (FMAs), 2^j is added into the exponent bits (integer add).
// Plain C++ as well as CUDA, so that tests/unit/Exp2PolyTest.cpp measures on the CPU exactly
// the arithmetic the kernels do: the same float32 operations in the same order, fma included.
#ifndef FAGEN_TEMPLATES_COMMON_EXP2_POLY_H
#define FAGEN_TEMPLATES_COMMON_EXP2_POLY_H

#ifdef __CUDACC__
#define FAGEN_HD __host__ __device__
#else
#define FAGEN_HD
#endif

#ifndef __CUDA_ARCH__
#include <cmath>
#include <cstdint>
#include <cstring>
#endif

namespace fagen {

/// Coefficients c_1..c_n of p(f) = 1 + c_1 f + ... + c_n f^n ~ 2^f on [0, 1), minimax in
/// relative error with p(0) = 1 held fixed (2^j is then exact at integers). Fitted by
/// scripts/fit-exp2-poly: Remez exchange in 60-digit arithmetic (mpmath), each coefficient then
/// rounded to the nearest float32. Max relative error of the fit in exact arithmetic, then as
/// evaluated in float32 (tests/unit/Exp2PolyTest.cpp), against FlashAttention-4's table:
///   degree 1: 3.82e-2 | 2: 2.05e-3 | 3: 8.56e-5 | 4: 2.90e-6 | 5: 8.23e-8  (fit)
///   FA4:      3.9e-2  |    2.1e-3  |    8.8e-5  |    3.0e-6  |    8.5e-8
template <int kDegree> struct Exp2PolyCoeffs;
template <> struct Exp2PolyCoeffs<1> {
  static constexpr float kC[1] = {0.923556864f};
};
template <> struct Exp2PolyCoeffs<2> {
  static constexpr float kC[2] = {0.665960968f, 0.329932392f};
};
template <> struct Exp2PolyCoeffs<3> {
  static constexpr float kC[3] = {0.695116758f, 0.227644995f, 0.0770670399f};
};
template <> struct Exp2PolyCoeffs<4> {
  static constexpr float kC[4] = {0.693044841f, 0.241280198f, 0.0522424728f, 0.0134266838f};
};
template <> struct Exp2PolyCoeffs<5> {
  static constexpr float kC[5] = {0.693151295f, 0.240164444f, 0.0557999127f, 0.00901703071f,
                                  0.00186713005f};
};

namespace detail {

FAGEN_HD inline unsigned exp2_float_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}

FAGEN_HD inline float exp2_bits_float(unsigned u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float x;
  uint32_t v = u;
  std::memcpy(&x, &v, 4);
  return x;
#endif
}

FAGEN_HD inline float exp2_fma(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

/// c_kI + f * (c_kI+1 + f * (... + f * c_n)): Horner's rule from the top coefficient down.
template <int kDegree, int kI> FAGEN_HD inline float exp2_horner(float f) {
  constexpr float kCoeff = Exp2PolyCoeffs<kDegree>::kC[kI - 1];
  if constexpr (kI == kDegree)
    return kCoeff;
  else
    return exp2_fma(exp2_horner<kDegree, kI + 1>(f), f, kCoeff);
}

} // namespace detail

/// 2^x for x < 128 with relative error as tabled above; x <= -126 gives 2^-126, so 2^-inf is
/// NOT 0: a caller that needs 0 there tests for it (the forward templates' softmax detects rows
/// that saw no key by their max, not by their sum). NaN gives NaN, as exp2 does (clamped, a NaN
/// logit would pass for a masked one: docs/numerics.md). On the GPU: 1 FMNMX, 3 FADD and kDegree
/// FFMA, one shift and one integer add, and a compare and select for NaN; no MUFU.
template <int kDegree> FAGEN_HD inline float exp2_poly(float x) {
  static_assert(kDegree >= 1 && kDegree <= 5, "exp2_poly: kDegree must be in [1, 5]");
  // 1.5 * 2^23: adding it with round-down leaves floor(x) in the low mantissa bits (|x| < 2^22),
  // as two's complement on top of 0x4b400000.
  constexpr float kShift = 12582912.0f;
#ifdef __CUDA_ARCH__
  const float x_in = x;
  x = fmaxf(x, -126.0f);
  const float shifted = __fadd_rd(x, kShift);
#else
  const float x_in = x;
  x = std::fmax(x, -126.0f);
  const float shifted = std::floor(x) + kShift; // exact: the device's round-down add, bit for bit
#endif
  const float j = shifted - kShift; // floor(x), exact
  const float f = x - j;            // [0, 1), exact
  const float p = detail::exp2_fma(detail::exp2_horner<kDegree, 1>(f), f, 1.0f); // 2^f in [1, 2]
  // (bits(shifted) << 23) == j << 23 modulo 2^32: the low 9 bits of 0x4b400000 are zero.
  const float y = detail::exp2_bits_float(detail::exp2_float_bits(p) +
                                          (detail::exp2_float_bits(shifted) << 23));
  return x_in == x_in ? y : x_in; // fmax turned a NaN into -126 above
}

} // namespace fagen

#endif // FAGEN_TEMPLATES_COMMON_EXP2_POLY_H
