// Branch-free f32 transcendental kernels that the compiler vectorises: exp, log, tanh, sigmoid,
// erf, and the activations built on them (silu, gelu exact and tanh).
//
// glibc's expf/tanhf/erff are scalar calls per element: a loop over them cannot vectorise and
// spends most of its time in call overhead and range branches. Every function here is straight-line
// f32 and int32 arithmetic plus selects (`c ? a : b`, which GCC if-converts under
// -fno-trapping-math), so a loop over a contiguous row becomes SIMD code. Each takes the same steps
// in the same order for every input, so results are reproducible and do not depend on the vector
// width or on where a row starts.
//
// Accuracy is stated per function as the max error in units in the last place (ulp) of the exact
// result rounded to f32, over the whole float range including subnormal inputs and results; the
// bounds are asserted in fast_math_test.cc against a long-double reference (a seeded sample of all
// 2^32 bit patterns plus exhaustive sweeps of the range switches and saturation points). Specials
// follow C99/PyTorch: NaN in, NaN out; exp(-inf) = 0, exp(+inf) = inf, log(0) = -inf,
// log(x < 0) = NaN, tanh(±inf) = ±1, sigmoid(-inf) = 0.
//
// Every function is always_inline: a call left in a row loop stops it from vectorising, and
// GCC's size heuristics otherwise decline to inline the larger ones (log, gelu) into some loops.
//
// The shared building block is exp_parts(a, b) = exp(a + b) returned as m·s with m normal: callers
// multiply their other factors into m before the final ·s, so a result in the subnormal range is
// rounded once (sigmoid(-100), silu(-105) and gelu(-13) keep their significant bits instead of
// being flushed), and b carries the low part of an argument that f32 cannot hold exactly (the
// -x²/2 of gelu: rounding x² alone would cost up to 2·x²·2^-24 relative, 80 ulp at x = -13).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "dtensor/kernels/fast_exp.h"

namespace dt::kernel {

namespace fast_math_detail {

// exp_parts (shared with fast_exp) lives in fast_exp.h.
using exp_detail::exp_parts;
using exp_detail::kExpHi;
using exp_detail::kExpLo;
using exp_detail::clamp_unfolded;
using exp_detail::ScaledExp;

// Returns erfc(u) / exp(-u²) = t · R(t) for u >= kErfSwitch: the factor erfc_parts multiplies
// into exp(-u²)'s m (gelu's derivative also needs exp(-u²) alone, so it calls both itself).
// t = 1 / (1 + u/2); R is a degree-9 Chebyshev fit of erfc(u)·exp(u²)/t over u in [0.5, 10.7]
// (fit error 1.5e-9 absolute on R in [0.32, 0.77], i.e. < 5e-9 relative; erfc(10.6) is below the
// f32 range, so callers clamp u to 10.6).
[[gnu::always_inline]] inline float erfc_factor(float u) {
  const float t = 1.0f / (1.0f + 0.5f * u);
  float r = -0.0284032464564f;
  r = r * t + 0.0589512181155f;
  r = r * t + 0.0765843275011f;
  r = r * t + -0.284884100745f;
  r = r * t + 0.159738881545f;
  r = r * t + 0.0157982981186f;
  r = r * t + 0.193626371914f;
  r = r * t + 0.244150641787f;
  r = r * t + 0.282326143972f;
  r = r * t + 0.282086287103f;
  return t * r;
}

// Returns erfc(u) for u >= kErfSwitch as scaled parts, given exp(-u²) = exp(a + b) (the caller
// splits -u² into an exact a and a small b): erfc(u) = exp(-u²) · erfc_factor(u).
[[gnu::always_inline]] inline ScaledExp erfc_parts(float u, float a, float b) {
  const ScaledExp e = exp_parts(a, b);
  return {erfc_factor(u) * e.m, e.s};
}

// Below this |u| erf uses its odd polynomial, above it 1 - erfc (which loses under 1.2 bits:
// erfc(0.875) = 0.216). gelu switches to erfc earlier on its negative side, at u = -0.5, where
// 1 + erf(u) starts to cancel.
inline constexpr float kErfSwitch = 0.875f;

// Returns erf(u) / u for |u| < kErfSwitch: a degree-6 Chebyshev fit in z = u² over [0, 0.766]
// (relative fit error 2.3e-10).
[[gnu::always_inline]] inline float erf_over_u(float z) {
  float s = 8.69036890739e-5f;
  s = s * z + -0.000821457088745f;
  s = s * z + 0.0052070489106f;
  s = s * z + -0.0268617058312f;
  s = s * z + 0.112837352102f;
  s = s * z + -0.376126362137f;
  s = s * z + 1.12837916689f;
  return s;
}

// Returns x with its low 12 mantissa bits cleared: hi * hi is exact (12 + 12 significant bits).
[[gnu::always_inline]] inline float split_hi(float x) {
  return std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0xfffff000u);
}

}  // namespace fast_math_detail

// exp(x), max error 1 ulp (normal and subnormal results); exp(x < -103.98) = 0, exp(x > 88.7228)
// = inf. Unlike fast_exp (softmax's, which flushes results below 2^-126 to 0) it keeps subnormal
// results, as torch.exp does.
[[gnu::always_inline]] inline float exp_f32(float x) {
  const fast_math_detail::ScaledExp e = fast_math_detail::exp_parts<false>(x, 0.0f);
  const float y = e.m * e.s;
  return x > fast_math_detail::kExpHi ? std::numeric_limits<float>::infinity() : y;
}

// log(x), max error 1 ulp. Cephes logf: x = 2^e · f with f in [sqrt(1/2), sqrt(2)), log(f) from
// a degree-8 polynomial in f - 1 (exact by Sterbenz), e·ln2 added in two parts. Subnormal inputs
// are scaled by 2^23 first. log(0) = -inf, log(x < 0) = NaN, log(inf) = inf.
[[gnu::always_inline]] inline float log_f32(float x) {
  const bool sub = x < 1.17549435e-38f;  // also true for 0 and negatives: fixed by the selects below
  const float xs = sub ? x * 8388608.0f : x;
  const uint32_t bits = std::bit_cast<uint32_t>(xs);
  // Exponent with the mantissa mapped to [0.5, 1): xs = 2^e · m.
  float e = float(int32_t((bits >> 23) & 0xffu) - 126) - (sub ? 23.0f : 0.0f);
  float m = std::bit_cast<float>((bits & 0x007fffffu) | 0x3f000000u);
  const bool low = m < 0.707106781186547524f;
  e = low ? e - 1.0f : e;
  const float f = (low ? m + m : m) - 1.0f;  // exact: m + m and the subtraction are Sterbenz cases
  const float z = f * f;
  float p = 7.0376836292e-2f;
  p = p * f + -1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f + -1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f + -1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f + -2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  float y = f * z * p;
  y = y + e * -2.12194440e-4f;
  y = y + -0.5f * z;
  y = (f + y) + e * 0.693359375f;
  y = x == std::numeric_limits<float>::infinity() ? x : y;
  y = x == 0.0f ? -std::numeric_limits<float>::infinity() : y;
  y = x < 0.0f ? std::numeric_limits<float>::quiet_NaN() : y;
  return x != x ? x : y;
}

// tanh(x), max error 2 ulp. |x| < 0.625: Cephes' odd polynomial x + x³·P(x²); above:
// 1 - 2e/(1 + e) with e = exp(-2|x|) <= 0.287 (the subtraction loses nothing: the result is
// >= 0.55), sign restored. Saturates to ±1 from |x| = 9.01 on.
[[gnu::always_inline]] inline float tanh_f32(float x) {
  const float ax = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z + -5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z + -3.33332819422e-1f;
  const float small = p * z * x + x;
  const fast_math_detail::ScaledExp e = fast_math_detail::exp_parts<false>(-2.0f * ax, 0.0f);
  const float ev = e.m * e.s;
  const float large = std::copysign(1.0f - 2.0f * ev / (1.0f + ev), x);
  return ax < 0.625f ? std::copysign(small, x) : large;  // copysign keeps tanh(-0) = -0; NaN takes `large`
}

// sigmoid(x) = 1 / (1 + e^-x), max error 2.5 ulp over the whole range. With e = exp(-|x|):
// x >= 0 gives 1 / (1 + e); x < 0 gives e / (1 + e), which keeps full relative precision down to
// the subnormal results (where 1 / (1 + e^-x) would overflow e^-x and return 0).
[[gnu::always_inline]] inline float sigmoid_f32(float x) {
  const fast_math_detail::ScaledExp e = fast_math_detail::exp_parts<false>(-std::fabs(x), 0.0f);
  const float d = 1.0f + e.m * e.s;
  return x >= 0.0f ? 1.0f / d : (e.m / d) * e.s;  // NaN takes the second branch: NaN
}

// silu(x) = x · sigmoid(x), max error 3 ulp. As torch, silu(-inf) is NaN (-inf · 0).
[[gnu::always_inline]] inline float silu_f32(float x) {
  const fast_math_detail::ScaledExp e = fast_math_detail::exp_parts<false>(-std::fabs(x), 0.0f);
  const float d = 1.0f + e.m * e.s;
  const float y = x >= 0.0f ? x / d : ((x * e.m) / d) * e.s;
  return x < fast_math_detail::kExpLo ? x * 0.0f : y;  // -0, or NaN for -inf
}

// erf(x), max error 2.5 ulp. |x| < 0.875: x · S(x²); above: ±(1 - erfc(|x|)) with erfc from
// erfc_parts (the subtraction loses little: erfc(0.875) = 0.216). Saturates to ±1 from
// |x| = 3.92 on.
[[gnu::always_inline]] inline float erf_f32(float x) {
  using namespace fast_math_detail;
  const float ax = std::fabs(x);
  const float small = x * erf_over_u(x * x);
  const float au = clamp_unfolded(ax, 0.0f, 10.0f);  // erf(10) is 1 - 2e-45: keeps inf out of erfc_parts
  const float h = split_hi(au);
  const ScaledExp c = erfc_parts(au, -(h * h), -((au - h) * (au + h)));
  const float large = std::copysign(1.0f - c.m * c.s, x);
  return ax < kErfSwitch ? small : large;
}

// gelu(x) = x/2 · (1 + erf(x/√2)) (torch's approximate='none'), max error 6 ulp over the whole
// range. For x < -0.5·√2, 1 + erf(x/√2) would cancel (at x = -5 it keeps 3 of 24 bits), so the
// negative tail uses x/2 · erfc(|x|/√2) with exp(-x²/2) from an exact hi·hi/2 plus a correction.
[[gnu::always_inline]] inline float gelu_f32(float x) {
  using namespace fast_math_detail;
  const float u = x * 0.707106781186547524f;
  const float au = std::fabs(u);
  // erfc(|u|) for the tail (x < 0) and erf(|u|) = 1 - erfc(|u|) for large positive x. Beyond
  // |x| = 15 erfc underflows: clamping keeps inf out (the result is x, or -0 below).
  const float xc = clamp_unfolded(x, -15.0f, 10.0f);  // x > 10: the result is x (erfc(7.07) < 2^-75)
  const float h = split_hi(xc);
  const float uc = std::fabs(xc) * 0.707106781186547524f;
  const ScaledExp c = erfc_parts(uc, -0.5f * (h * h), -0.5f * ((xc - h) * (xc + h)));
  const float half_x = 0.5f * x;
  const float small = half_x + half_x * (u * erf_over_u(u * u));
  const float pos = x * (1.0f - 0.5f * (c.m * c.s));  // x/2 · (2 - erfc(u)); inf stays inf
  const float neg = (half_x * c.m) * c.s;               // x/2 · erfc(|u|), scaled once at the end
  const float y = x > 0.0f ? (au < kErfSwitch ? small : pos) : (u > -0.5f ? small : neg);
  return x < -15.0f ? x * 0.0f : y;  // -0, or NaN for -inf as torch (-inf · 0)
}

// gelu with approximate='tanh': x/2 · (1 + tanh(√(2/π)·(x + 0.044715·x³))). Computed as
// x · sigmoid(2·√(2/π)·(x + 0.044715·x³)), the same function (1 + tanh(y) = 2·sigmoid(2y)) without
// the cancellation of 1 + tanh(y) for negative x. Max error 4 ulp for x >= -1; below, the f32
// rounding of the argument t (a few roundings of 2^-24 relative, times |t| in the result)
// dominates: at most 4·|t| + 4 ulp, a bound of 353 ulp at x = -10 where the result is 1e-37 (torch,
// computing 1 + tanh, returns 0 there). The function is that ill-conditioned: its relative
// condition number at x = -10 is about 230, so an input rounding alone moves it by 115 ulp.
[[gnu::always_inline]] inline float gelu_tanh_f32(float x) {
  const float k2 = 1.59576912160573071f;  // 2·√(2/π)
  const float t = (k2 * x) * (1.0f + 0.044715f * (x * x));
  return x * sigmoid_f32(t);
}

}  // namespace dt::kernel
