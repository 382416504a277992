// The f32 exp polynomial, written once: exp_parts (exp(a + b) as two factors, used by every
// fast_math.h function that needs an exp) and fast_exp, the softmax rows' exp built on it.
//
// glibc's expf is a scalar call per element and dominated softmax time. exp_parts is branch-free
// (selects only), so loops over it vectorise; every step is plain f32 arithmetic in a fixed order,
// so results are reproducible.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace dt::kernel {

namespace exp_detail {

// Cephes' expf constants, shared by this scalar form and the vector lanes (exp_avx512_lanes.h,
// exp_avx2_lanes.h): 1/ln2, ln2 split into a 9-bit high part and a low part, and the polynomial's
// coefficients from the highest degree down (the last two, 1 and 1, are written where used).
inline constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
inline constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                      4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

// exp(a + b) = m * s. b is the low part of an argument that f32 cannot hold in one number (b = 0
// is the common case); n is chosen from a + b, so the reduced argument stays within ±ln2/2.
struct ScaledExp {
  float m;  // p * 2^n1: p = e^r in [0.7, 1.42], n1 in [-81, 64], so m is a normal number
  float s;  // 2^n2, n2 = n - n1 in [-81, 64]; +0 below kExpLo (exp_parts<true>)
};

// Returns x clamped to [lo, hi] (lo <= 0 <= hi; NaN unchanged), with the bounds written as
// copysign(|bound|, x): the same values wherever they are selected, but not constants to the
// compiler. A select with a constant arm (`a < lo ? lo : a`) is a branch in GCC's middle end, and
// its partial redundancy elimination then evaluates the code after the clamp once more with the
// constant folded in; once if-conversion has merged the paths, that copy runs for every element.
// At exp's clamp points the copy computes subnormal numbers (exp(-112) = m·s with s = 2^-81, times
// the caller's other factors), and every element paid the CPU's slow path for them: gelu' ran
// about 2.5x and tanh-gelu' 1.9x slower than now, and exact gelu's loop did not vectorise at all
// (12x). ops_grad_test.cc and ops_unary_test.cc assert that ordinary inputs compute no subnormal.
// An arm that depends on x cannot be folded, so there is no copy.
[[gnu::always_inline]] inline float clamp_unfolded(float x, float lo, float hi) {
  const float l = std::copysign(-lo, x), h = std::copysign(hi, x);
  return x < lo ? l : (x > hi ? h : x);
}

// Arguments are clamped to [kExpLo, kExpHi]: below -112 every caller's result underflows to 0
// (silu(x) = x·e^x is the last to, at x = -108.6); above ln(FLT_MAX) exp overflows.
inline constexpr float kExpLo = -112.0f;
inline constexpr float kExpHi = 88.7228317f;  // largest float x with exp(x) < FLT_MAX + ulp/2

// Returns exp(a + b) as m * s. This is the Cephes expf scheme (n = round((a + b) / ln 2), Cody-Waite
// reduction r = a - n·ln2_hi - n·ln2_lo + b, degree-7 polynomial), with n read from the bits of
// the rounded float (no float->int conversion, so NaN is defined behaviour, its garbage exponent is
// harmless because NaN propagates through p) and 2^n split in two factors so that n down to -162
// (subnormal and below) is representable.
//
// Worked example, a = -100, b = 0: n = round(-144.27) = -144, r = -100 + 144·ln2 = -0.1868,
// p = e^r = 0.8296, n1 = -72, n2 = -72, m = 0.8296·2^-72, s = 2^-72: m·s = 3.72e-44 (a subnormal
// with 5 significant bits, rounded once).
//
// kUnfolded picks clamp_unfolded for the argument, for callers that combine m and s with other
// values that vary; plain selects (two instructions) serve exp and softmax, whose code after the
// clamp depends on a alone, so any copy the compiler makes of it is folded to constants.
template <bool kUnfolded = true>
[[gnu::always_inline]] inline ScaledExp exp_parts(float a, float b) {
  // NaN passes through either clamp.
  const float ac = kUnfolded ? clamp_unfolded(a, kExpLo, kExpHi) : a < kExpLo ? kExpLo : (a > kExpHi ? kExpHi : a);
  // Round (a + b) / ln2 to nearest: adding 1.5·2^23 pushes the fraction bits out, and the low
  // mantissa bits of k then hold n in two's complement.
  const float magic = 12582912.0f;
  const float k = (ac + b) * kLog2e + magic;
  const float n = k - magic;
  const int32_t ni = int32_t(std::bit_cast<uint32_t>(k) - std::bit_cast<uint32_t>(magic));
  // ln2_hi = 0.693359375 has 9 significant bits, so n·ln2_hi is exact for |n| < 2^15 and
  // ac - n·ln2_hi is exact (Sterbenz): only the ln2_lo term and b are rounded.
  const float r = ((ac - n * kLn2Hi) - n * kLn2Lo) + b;
  float p = kExpPoly[0];
  for (int i = 1; i < 6; ++i) p = p * r + kExpPoly[i];
  p = p * (r * r) + r + 1.0f;
  const int32_t n1 = ni >> 1, n2 = ni - n1;  // floor(n/2): n = -161 -> -81, -80
  const float s1 = std::bit_cast<float>(uint32_t(n1 + 127) << 23);
  // kUnfolded: below kExpLo every caller's result is 0 (or selected away), so s = +0 there
  // instead of 2^-81 and the saturated tail multiplies by zero rather than computing subnormal
  // numbers (the slow path, see clamp_unfolded). An integer mask, not a select with a constant
  // arm, for the same reason. NaN gets s = 0 too, harmlessly: its p is NaN. (exp and softmax keep
  // the plain form: two instructions fewer per element, and exp's own tail underflows anyway.)
  const uint32_t keep = kUnfolded ? uint32_t(-int32_t(a >= kExpLo)) : ~0u;
  const float s2 = std::bit_cast<float>((uint32_t(n2 + 127) << 23) & keep);
  return {p * s1, s2};
}

}  // namespace exp_detail

// exp(x) for softmax rows: max error about 1 ulp over the normal range (checked in
// fast_exp_test.cc). Below -87.3365 (where the result would be subnormal) it returns 0, so
// exp(-inf) = 0 exactly as masked attention needs; above 88.7228 it returns +inf; NaN stays NaN.
// (fast_math.h's exp_f32 keeps subnormal results instead.) Bitwise the same as this function's
// earlier stand-alone copy of the polynomial, checked over all 2^32 inputs when it was merged.
[[gnu::always_inline]] inline float fast_exp(float x) {
  const float lo = -87.33654f, hi = 88.72283f;
  const exp_detail::ScaledExp e = exp_detail::exp_parts<false>(x, 0.0f);
  float y = e.m * e.s;
  y = x < lo ? 0.0f : y;
  y = x > hi ? std::numeric_limits<float>::infinity() : y;
  return y;
}

}  // namespace dt::kernel
