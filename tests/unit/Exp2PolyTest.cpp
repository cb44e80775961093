//===- Exp2PolyTest.cpp - accuracy of the emulated exp2 ------------------------===//
//
// templates/common/exp2_poly.h compiled as host C++: the same float32 operations, fma included,
// in the same order as on the GPU. Reproduces FlashAttention-4's table (section 3.1.3) of the
// max relative error in fp32 by polynomial degree, within a factor of 2 either way (so the test
// fails for a fit that is too good to be the one described as well as for a bad one), and its
// bf16 claim for degree 3.
//
//===----------------------------------------------------------------------===//

#include "templates/common/exp2_poly.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

float exp2Poly(int Degree, float X) {
  switch (Degree) {
  case 1:
    return fagen::exp2_poly<1>(X);
  case 2:
    return fagen::exp2_poly<2>(X);
  case 3:
    return fagen::exp2_poly<3>(X);
  case 4:
    return fagen::exp2_poly<4>(X);
  default:
    return fagen::exp2_poly<5>(X);
  }
}

/// Max relative error against exp2 in double over 2^20 points spread over [-126, 127) (every
/// exponent, pseudo-random fractions) and 2^20 evenly spaced fractions in [0, 1).
double maxRelativeError(int Degree) {
  constexpr int N = 1 << 20;
  double Max = 0;
  for (int I = 0; I < N; ++I) {
    const float Spread = float(-126.0 + 253.0 * (I + 0.5) / N);
    const float Fraction = float(I) / N;
    for (float X : {Spread, Fraction}) {
      const double Ref = std::exp2(double(X));
      Max = std::max(Max, std::fabs(double(exp2Poly(Degree, X)) - Ref) / Ref);
    }
  }
  return Max;
}

uint16_t roundFloatToBfloat16(float F) {
  uint32_t U;
  std::memcpy(&U, &F, 4);
  U += 0x7fffu + ((U >> 16) & 1u);
  return uint16_t(U >> 16);
}

/// The bf16 nearest to a positive normal double (ties to even), with no float in between.
uint16_t roundDoubleToBfloat16(double D) {
  int Exp;
  const double Mantissa = std::frexp(D, &Exp);                     // [0.5, 1)
  const double Rounded = std::nearbyint(std::ldexp(Mantissa, 8)); // 8 significant bits
  return roundFloatToBfloat16(float(std::ldexp(Rounded, Exp - 8))); // exact in bf16
}

/// Share of 10^6 evenly spaced inputs in [-20, 0] (where P lives) on which the polynomial,
/// rounded to bf16, is within 1 bf16 ulp of the correctly rounded bf16 of 2^x.
double shareWithinOneBfloat16Ulp(int Degree) {
  constexpr int N = 1000000;
  int Within = 0;
  for (int I = 0; I < N; ++I) {
    const float X = float(-20.0 * I / (N - 1));
    const int Got = roundFloatToBfloat16(exp2Poly(Degree, X));
    const int Want = roundDoubleToBfloat16(std::exp2(double(X)));
    Within += std::abs(Got - Want) <= 1; // adjacent bit patterns: 1 ulp (positive values)
  }
  return double(Within) / N;
}

TEST(Exp2PolyTest, MaxRelativeErrorMatchesFlashAttention4) {
  const double Fa4[] = {3.9e-2, 2.1e-3, 8.8e-5, 3.0e-6, 8.5e-8};
  for (int Degree = 1; Degree <= 5; ++Degree) {
    SCOPED_TRACE("degree " + std::to_string(Degree));
    const double Err = maxRelativeError(Degree);
    EXPECT_LT(Err, 2 * Fa4[Degree - 1]);
    if (Degree <= 4)
      EXPECT_GT(Err, Fa4[Degree - 1] / 4);
    else // near float32 rounding (2^-24 = 6e-8) already
      EXPECT_LE(Err, 2e-7);
  }
}

TEST(Exp2PolyTest, ExactAtIntegers) {
  for (int J = -126; J < 128; ++J)
    EXPECT_EQ(fagen::exp2_poly<3>(float(J)), std::ldexp(1.0f, J)) << "x = " << J;
}

TEST(Exp2PolyTest, ClampsBelowMinus126) {
  // Documented: no zero, no denormal, no garbage exponent for tiny and -inf inputs.
  EXPECT_EQ(fagen::exp2_poly<3>(-1000.0f), std::ldexp(1.0f, -126));
  EXPECT_EQ(fagen::exp2_poly<3>(-INFINITY), std::ldexp(1.0f, -126));
}

TEST(Exp2PolyTest, NaNStaysNaN) {
  // A NaN logit must not pass for a masked one (docs/numerics.md).
  EXPECT_TRUE(std::isnan(fagen::exp2_poly<3>(std::nanf(""))));
  EXPECT_TRUE(std::isnan(fagen::exp2_poly<5>(-std::nanf(""))));
}

TEST(Exp2PolyTest, Degree3WithinOneBfloat16UlpOn99Percent) {
  EXPECT_GE(shareWithinOneBfloat16Ulp(3), 0.99);
  // The check discriminates: degree 1 (3.9e-2, ~10 bf16 ulps) falls well short of it.
  EXPECT_LT(shareWithinOneBfloat16Ulp(1), 0.99);
}

} // namespace
