// Elementwise unary kernels: out = f(x) for every element, in the compute type of x.
//
// The transcendental ones (exp, log, tanh, sigmoid, silu, gelu) use fast_math.h's branch-free f32
// kernels whenever the compute type is f32 (f32, bf16, f16), so their row loops vectorise; f64
// keeps libm, as the precise reference dtype.
#include <algorithm>
#include <cmath>

#include "dtensor/kernels/activation_fma.h"
#include "dtensor/kernels/elementwise.h"
#include "dtensor/kernels/fast_math.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/core/parallel.h"
#include "dtensor/kernels/simd_clones.h"
#include "dtensor/core/strided_loop.h"

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

// The activations a linear epilogue can fuse (apply_activation), written once for both paths.
struct Relu {
  // `v < 0 ? 0 : v` keeps NaN (torch.relu propagates NaN).
  template <typename C>
  [[gnu::always_inline]] C operator()(C v) const { return v < C(0) ? C(0) : v; }
};
struct Gelu {
  template <typename C>
  [[gnu::always_inline]] C operator()(C v) const {
    if constexpr (kF32<C>) return kernel::gelu_f32(v);
    else return C(0.5) * v * (C(1) + std::erf(v * C(M_SQRT1_2)));
  }
};
struct GeluTanh {
  template <typename C>
  [[gnu::always_inline]] C operator()(C v) const {
    const C k = C(M_2_SQRTPI * M_SQRT1_2);  // sqrt(2/pi)
    if constexpr (kF32<C>) return kernel::gelu_tanh_f32(v);
    else return C(0.5) * v * (C(1) + std::tanh(k * (v + C(0.044715) * v * v * v)));
  }
};
struct Silu {
  template <typename C>
  [[gnu::always_inline]] C operator()(C v) const {
    if constexpr (kF32<C>) return kernel::silu_f32(v); else return v / (1 + std::exp(-v));
  }
};

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

namespace {

// out = act(x) over n contiguous f32 values (x == out allowed), for each CPU's vector width
// (simd_clones.h): the transcendental activations are compute-bound (3.5 ns per gelu at SSE width,
// 8 % of the anchor gpt forward). ops_unary_test checks the ops against the scalar kernels.
DT_SIMD_CLONES void activation_loop(Activation act, const float* x, float* out, int64_t n) {
  switch (act) {
    case Activation::none: for (int64_t i = 0; i < n; ++i) out[i] = x[i]; return;
    case Activation::relu: for (int64_t i = 0; i < n; ++i) out[i] = Relu{}(x[i]); return;
    case Activation::gelu: for (int64_t i = 0; i < n; ++i) out[i] = Gelu{}(x[i]); return;
    case Activation::gelu_tanh: for (int64_t i = 0; i < n; ++i) out[i] = GeluTanh{}(x[i]); return;
    case Activation::silu: for (int64_t i = 0; i < n; ++i) out[i] = Silu{}(x[i]); return;
  }
}

// tanh and sigmoid as ops of their own (an export that no pattern fused) get the same per-CPU
// vector loops: through the generic unary loop they ran at 3.3 ns per element (baseline width).
DT_SIMD_CLONES void tanh_loop(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = kernel::tanh_f32(x[i]);
}
DT_SIMD_CLONES void sigmoid_loop(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = kernel::sigmoid_f32(x[i]);
}

// f(x) for an f32 x through `loop` (one of the vector loops above) when x is contiguous, else the
// generic unary loop with the scalar f: the same kernels, so the same values either way.
template <unsigned Allowed, typename Loop, typename F>
Tensor vector_unary(const char* op, const Tensor& x, Loop loop, F f) {
  if (x.dtype() == DType::f32 && x.is_contiguous()) {
    Tensor out = Tensor::uninitialized(x.shape(), x.dtype());
    const float* xp = static_cast<const float*>(x.raw_data());
    float* op_ = static_cast<float*>(out.raw_data());
    parallel_for(x.numel(), kElementwiseGrain, [&](int64_t i0, int64_t i1) { loop(xp + i0, op_ + i0, i1 - i0); });
    return out;
  }
  return unary<Allowed>(op, x, f);
}

// out = act(x) over n contiguous f32 values: activation_fma for the activations it serves on
// its path, else activation_loop.
void activation_rows(Activation act, const float* x, float* out, int64_t n) {
  if (uses_activation_fma(act)) activation_fma(act, x, out, n);
  else activation_loop(act, x, out, n);
}

// act(x) through activation_rows. An activation that activation_fma computes has no scalar
// kernel with its bits, so every x of an f32 compute type (a strided view, bf16, f16) goes through
// a contiguous f32 copy: the same bits as the contiguous f32 op, rounded once to x's dtype.
template <unsigned Allowed, typename F>
Tensor activation(const char* op, const Tensor& x, Activation act, F f) {
  const auto rows = [act](const float* in, float* out, int64_t n) { activation_rows(act, in, out, n); };
  const DType dt = x.dtype();
  if (uses_activation_fma(act) && (dt == DType::f32 || dt == DType::bf16 || dt == DType::f16) &&
      !(dt == DType::f32 && x.is_contiguous()))
    return vector_unary<Allowed>(op, x.to(DType::f32).contiguous(), rows, f).to(dt);
  return vector_unary<Allowed>(op, x, rows, f);
}

}  // namespace

Tensor relu(const Tensor& x) { return activation<kNumeric>("relu", x, Activation::relu, Relu{}); }

Tensor gelu(const Tensor& x, const std::string& approximate) {
  if (approximate == "none") return activation<kFloat>("gelu", x, Activation::gelu, Gelu{});
  if (approximate == "tanh") return activation<kFloat>("gelu", x, Activation::gelu_tanh, GeluTanh{});
  DT_THROW(ValueError) << "gelu approximate must be 'none' or 'tanh', got '" << approximate << "'";
}

Tensor silu(const Tensor& x) { return activation<kFloat>("silu", x, Activation::silu, Silu{}); }

// The epilogue of linear_act: the same loop as the relu/gelu/silu ops, in place.
void apply_activation(Activation act, float* p, int64_t n) { activation_rows(act, p, p, n); }

Tensor sigmoid(const Tensor& x) {
  return vector_unary<kFloat>("sigmoid", x, sigmoid_loop, [](auto v) {
    if constexpr (kF32<decltype(v)>) return kernel::sigmoid_f32(v); else return 1 / (1 + std::exp(-v));
  });
}

Tensor tanh(const Tensor& x) {
  return vector_unary<kFloat>("tanh", x, tanh_loop, [](auto v) {
    if constexpr (kF32<decltype(v)>) return kernel::tanh_f32(v); else return std::tanh(v);
  });
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return unary<kFloat>("leaky_relu", x, [negative_slope](auto v) {
    using C = decltype(v);
    return v < C(0) ? v * C(negative_slope) : v;  // NaN stays NaN (the comparison is false)
  });
}

// log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (torch's linear region, which
// avoids exp overflowing). log1p keeps small values exact.
Tensor softplus(const Tensor& x, double beta, double threshold) {
  if (beta == 0) DT_THROW(ValueError) << "softplus beta must be nonzero";
  return unary<kFloat>("softplus", x, [beta, threshold](auto v) {
    using C = decltype(v);
    const C bx = v * C(beta);
    return bx > C(threshold) ? v : C(std::log1p(std::exp(double(bx))) / beta);
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
