// Backward kernels and optimizer updates (ops_grad.h).
//
// Each kernel converts its operands to contiguous tensors of the compute dtype (f32, or f64 for
// f64 inputs), works on raw rows, and converts the results back to the operands' dtype: the
// conversions are no-ops for f32/f64 and give bf16/f16 an f32 computation rounded once.
#include "dtensor/kernels/ops_grad.h"

#include <algorithm>
#include <array>
#include <type_traits>
#include <cmath>
#include <vector>

#include "dtensor/kernels/activation_fma.h"
#include "dtensor/kernels/elementwise.h"
#include "dtensor/core/error.h"
#include "dtensor/kernels/fast_math_grad.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/core/parallel.h"
#include "dtensor/kernels/row_reduce.h"
#include "dtensor/kernels/simd_clones.h"
#include "dtensor/core/strided_loop.h"

namespace dt {
namespace {

DType compute_dtype(const char* op, DType d) {
  if (d == DType::f64) return DType::f64;
  if (d == DType::f32 || d == DType::bf16 || d == DType::f16) return DType::f32;
  DT_THROW(DTypeError) << op << " expects a floating dtype, got " << dtype_name(d);
}

// Calls f.template operator()<C>() with C = float or double, the compute type of `d`.
template <typename F>
void with_compute_type(const char* op, DType d, F&& f) {
  if (compute_dtype(op, d) == DType::f64) f(double{});
  else f(float{});
}

// A contiguous copy (or view) of x in the compute dtype of `like`.
Tensor compute_copy(const Tensor& x, DType like, const char* op) { return x.to(compute_dtype(op, like)).contiguous(); }

template <typename C>
const C* ptr(const Tensor& t) {
  return static_cast<const C*>(t.raw_data());
}
template <typename C>
C* mut(Tensor& t) {
  return static_cast<C*>(t.raw_data());
}

void require_same_shape(const char* op, const Tensor& grad, const Tensor& x) {
  if (grad.shape() != x.shape())
    DT_THROW(ShapeError) << op << ": grad " << shape_str(grad.shape()) << " does not match operand "
                         << shape_str(x.shape());
}

// out = grad · act'(x) over n contiguous f32 values, for each CPU's vector width
// (simd_clones.h): fast_math_grad.h's derivatives instead of a double libm erf/exp/tanh per
// element (tanh-gelu's backward was 13 % of the anchor gpt's training step).
DT_SIMD_CLONES void activation_grad_loop(Activation act, const float* g, const float* x, float* out, int64_t n) {
  switch (act) {
    case Activation::none: for (int64_t i = 0; i < n; ++i) out[i] = g[i]; return;
    case Activation::relu: for (int64_t i = 0; i < n; ++i) out[i] = g[i] * (x[i] > 0.0f ? 1.0f : 0.0f); return;
    case Activation::gelu: for (int64_t i = 0; i < n; ++i) out[i] = g[i] * kernel::gelu_grad_f32(x[i]); return;
    case Activation::gelu_tanh:
      for (int64_t i = 0; i < n; ++i) out[i] = g[i] * kernel::gelu_tanh_grad_f32(x[i]);
      return;
    case Activation::silu: for (int64_t i = 0; i < n; ++i) out[i] = g[i] * kernel::silu_grad_f32(x[i]); return;
  }
}

// grad · act'(x) elementwise: f32 compute (f32, bf16, f16) through activation_grad_loop, split
// over threads by element ranges; f64 with `d64`, act' in double libm (the precise reference dtype).
template <typename D>
Tensor activation_backward(const char* op, Activation act, const Tensor& grad, const Tensor& x, D d64) {
  require_same_shape(op, grad, x);
  Tensor out;
  with_compute_type(op, x.dtype(), [&](auto tag) {
    using C = decltype(tag);
    const Tensor g = compute_copy(grad, x.dtype(), op), xc = compute_copy(x, x.dtype(), op);
    out = Tensor::uninitialized(x.shape(), xc.dtype());
    const C* gp = ptr<C>(g);
    const C* xp = ptr<C>(xc);
    C* o = mut<C>(out);
    if constexpr (std::is_same_v<C, float>) {
      const bool fma = uses_activation_fma(act);
      parallel_for(x.numel(), kElementwiseGrain, [&](int64_t i0, int64_t i1) {
        if (fma) {
          // The fma path's derivative (activation_fma.h), as the fused gelu_and_grad keeps it.
          activation_grad_fma(act, xp + i0, o + i0, i1 - i0);
          for (int64_t i = i0; i < i1; ++i) o[i] = gp[i] * o[i];
        } else {
          activation_grad_loop(act, gp + i0, xp + i0, o + i0, i1 - i0);
        }
      });
    } else {
      for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = gp[i] * C(d64(xp[i]));
    }
  });
  return out.to(x.dtype());
}

}  // namespace

Tensor relu_backward(const Tensor& grad, const Tensor& x) {
  return activation_backward("relu_backward", Activation::relu, grad, x, [](double v) { return v > 0 ? 1.0 : 0.0; });
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x, const std::string& approximate) {
  if (approximate == "none")
    // d/dx x·Φ(x) = Φ(x) + x·φ(x)
    return activation_backward("gelu_backward", Activation::gelu, grad, x, [](double xv) {
      return 0.5 * (1 + std::erf(xv * M_SQRT1_2)) + xv * std::exp(-0.5 * xv * xv) * (0.5 * M_2_SQRTPI * M_SQRT1_2);
    });
  if (approximate == "tanh")
    // y = x/2 · (1 + tanh(u)), u = k(x + 0.044715 x³): y' = (1 + t)/2 + x/2 · (1 - t²) · k(1 + 3·0.044715 x²)
    return activation_backward("gelu_backward", Activation::gelu_tanh, grad, x, [](double xv) {
      const double k = M_2_SQRTPI * M_SQRT1_2;
      const double t = std::tanh(k * (xv + 0.044715 * xv * xv * xv));
      return 0.5 * (1 + t) + 0.5 * xv * (1 - t * t) * k * (1 + 3 * 0.044715 * xv * xv);
    });
  DT_THROW(ValueError) << "gelu_backward approximate must be 'none' or 'tanh', got '" << approximate << "'";
}

Tensor silu_backward(const Tensor& grad, const Tensor& x) {
  // d/dx x·σ(x) = σ(x)·(1 + x·(1 - σ(x)))
  return activation_backward("silu_backward", Activation::silu, grad, x, [](double v) {
    const double s = 1 / (1 + std::exp(-v));
    return s * (1 + v * (1 - s));
  });
}

namespace {

// One row of norm_backward's dx (see below) over n values: xhat and dxhat are scratch rows of n;
// writes dx to o and returns the row's mean and rstd, which the parameter gradients reuse.
// Inlined into each caller's loop.
template <typename C>
[[gnu::always_inline]] inline void norm_backward_row(const C* xv, const C* gv, const C* W, int64_t n, bool centered,
                                                     double eps, double* xhat, double* dxhat, C* o, double* mean,
                                                     double* rstd) {
  const double m = centered ? kernel::row_sum(n, [&](int64_t i) { return double(xv[i]); }) / double(n) : 0.0;
  const double var = kernel::row_sum(n, [&](int64_t i) {
                       const double d = double(xv[i]) - m;
                       return d * d;
                     }) /
                     double(n);
  const double rs = 1.0 / std::sqrt(var + eps);
  *mean = m;
  *rstd = rs;
  for (int64_t i = 0; i < n; ++i) xhat[i] = (double(xv[i]) - m) * rs;
  if (W)
    for (int64_t i = 0; i < n; ++i) dxhat[i] = double(gv[i]) * double(W[i]);
  else
    for (int64_t i = 0; i < n; ++i) dxhat[i] = double(gv[i]);
  const double mean_d = centered ? kernel::row_sum(n, [&](int64_t i) { return dxhat[i]; }) / double(n) : 0.0;
  const double mean_dx = kernel::row_sum(n, [&](int64_t i) { return dxhat[i] * xhat[i]; }) / double(n);
  for (int64_t i = 0; i < n; ++i) o[i] = C(rs * (dxhat[i] - mean_d - xhat[i] * mean_dx));
}

// norm_backward_row for f32, for each CPU's vector width (simd_clones.h): the same operations in
// the same order on more lanes, so every clone computes the same bits. The baseline's scalar
// double loops made the norm backwards about 0.6 % of the anchor gpt's training step.
DT_SIMD_CLONES void norm_backward_row_f32(const float* xv, const float* gv, const float* W, int64_t n, bool centered,
                                          double eps, double* xhat, double* dxhat, float* o, double* mean,
                                          double* rstd) {
  norm_backward_row<float>(xv, gv, W, n, centered, eps, xhat, dxhat, o, mean, rstd);
}

// Shared body of the norm backwards: per row of length n, xhat = (x - mean)·rstd (mean 0 for
// rms_norm), dxhat = grad·w; dx = rstd·(dxhat - mean(dxhat) - xhat·mean(dxhat·xhat)) (layer_norm)
// or rstd·(dxhat - xhat·mean(dxhat·xhat)) (rms_norm); dweight = Σ_rows grad·xhat, dbias = Σ_rows grad.
NormGrads norm_backward(const char* op, bool centered, const Tensor& grad, const Tensor& x,
                        const Shape& normalized_shape, const Tensor& weight, double eps, bool param_grads) {
  require_same_shape(op, grad, x);
  const int64_t n = numel(normalized_shape);
  if (normalized_shape.empty() || normalized_shape.size() > x.shape().size() ||
      !std::equal(normalized_shape.begin(), normalized_shape.end(), x.shape().end() - int64_t(normalized_shape.size())))
    DT_THROW(ShapeError) << op << ": normalized_shape " << shape_str(normalized_shape)
                         << " does not match the trailing dims of " << shape_str(x.shape());
  if (weight.defined() && weight.shape() != normalized_shape)
    DT_THROW(ShapeError) << op << ": weight " << shape_str(weight.shape()) << " does not match normalized_shape "
                         << shape_str(normalized_shape);
  NormGrads r;
  with_compute_type(op, x.dtype(), [&](auto tag) {
    using C = decltype(tag);
    const Tensor g = compute_copy(grad, x.dtype(), op), xc = compute_copy(x, x.dtype(), op);
    const Tensor w = weight.defined() ? compute_copy(weight, x.dtype(), op) : Tensor();
    Tensor dx = Tensor::uninitialized(x.shape(), xc.dtype());
    std::vector<double> dw(static_cast<size_t>(n), 0.0), db(static_cast<size_t>(n), 0.0);
    const int64_t rows = n == 0 ? 0 : x.numel() / n;
    std::vector<double> mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
    const C* X = ptr<C>(xc);
    const C* G = ptr<C>(g);
    const C* W = w.defined() ? ptr<C>(w) : nullptr;
    // dx: rows are independent, so they split over threads (row ranges of about
    // kElementwiseGrain elements).
    parallel_for(rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
      std::vector<double> xhat(static_cast<size_t>(n)), dxhat(static_cast<size_t>(n));
      for (int64_t r = r0; r < r1; ++r) {
        C* o = mut<C>(dx) + r * n;
        double* mr = &mean[size_t(r)];
        double* rr = &rstd[size_t(r)];
        if constexpr (std::is_same_v<C, float>)
          norm_backward_row_f32(X + r * n, G + r * n, W, n, centered, eps, xhat.data(), dxhat.data(), o, mr, rr);
        else
          norm_backward_row<C>(X + r * n, G + r * n, W, n, centered, eps, xhat.data(), dxhat.data(), o, mr, rr);
      }
    });
    r.dx = dx.to(x.dtype());
    if (!param_grads) return;
    // dweight and dbias: each column sums its rows in row order (so any split gives the same
    // bits); the columns split over threads.
    parallel_for(n, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(rows, 1)), [&](int64_t c0, int64_t c1) {
      for (int64_t r = 0; r < rows; ++r) {
        const C* xv = X + r * n;
        const C* gv = G + r * n;
        const double m = mean[size_t(r)], rs = rstd[size_t(r)];
        for (int64_t i = c0; i < c1; ++i) {
          dw[size_t(i)] += double(gv[i]) * ((double(xv[i]) - m) * rs);
          db[size_t(i)] += double(gv[i]);
        }
      }
    });
    r.dweight = Tensor::from_doubles(dw, normalized_shape, x.dtype());
    r.dbias = Tensor::from_doubles(db, normalized_shape, x.dtype());
  });
  return r;
}

}  // namespace

NormGrads layer_norm_backward(const Tensor& grad, const Tensor& x, const Shape& normalized_shape,
                              const Tensor& weight, double eps, bool param_grads) {
  return norm_backward("layer_norm_backward", true, grad, x, normalized_shape, weight, eps, param_grads);
}

NormGrads rms_norm_backward(const Tensor& grad, const Tensor& x, const Shape& normalized_shape,
                            const Tensor& weight, double eps, bool param_grads) {
  return norm_backward("rms_norm_backward", false, grad, x, normalized_shape, weight, eps, param_grads);
}

Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim) {
  require_same_shape("softmax_backward", grad, y);
  const Tensor gy = mul(grad, y);
  return mul(y, sub(grad, sum(gy, {dim}, /*keepdim=*/true)));
}

Tensor embedding_backward(const Tensor& grad, const Tensor& indices, int64_t num_weights) {
  const char* op = "embedding_backward";
  if (indices.dtype() != DType::i64 && indices.dtype() != DType::i32)
    DT_THROW(DTypeError) << op << ": indices must be i64 or i32, got " << dtype_name(indices.dtype());
  const int64_t H = grad.dim() == 0 ? 1 : grad.size(-1);
  if (grad.numel() != indices.numel() * H)
    DT_THROW(ShapeError) << op << ": grad " << shape_str(grad.shape()) << " does not match indices "
                         << shape_str(indices.shape());
  Tensor out;
  with_compute_type(op, grad.dtype(), [&](auto tag) {
    using C = decltype(tag);
    const Tensor g = compute_copy(grad, grad.dtype(), op);
    const Tensor idx = indices.to(DType::i64).contiguous();
    out = Tensor::zeros({num_weights, H}, g.dtype());
    C* o = mut<C>(out);
    const int64_t* ip = static_cast<const int64_t*>(idx.raw_data());
    for (int64_t r = 0, n = idx.numel(); r < n; ++r) {
      const int64_t row = ip[r];
      if (row < 0 || row >= num_weights)
        DT_THROW(ValueError) << op << ": index " << row << " out of range for " << num_weights << " rows";
      for (int64_t d = 0; d < H; ++d) o[row * H + d] += ptr<C>(g)[r * H + d];
    }
  });
  return out.to(grad.dtype());
}

Tensor mse_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target, int64_t count) {
  if (grad.numel() != 1) DT_THROW(ShapeError) << "mse_loss_backward: grad must be a scalar, got " << shape_str(grad.shape());
  const double n = double(std::max<int64_t>(count > 0 ? count : input.numel(), 1));
  return mul(sub(input, target), 2.0 * grad.item() / n);
}

namespace {

// row[j] = row[j] / sum · s over n f32 values, for each CPU's vector width (simd_clones.h).
DT_SIMD_CLONES void scale_probabilities_f32(float* row, float sum, float s, int64_t n) {
  for (int64_t j = 0; j < n; ++j) row[j] = row[j] / sum * s;
}

}  // namespace

Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target, int64_t count,
                              const Tensor& max, const Tensor& sum_exp, int64_t class_start) {
  if (grad.numel() != 1)
    DT_THROW(ShapeError) << "cross_entropy_backward: grad must be a scalar, got " << shape_str(grad.shape());
  if (logits.dim() != 2 || target.dim() != 1 || target.size(0) != logits.size(0))
    DT_THROW(ShapeError) << "cross_entropy_backward: logits " << shape_str(logits.shape()) << " and target "
                         << shape_str(target.shape()) << " are not [N, C] and [N]";
  const bool shard = max.defined();
  if (shard != sum_exp.defined())
    DT_THROW(ShapeError) << "cross_entropy_backward takes max and sum_exp together";
  const int64_t n = logits.size(0), c = logits.size(1);
  if (shard && (max.dim() != 1 || max.size(0) != n || sum_exp.dim() != 1 || sum_exp.size(0) != n))
    DT_THROW(ShapeError) << "cross_entropy_backward: row statistics " << shape_str(max.shape()) << " and "
                         << shape_str(sum_exp.shape()) << " for " << n << " rows";
  // (softmax(logits) - onehot(target)) · grad / N. f32/f64: row by row, each row's softmax (as
  // dt::softmax computes it) finished while it is in cache, with the same roundings as sub(p,
  // onehot) then mul by the scalar in p's dtype: one pass over [N, C] instead of three. On a class
  // shard the softmax takes the whole row's max and sum instead of this shard's, and the target's
  // column is target - class_start when it falls here.
  const Tensor t = target.to(DType::i64).contiguous();
  const int64_t* tp = static_cast<const int64_t*>(t.raw_data());
  for (int64_t r = 0; !shard && r < n; ++r)
    if (tp[r] < 0 || tp[r] >= c)
      DT_THROW(ValueError) << "cross_entropy_backward: target " << tp[r] << " out of range for " << c << " classes";
  const double scale = grad.item() / double(std::max<int64_t>(count > 0 ? count : n, 1));
  if (logits.dtype() != DType::f32 && logits.dtype() != DType::f64) {
    if (shard)  // bf16/f16 shards: in f32, rounded once
      return cross_entropy_backward(grad, logits.to(DType::f32), target, count, max, sum_exp, class_start)
          .to(logits.dtype());
    const Tensor onehot = eq(Tensor::arange(c).view({1, c}), t.reshape({n, 1})).to(logits.dtype());  // composed ops
    return mul(sub(softmax(logits, 1), onehot), scale);
  }
  const Tensor x = logits.contiguous();
  Tensor p = Tensor::uninitialized(x.shape(), x.dtype());
  with_compute_type("cross_entropy_backward", p.dtype(), [&](auto tag) {
    using C = decltype(tag);
    const C* xp = ptr<C>(x);
    C* pp = mut<C>(p);
    const C s = C(scale);
    const std::vector<C> mx = shard ? max.to(p.dtype()).to_vector<C>() : std::vector<C>();
    const std::vector<C> sx = shard ? sum_exp.to(p.dtype()).to_vector<C>() : std::vector<C>();
    parallel_for(n, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(c, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const C* v = xp + r * c;
        C* row = pp + r * c;
        // p_j · s off the target (p_j - 0 is exact), (p_t - 1) · s at it.
        const C own_sum = C(kernel::exp_row_sum(v, shard ? mx[size_t(r)] : kernel::row_max(v, c), row, c));
        const C sum = shard ? sx[size_t(r)] : own_sum;
        const int64_t k = tp[r] - class_start;
        const bool here = k >= 0 && k < c;
        const C pt = here ? row[k] / sum : C(0);
        if constexpr (std::is_same_v<C, float>) scale_probabilities_f32(row, sum, s, c);
        else for (int64_t j = 0; j < c; ++j) row[j] = row[j] / sum * s;
        if (here) row[k] = (pt - C(1)) * s;
      }
    });
  });
  return p;
}

namespace {

// Runs f(p, [g], ...) over the elements of the written tensors `io` (param and state, updated in
// place) and the read-only grad: every written tensor contiguous (else a contiguous copy is
// updated and copied back), grad read as contiguous. `f(i, rnd)` gets the element index and
// rnd(v) = v rounded to the storage type, so that the fused loop rounds every intermediate where
// the composed ops (add, mul, sub of whole tensors) would: bitwise the same for every dtype.
template <size_t N, typename F>
void update_in_place(const char* op, std::array<Tensor, N> io, const Tensor& grad, F&& f) {
  for (const Tensor& t : io) require_same_shape(op, grad, t);
  std::array<Tensor, N> dst;
  for (size_t k = 0; k < N; ++k) dst[k] = io[k].is_contiguous() ? io[k] : io[k].contiguous();
  const Tensor g = grad.contiguous();
  if (g.dtype() != io[0].dtype())
    DT_THROW(DTypeError) << op << ": grad " << dtype_name(g.dtype()) << " does not match param " << dtype_name(io[0].dtype());
  kernel::dispatch<kernel::kFloat>(io[0].dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    std::array<T*, N> w;
    for (size_t k = 0; k < N; ++k) w[k] = static_cast<T*>(dst[k].raw_data());
    const T* gp = static_cast<const T*>(g.raw_data());
    auto rnd = [](C v) { return kernel::load(kernel::store<T>(v)); };
    parallel_for(g.numel(), kElementwiseGrain, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) f(w, kernel::load(gp[i]), i, rnd, C{});
    });
  });
  for (size_t k = 0; k < N; ++k)
    if (dst[k].raw_data() != io[k].raw_data()) io[k].copy_(dst[k]);  // shares io[k]'s storage
}

}  // namespace

void sgd_update_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, double lr, double momentum,
                 double weight_decay) {
  auto step = [&](auto& w, auto g, int64_t i, auto rnd, auto zero) {
    using C = decltype(zero);
    using T = std::remove_pointer_t<std::decay_t<decltype(w[0])>>;
    const C p = kernel::load(w[0][i]);
    // g = grad + wd·p; buf = momentum·buf + g; p = p - lr·buf, each op rounded as its own tensor.
    if (weight_decay != 0) g = rnd(g + rnd(p * C(weight_decay)));
    if constexpr (std::tuple_size_v<std::decay_t<decltype(w)>> == 2) {
      g = rnd(rnd(kernel::load(w[1][i]) * C(momentum)) + g);
      w[1][i] = kernel::store<T>(g);
    }
    w[0][i] = kernel::store<T>(p - rnd(g * C(lr)));
  };
  if (momentum != 0) {
    require_same_shape("sgd_update", momentum_buffer, param);
    update_in_place<2>("sgd_update", {param, momentum_buffer}, grad, step);
  } else {
    update_in_place<1>("sgd_update", {param}, grad, step);
  }
}

void adamw_update_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                   double step, double lr, double beta1, double beta2, double eps, double weight_decay) {
  const double t = step + 1;
  const double bc1 = 1 - std::pow(beta1, t), bc2 = 1 - std::pow(beta2, t);
  const double decay = 1 - lr * weight_decay, inv_sqrt_bc2 = 1 / std::sqrt(bc2), lr_bc1 = lr / bc1;
  update_in_place<3>("adamw_update", {param, exp_avg, exp_avg_sq}, grad, [&](auto& w, auto g, int64_t i, auto rnd, auto zero) {
    using C = decltype(zero);
    using T = std::remove_pointer_t<std::decay_t<decltype(w[0])>>;
    // p = (1 - lr·wd)·p; m = b1·m + (1-b1)·g; v = b2·v + (1-b2)·g²;
    // p = p - lr/bc1 · m / (sqrt(v)/sqrt(bc2) + eps), each op rounded as its own tensor.
    C p = kernel::load(w[0][i]);
    if (weight_decay != 0) p = rnd(p * C(decay));
    const C m = rnd(rnd(kernel::load(w[1][i]) * C(beta1)) + rnd(g * C(1 - beta1)));
    const C v = rnd(rnd(kernel::load(w[2][i]) * C(beta2)) + rnd(rnd(g * g) * C(1 - beta2)));
    const C denom = rnd(rnd(rnd(std::sqrt(v)) * C(inv_sqrt_bc2)) + C(eps));
    w[1][i] = kernel::store<T>(m);
    w[2][i] = kernel::store<T>(v);
    w[0][i] = kernel::store<T>(p - rnd(rnd(m / denom) * C(lr_bc1)));
  });
}

}  // namespace dt
