// The f32 kernels' accuracy tests measure against long double: the ulp distance and the two exact
// references the activation tests share (fast_math_test.cc, activation_fma_test.cc).
#pragma once

#include <algorithm>
#include <cmath>

namespace dt::test {

using LD = long double;

// Returns |y - exact| in ulps of the f32 result nearest to `exact` (2^-149 in the subnormal range).
// NaN must match NaN; an infinite result must be what `exact` rounds to. Mismatches count as 1e9.
inline double ulp_error(float y, LD exact) {
  if (std::isnan(exact) || std::isnan(y)) return std::isnan(exact) && std::isnan(y) ? 0 : 1e9;
  const float rounded = float(exact);
  if (std::isinf(rounded) || std::isinf(y)) return rounded == y ? 0 : 1e9;
  if (exact == 0) return y == 0 ? 0 : 1e9;
  const int e = std::max(std::ilogb(std::fabs(exact)), -126);
  return double(std::fabs(LD(y) - exact) / std::ldexp(LD(1), e - 23));
}

inline LD sigmoid_ref(LD x) { return 1 / (1 + std::exp(-x)); }
// tanh GELU's x * sigmoid(t) form: t = 2 sqrt(2 / pi) (x + 0.044715 x^3), the constant as the f32
// kernels round it.
inline LD gelu_tanh_arg(LD x) { return 2 * std::sqrt(2 / LD(M_PI)) * (x + LD(0.044715f) * x * x * x); }

// The derivatives of the two x·sigmoid(t) activations: sigmoid(t) + x·t'·sigmoid(t)·sigmoid(-t).
inline LD gelu_tanh_grad_ref(LD x) {
  const LD t = gelu_tanh_arg(x), tp = 2 * std::sqrt(2 / LD(M_PI)) * (1 + 3 * LD(0.044715f) * x * x);
  return sigmoid_ref(t) + x * tp * sigmoid_ref(t) * sigmoid_ref(-t);
}
inline LD silu_grad_ref(LD x) { return sigmoid_ref(x) * (1 + x * sigmoid_ref(-x)); }

}  // namespace dt::test
