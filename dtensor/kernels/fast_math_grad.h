// Branch-free f32 derivatives of the activations (gelu exact and tanh, silu), for the backward
// kernels: the same scheme as fast_math.h (straight-line f32 arithmetic and selects on the shared
// exp_parts, always_inline, so a loop over a row vectorises and every vector width computes the
// same bits), instead of a double libm erf/exp/tanh per element.
//
// Accuracy: each derivative crosses zero (gelu at x = -0.752, silu at x = -1.278), where any f32
// evaluation of the formula cancels (terms near 0.3 cancel to 0), so the bound is stated as
// 5 ulp of the result plus 4·2^-24 absolute (measured: at most 3.7·2^-24 near the crossings), and
// 5 ulp relative for |x| >= 3, down to where the result underflows. fast_math_test.cc asserts
// both against a long-double reference over the same whole-range sample as the forward kernels. Specials: NaN in, NaN out; +inf gives 1;
// -inf gives NaN (x · 0, as the forward kernels); results that underflow give ±0.
#pragma once

#include <cmath>

#include "dtensor/kernels/fast_math.h"

namespace dt::kernel {

// d/dx gelu(x) = Φ(x) + x·φ(x), Φ the normal CDF and φ its density. Both need exp(-x²/2), which
// is computed once (exact hi·hi/2 plus a correction, as gelu_f32). For x <= -√2/2 (u <= -1/2),
// Φ(x) = erfc(|u|)/2 = exp(-u²)·erfc_factor(|u|)/2, so the whole result is
// exp(-x²/2)·(erfc_factor/2 + x/√(2π)), scaled once at the end (no cancellation of 1 + erf, and
// subnormal results keep their bits). Beyond |x| = 15 the
// result is 1 (x > 0) or underflows (x·0).
[[gnu::always_inline]] inline float gelu_grad_f32(float x) {
  using namespace fast_math_detail;
  const float xc = clamp_unfolded(x, -15.0f, 10.0f);  // x > 10: Φ rounds to 1, x·φ(x) < 2^-70
  const float u = xc * 0.707106781186547524f;
  const float au = std::fabs(u);
  const float h = split_hi(xc);
  const ScaledExp e = exp_parts(-0.5f * (h * h), -0.5f * ((xc - h) * (xc + h)));  // exp(-x²/2)
  const float f = erfc_factor(au);
  const float k = 0.398942280401432678f;  // 1/√(2π)
  const float xphi = (xc * k) * e.m * e.s;
  const float small = (0.5f + 0.5f * (u * erf_over_u(u * u))) + xphi;  // Φ from erf's polynomial
  const float pos = (1.0f - 0.5f * (f * e.m * e.s)) + xphi;            // Φ = 1 - erfc(u)/2
  const float neg = ((0.5f * f + xc * k) * e.m) * e.s;
  const float y = xc > 0.0f ? (au < kErfSwitch ? small : pos) : (u > -0.5f ? small : neg);
  return x > 15.0f ? 1.0f : (x < -15.0f ? x * 0.0f : y);
}

// gelu(x) and its derivative together, bitwise equal to gelu_f32(x) and gelu_grad_f32(x): both
// take exp(-x²/2) from the same clamped xc, erfc's factor at |xc|/√2 (gelu_f32's |xc|·(1/√2) is
// the same float as |xc·(1/√2)|) and erf's polynomial, so computing them once saves about 40 % of
// the two calls (the training forward's gelu, whose derivative the backward reads). erf's
// polynomial is taken at xc/√2 where gelu_f32 takes x/√2: the two differ only outside
// [-15, 10], where neither selects that branch.
struct ValueAndGrad {
  float value, grad;
};
[[gnu::always_inline]] inline ValueAndGrad gelu_and_grad_f32(float x) {
  using namespace fast_math_detail;
  const float xc = clamp_unfolded(x, -15.0f, 10.0f);
  const float h = split_hi(xc);
  const ScaledExp e = exp_parts(-0.5f * (h * h), -0.5f * ((xc - h) * (xc + h)));  // exp(-x²/2)
  const float uc = xc * 0.707106781186547524f;
  const float auc = std::fabs(uc);
  const float f = erfc_factor(auc);
  const float fm = f * e.m;                      // erfc_parts(|uc|, ...).m
  const float erf_u = uc * erf_over_u(uc * uc);  // erf(u) for |u| < kErfSwitch
  // gelu_f32's selection on the unclamped x.
  const float u = x * 0.707106781186547524f;
  const float au = std::fabs(u);
  const float half_x = 0.5f * x;
  const float small_y = half_x + half_x * erf_u;
  const float pos_y = x * (1.0f - 0.5f * (fm * e.s));
  const float neg_y = (half_x * fm) * e.s;
  const float y = x > 0.0f ? (au < kErfSwitch ? small_y : pos_y) : (u > -0.5f ? small_y : neg_y);
  // gelu_grad_f32's.
  const float k = 0.398942280401432678f;  // 1/√(2π)
  const float xphi = (xc * k) * e.m * e.s;
  const float small = (0.5f + 0.5f * erf_u) + xphi;
  const float pos = (1.0f - 0.5f * (fm * e.s)) + xphi;
  const float neg = ((0.5f * f + xc * k) * e.m) * e.s;
  const float d = xc > 0.0f ? (auc < kErfSwitch ? small : pos) : (uc > -0.5f ? small : neg);
  return {x < -15.0f ? x * 0.0f : y, x > 15.0f ? 1.0f : (x < -15.0f ? x * 0.0f : d)};
}

// d/dx of gelu's tanh form y = x·σ(t), t = 2·√(2/π)·(x + 0.044715·x³) (gelu_tanh_f32):
// y' = σ(t) + x·t'·σ(t)·σ(-t), t' = 2·√(2/π)·(1 + 3·0.044715·x²). With e = exp(-|t|) and
// r = 1/(1 + e): t >= 0 gives r + x·t'·e·r²; t < 0 gives e·r·(1 + x·t'·r), scaled once at the end.
// The bound above holds for x >= -1; below, as in the forward, the rounding of t dominates (the
// result is tiny there): at most (4·|t| + 4) ulp. Beyond |x| = 20 the result is 1 or underflows
// (x·0).
[[gnu::always_inline]] inline float gelu_tanh_grad_f32(float x) {
  using namespace fast_math_detail;
  const float k2 = 1.59576912160573071f;  // 2·√(2/π)
  const float xc = clamp_unfolded(x, -20.0f, 9.0f);  // x > 9: e^-|t| < 2^-95, the result is 1
  const float x2 = xc * xc;
  const float t = (k2 * xc) * (1.0f + 0.044715f * x2);
  const float xtp = xc * (k2 * (1.0f + 0.134145f * x2));  // x·t'
  const ScaledExp e = exp_parts(-std::fabs(t), 0.0f);
  const float r = 1.0f / (1.0f + e.m * e.s);
  const float pos = r + xtp * (((e.m * r) * r) * e.s);
  const float neg = ((e.m * r) * (1.0f + xtp * r)) * e.s;
  const float y = t >= 0.0f ? pos : neg;  // NaN takes `neg`: NaN
  return x > 20.0f ? 1.0f : (x < -20.0f || t < kExpLo ? x * 0.0f : y);
}

// gelu_tanh_f32(x) and gelu_tanh_grad_f32(x) together, the same bits (NaN stays NaN): both take
// t, exp(-|t|) and r = 1/(1 + e^-|t|) from x alone where the derivative's clamp [-20, 9] leaves x
// unchanged (its exp_parts<true> and sigmoid's exp_parts<false> agree wherever the derivative
// keeps the value: t >= kExpLo). Above 9 the derivative is its value at 9 (then 1 above 20).
[[gnu::always_inline]] inline ValueAndGrad gelu_tanh_and_grad_f32(float x) {
  using namespace fast_math_detail;
  const float k2 = 1.59576912160573071f;  // 2·√(2/π)
  const float x2 = x * x;
  const float t = (k2 * x) * (1.0f + 0.044715f * x2);
  const ScaledExp e = exp_parts<false>(-std::fabs(t), 0.0f);
  const float d = 1.0f + e.m * e.s;
  const float r = 1.0f / d;
  const float y = x * (t >= 0.0f ? r : (e.m / d) * e.s);  // x · sigmoid_f32(t)
  const float xtp = x * (k2 * (1.0f + 0.134145f * x2));
  const float pos = r + xtp * (((e.m * r) * r) * e.s);
  const float neg = ((e.m * r) * (1.0f + xtp * r)) * e.s;
  const float g = t >= 0.0f ? pos : neg;
  const float at_clamp = gelu_tanh_grad_f32(9.0f);  // folded to a constant
  return {y, x > 20.0f ? 1.0f : (x > 9.0f ? at_clamp : (x < -20.0f || t < kExpLo ? x * 0.0f : g))};
}

// d/dx silu(x) = σ(x)·(1 + x·σ(-x)). With e = exp(-|x|) and d = 1 + e: x >= 0 gives
// (1 + x·e/d)/d; x < 0 gives (e/d)·(1 + x/d), scaled once at the end (divisions, not one
// reciprocal: the reciprocal form measured 5.15 ulp at x = -4.8). From x = 30 on the result
// rounds to 1; below kExpLo it underflows (x·0).
[[gnu::always_inline]] inline float silu_grad_f32(float x) {
  using namespace fast_math_detail;
  const ScaledExp e = exp_parts(-std::fabs(x), 0.0f);
  const float ev = e.m * e.s;
  const float d = 1.0f + ev;
  const float pos = (1.0f + x * (ev / d)) / d;
  const float neg = ((e.m / d) * (1.0f + x / d)) * e.s;
  const float y = x >= 0.0f ? pos : neg;  // NaN takes `neg`: NaN
  return x > 30.0f ? 1.0f : (x < kExpLo ? x * 0.0f : y);
}

}  // namespace dt::kernel
