// A branch-free f32 exp that the compiler can vectorise, for the softmax row loops.
//
// glibc's expf is a scalar call per element and dominated softmax time. This is the Cephes expf
// scheme: exp(x) = 2^n * e^r with n = round(x / ln 2) and |r| <= ln2 / 2 (Cody-Waite split of
// ln 2), e^r from a degree-7 polynomial; max error about 1 ulp over the normal range (checked in
// fast_exp_test.cc). Below -87.3365 (where the result would be subnormal) it returns 0, so
// exp(-inf) = 0 exactly as masked attention needs; above 88.7228 it returns +inf; NaN stays NaN.
// Every step is plain f32 arithmetic in a fixed order, so results are reproducible.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

namespace dt::kernel {

[[gnu::always_inline]] inline float fast_exp(float x) {
  const float lo = -87.33654f, hi = 88.72283f;
  const float xc = x < lo ? lo : (x > hi ? hi : x);  // NaN compares false: passes through
  // Round x / ln2 to nearest: adding 1.5 * 2^23 pushes the fraction bits out (|x / ln2| < 2^22).
  const float magic = 12582912.0f;
  const float n = (xc * 1.44269504088896341f + magic) - magic;
  const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // Scale by 2^n as 2^n1 * 2^n2 (n in [-126, 128] does not fit one exponent field at n = 128).
  const int32_t ni = int32_t(n), n1 = ni / 2, n2 = ni - n1;
  const int32_t b1 = (n1 + 127) << 23, b2 = (n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  float y = (p * s1) * s2;
  y = x < lo ? 0.0f : y;
  y = x > hi ? std::numeric_limits<float>::infinity() : y;
  return y;
}

}  // namespace dt::kernel
