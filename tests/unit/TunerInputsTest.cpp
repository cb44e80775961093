//===- TunerInputsTest.cpp - `fagen tune`'s timing inputs ===//

#include "tuner/TunerInternal.h"

#include "gtest/gtest.h"
#include <cmath>

// The timing inputs: each tensor its own stream (a K equal to Q made S's diagonal stand far
// above the rest and slowed the conditionally rescaling candidates), the same on every call,
// about unit variance.
TEST(TunerInputs, TensorsAreIndependentAndRepeatable) {
  using fagen::tuner::TimingTensor;
  using fagen::tuner::timingInput;
  const auto bf16 = fagen::reference::ElementType::BF16;
  const size_t n = 4096;
  const std::vector<uint16_t> q = timingInput(n, bf16, 0, TimingTensor::Q);
  const std::vector<uint16_t> k = timingInput(n, bf16, 0, TimingTensor::K);
  EXPECT_EQ(q, timingInput(n, bf16, 0, TimingTensor::Q));
  EXPECT_NE(q, timingInput(n, bf16, 1, TimingTensor::Q));
  for (TimingTensor t : {TimingTensor::V, TimingTensor::O, TimingTensor::DOut})
    EXPECT_NE(k, timingInput(n, bf16, 0, t));
  // Q . K over 128-element rows is near 0 (independent, unit variance: sd about sqrt(128) = 11),
  // Q . Q near 128.
  double qk = 0, qq = 0, sum = 0, sq = 0;
  for (size_t i = 0; i < n; ++i) {
    const float a = fagen::reference::toFloat(q[i], bf16), b = fagen::reference::toFloat(k[i], bf16);
    if (i < 128) {
      qk += double(a) * b;
      qq += double(a) * a;
    }
    sum += a;
    sq += double(a) * a;
  }
  EXPECT_LT(std::fabs(qk), 50.0);
  EXPECT_GT(qq, 80.0);
  EXPECT_NEAR(sq / n, 1.0, 0.1);
  EXPECT_NEAR(sum / n, 0.0, 0.1);
}
