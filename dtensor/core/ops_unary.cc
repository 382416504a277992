// Elementwise unary kernels: out = f(x) for every element, in the compute type of x.
//
// The transcendental ones (exp, log, tanh, sigmoid, silu, gelu) use fast_math.h's branch-free f32
// kernels whenever the compute type is f32 (f32, bf16, f16), so their row loops vectorise; f64
// keeps libm, as the precise reference dtype.
#include <algorithm>
#include <cmath>

#include "dtensor/core/elementwise.h"
#include "dtensor/core/fast_math.h"
#include "dtensor/core/ops.h"

namespace dt {

namespace {

using kernel::kFloat;
using kernel::kNumeric;

// Returns a fresh contiguous tensor with f applied to every element of x (same dtype).
// `f` is a generic lambda called with the compute type (float for f32/bf16/f16).
template <unsigned Allowed, typename F>
Tensor unary(const char* op, const Tensor& x, F f) {
  Tensor out = Tensor::uninitialized(x.shape(), x.dtype());
  kernel::dispatch<Allowed>(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernel::unary_loop<T, T>(x, out, f);
  });
  return out;
}

// True for the f32 compute type (f32, bf16, f16), which the fast_math.h kernels serve.
template <typename C>
inline constexpr bool kF32 = std::is_same_v<C, float>;

}  // namespace

Tensor neg(const Tensor& x) {
  return unary<kNumeric>("neg", x, [](auto v) -> decltype(v) {
    using C = decltype(v);
    if constexpr (std::is_integral_v<C>)  // wraps like torch on the most negative value
      return C(std::make_unsigned_t<C>(0) - std::make_unsigned_t<C>(v));
    else
      return -v;
  });
}

Tensor exp(const Tensor& x) {
  return unary<kFloat>("exp", x, [](auto v) {
    if constexpr (kF32<decltype(v)>) return kernel::exp_f32(v); else return std::exp(v);
  });
}

Tensor log(const Tensor& x) {
  return unary<kFloat>("log", x, [](auto v) {
    if constexpr (kF32<decltype(v)>) return kernel::log_f32(v); else return std::log(v);
  });
}

Tensor sqrt(const Tensor& x) {
  return unary<kFloat>("sqrt", x, [](auto v) { return std::sqrt(v); });
}

Tensor rsqrt(const Tensor& x) {
  return unary<kFloat>("rsqrt", x, [](auto v) { return decltype(v)(1) / std::sqrt(v); });
}

Tensor relu(const Tensor& x) {
  // `v < 0 ? 0 : v` keeps NaN (torch.relu propagates NaN).
  return unary<kNumeric>("relu", x, [](auto v) { return v < decltype(v)(0) ? decltype(v)(0) : v; });
}

Tensor gelu(const Tensor& x, const std::string& approximate) {
  if (approximate == "none") {
    return unary<kFloat>("gelu", x, [](auto v) {
      using C = decltype(v);
      if constexpr (kF32<C>) return kernel::gelu_f32(v);
      else return C(0.5) * v * (C(1) + std::erf(v * C(M_SQRT1_2)));
    });
  }
  if (approximate == "tanh") {
    return unary<kFloat>("gelu", x, [](auto v) {
      using C = decltype(v);
      const C k = C(M_2_SQRTPI * M_SQRT1_2);  // sqrt(2/pi)
      if constexpr (kF32<C>) return kernel::gelu_tanh_f32(v);
      else return C(0.5) * v * (C(1) + std::tanh(k * (v + C(0.044715) * v * v * v)));
    });
  }
  DT_THROW(ValueError) << "gelu approximate must be 'none' or 'tanh', got '" << approximate << "'";
}

Tensor silu(const Tensor& x) {
  return unary<kFloat>("silu", x, [](auto v) {
    if constexpr (kF32<decltype(v)>) return kernel::silu_f32(v); else return v / (1 + std::exp(-v));
  });
}

Tensor sigmoid(const Tensor& x) {
  return unary<kFloat>("sigmoid", x, [](auto v) {
    if constexpr (kF32<decltype(v)>) return kernel::sigmoid_f32(v); else return 1 / (1 + std::exp(-v));
  });
}

Tensor tanh(const Tensor& x) {
  return unary<kFloat>("tanh", x, [](auto v) {
    if constexpr (kF32<decltype(v)>) return kernel::tanh_f32(v); else return std::tanh(v);
  });
}

Tensor pow(const Tensor& x, double exponent) {
  return unary<kFloat>("pow", x, [exponent](auto v) { return std::pow(v, decltype(v)(exponent)); });
}

// erf, sin and cos keep libm in every dtype: they feed RoPE tables and exact gelu decompositions,
// where the last ulp matters more than vector speed.
Tensor erf(const Tensor& x) {
  return unary<kFloat>("erf", x, [](auto v) { return std::erf(v); });
}

Tensor sin(const Tensor& x) {
  return unary<kFloat>("sin", x, [](auto v) { return std::sin(v); });
}

Tensor cos(const Tensor& x) {
  return unary<kFloat>("cos", x, [](auto v) { return std::cos(v); });
}

Tensor abs(const Tensor& x) {
  return unary<kNumeric>("abs", x, [](auto v) -> decltype(v) { return v < decltype(v)(0) ? decltype(v)(0) - v : v; });
}

Tensor clamp(const Tensor& x, double lo, double hi) {
  return unary<kNumeric>("clamp", x, [lo, hi](auto v) -> decltype(v) {
    using C = decltype(v);
    if constexpr (std::is_integral_v<C>) {  // integer bounds beyond the type saturate
      const double d = std::min(std::max(double(v), lo), hi);
      return C(d);
    } else {
      if (v != v) return v;  // NaN
      return std::min(std::max(v, C(lo)), C(hi));
    }
  });
}

Tensor cast(const Tensor& x, DType dtype) {
  // Always a fresh tensor, also when the dtype already matches, so callers may write to it.
  return dtype == x.dtype() ? x.clone() : x.to(dtype);
}

}  // namespace dt
