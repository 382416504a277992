// Row-wise neural-network kernels: softmax, log_softmax, layer_norm, rms_norm, and embedding.
//
// Each works on contiguous rows: the dim (or normalised trailing dims) is moved last and made
// contiguous, every row is processed on its own in a fixed order, and the result is moved back.
// Row statistics (softmax's sum of exponentials, the norms' mean and variance) accumulate in
// double; the elementwise parts run in the compute type (f32 for bf16/f16) and round on store.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtensor/kernels/elementwise.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/core/parallel.h"
#include "dtensor/kernels/row_reduce.h"
#include "dtensor/kernels/simd_clones.h"

namespace dt {

namespace kernel {

namespace {
template <typename C>
[[gnu::always_inline]] inline double exp_row_sum_impl(const C* v, C mx, C* e, int64_t n) {
  for (int64_t i = 0; i < n; ++i) e[i] = softmax_exp(v[i] - mx);
  return row_sum(n, [&](int64_t i) { return double(e[i]); });
}
}  // namespace

DT_SIMD_CLONES double exp_row_sum(const float* v, float mx, float* e, int64_t n) {
  return exp_row_sum_impl(v, mx, e, n);
}
double exp_row_sum(const double* v, double mx, double* e, int64_t n) { return exp_row_sum_impl(v, mx, e, n); }

}  // namespace kernel

namespace {

using kernel::kFloat;

// Elements per range of a row loop on the rank's pool (whole rows; at least one).
constexpr int64_t kRowGrainElements = 16 * 1024;

// Applies row_fn(in, out, n) to each of the rows of length n of the contiguous tensor xt, writing
// the contiguous `out` (same shape and dtype T). Rows are loaded into compute-type buffers. Rows
// are split over the rank's threads (each row is computed whole by one thread, in the same order,
// so results do not depend on the thread count).
template <typename T, typename RowFn>
void for_each_row(const Tensor& xt, const Tensor& out, int64_t n, RowFn row_fn) {
  using C = compute_t<T>;
  const int64_t rows = n == 0 ? 0 : xt.numel() / n;
  const T* in = static_cast<const T*>(xt.raw_data());
  T* o = static_cast<T*>(out.raw_data());
  const int64_t grain = std::max<int64_t>(1, kRowGrainElements / std::max<int64_t>(n, 1));
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    if constexpr (std::is_same_v<T, C>) {  // f32/f64: work on the rows in place, no staging copies
      for (int64_t r = r0; r < r1; ++r) row_fn(in + r * n, o + r * n, n);
    } else {
      std::vector<C> src(static_cast<size_t>(n)), dst(static_cast<size_t>(n));
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = in + r * n;
        kernel::load_run(row, src.data(), n);
        row_fn(static_cast<const C*>(src.data()), dst.data(), n);
        kernel::store_run(static_cast<const C*>(dst.data()), o + r * n, n);
      }
    }
  });
}

// Applies row_fn (generic over the compute type) to every row along `dim` of x and returns the
// result with x's shape and dtype, contiguous.
template <typename RowFn>
Tensor map_rows(const char* op, const Tensor& x, int64_t dim, RowFn row_fn) {
  const int64_t rank = x.dim();
  const int64_t d = normalize_dim(dim, std::max<int64_t>(rank, 1));
  const bool last = rank == 0 || d == rank - 1;
  Tensor out;
  kernel::dispatch<kFloat>(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Tensor xt = last ? x.contiguous() : x.transpose(d, -1).contiguous();
    out = Tensor::uninitialized(xt.shape(), x.dtype());
    for_each_row<T>(xt, out, rank == 0 ? 1 : xt.shape().back(), row_fn);
  });
  return last ? out : out.transpose(d, -1).contiguous();
}

using kernel::row_max;
using kernel::row_sum;

// Checks that normalized_shape is the trailing part of x's shape and that an optional affine
// parameter has exactly that shape and x's dtype. Returns the row length.
int64_t check_norm_args(const char* op, const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                        const Tensor& bias) {
  const size_t k = normalized_shape.size();
  bool ok = k >= 1 && k <= x.shape().size();
  for (size_t i = 0; ok && i < k; ++i)
    if (x.shape()[x.shape().size() - k + i] != normalized_shape[i]) ok = false;
  if (!ok)
    DT_THROW(ShapeError) << op << ": normalized_shape " << shape_str(normalized_shape)
                         << " does not match the trailing dims of input shape " << shape_str(x.shape());
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    const char* name = p == &weight ? "weight" : "bias";
    if (p->shape() != normalized_shape)
      DT_THROW(ShapeError) << op << ": " << name << " of shape " << shape_str(p->shape())
                           << " does not match normalized_shape " << shape_str(normalized_shape);
    if (p->dtype() != x.dtype())
      DT_THROW(DTypeError) << op << ": " << name << " dtype " << dtype_name(p->dtype()) << " does not match input dtype "
                           << dtype_name(x.dtype());
  }
  return numel(normalized_shape);
}

// Returns the affine parameter as a contiguous compute-type vector (empty when undefined).
template <typename T>
std::vector<compute_t<T>> load_param(const Tensor& p) {
  if (!p.defined()) return {};
  Tensor c = p.contiguous();
  const T* d = static_cast<const T*>(c.raw_data());
  std::vector<compute_t<T>> v(size_t(c.numel()));
  kernel::load_run(d, v.data(), c.numel());
  return v;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  return map_rows("softmax", x, dim, [](const auto* v, auto* out, int64_t n) {
    using C = std::remove_const_t<std::remove_pointer_t<decltype(v)>>;
    const C mx = row_max(v, n);
    const C s = C(kernel::exp_row_sum(v, mx, out, n));
    for (int64_t i = 0; i < n; ++i) out[i] = out[i] / s;
  });
}

namespace {

// A row's max and log(Σ exp(v - max)) (the exps in the compute type, in scratch e, summed in
// double): what log_softmax subtracts from each element.
template <typename C>
std::pair<C, C> row_max_log_sum_exp(const C* v, C* e, int64_t n) {
  const C mx = row_max(v, n);
  return {mx, C(std::log(kernel::exp_row_sum(v, mx, e, n)))};
}

}  // namespace

Tensor log_softmax(const Tensor& x, int64_t dim) {
  return map_rows("log_softmax", x, dim, [](const auto* v, auto* out, int64_t n) {
    const auto [mx, lse] = row_max_log_sum_exp(v, out, n);  // out: scratch, overwritten below
    for (int64_t i = 0; i < n; ++i) out[i] = (v[i] - mx) - lse;
  });
}

Tensor log_softmax_at(const Tensor& x, const Tensor& index) {
  const char* op = "log_softmax_at";
  if (x.dim() != 2 || index.dim() != 1 || index.size(0) != x.size(0))
    DT_THROW(ShapeError) << op << ": x " << shape_str(x.shape()) << " and index " << shape_str(index.shape())
                         << " are not [N, C] and [N]";
  if (index.dtype() != DType::i64 && index.dtype() != DType::i32)
    DT_THROW(DTypeError) << op << ": index must be i64 or i32, got " << dtype_name(index.dtype());
  const int64_t rows = x.size(0), n = x.size(1);
  const Tensor idx = index.to(DType::i64).contiguous();
  const int64_t* ip = idx.data<int64_t>();
  for (int64_t r = 0; r < rows; ++r)
    if (ip[r] < 0 || ip[r] >= n) DT_THROW(ValueError) << op << ": index " << ip[r] << " out of range for " << n << " columns";
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::uninitialized({rows}, x.dtype());
  kernel::dispatch<kFloat>(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* in = static_cast<const T*>(xc.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    parallel_for(rows, std::max<int64_t>(1, kRowGrainElements / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
      std::vector<C> staged(std::is_same_v<T, C> ? 0 : size_t(n));  // bf16/f16 rows in the compute type
      std::vector<C> scratch(static_cast<size_t>(n));
      for (int64_t r = r0; r < r1; ++r) {
        const C* v;
        if constexpr (std::is_same_v<T, C>) {
          v = in + r * n;
        } else {
          for (int64_t i = 0; i < n; ++i) staged[size_t(i)] = kernel::load(in[r * n + i]);
          v = staged.data();
        }
        const auto [mx, lse] = row_max_log_sum_exp(v, scratch.data(), n);
        o[r] = kernel::store<T>((v[ip[r]] - mx) - lse);
      }
    });
  });
  return out;
}

namespace {

// The loss-parallel statistics' common frame (cross_entropy_max and the others below): f(row, C, i,
// stat, scratch) per row i of x [N, C] in its compute type (compute_t: bf16/f16 logits are widened
// once), with stat = row i's value of the [N] statistic `stat` (0 when undefined), rows in parallel
// (scratch: a per-thread buffer f may size), into an [N] result in x's dtype, which the
// partitioner's all_reduces then combine across ranks.
template <typename F>
Tensor per_logit_row(const char* op, const Tensor& x, const Tensor& stat, F f) {
  if (x.dim() != 2) DT_THROW(ShapeError) << op << ": logits must be [N, C], got " << shape_str(x.shape());
  const int64_t rows = x.size(0), n = x.size(1);
  if (stat.defined() && (stat.dim() != 1 || stat.size(0) != rows))
    DT_THROW(ShapeError) << op << ": row statistic " << shape_str(stat.shape()) << " does not match logits "
                         << shape_str(x.shape());
  Tensor out;
  kernel::dispatch<kFloat>(x.dtype(), op, [&](auto tag) {
    using C = compute_t<typename decltype(tag)::type>;
    const Tensor xc = x.to(dtype_of<C>()).contiguous();
    const Tensor sc = stat.defined() ? stat.to(dtype_of<C>()).contiguous() : Tensor();
    const C* in = static_cast<const C*>(xc.raw_data());
    const C* sp = sc.defined() ? static_cast<const C*>(sc.raw_data()) : nullptr;
    Tensor o = Tensor::uninitialized({rows}, dtype_of<C>());
    C* op_ = static_cast<C*>(o.raw_data());
    parallel_for(rows, std::max<int64_t>(1, kRowGrainElements / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
      std::vector<C> scratch;
      for (int64_t r = r0; r < r1; ++r) op_[r] = f(in + r * n, n, r, sp ? sp[r] : C(0), scratch);
    });
    out = o.to(x.dtype());
  });
  return out;
}

}  // namespace

Tensor cross_entropy_max(const Tensor& logits) {
  return per_logit_row("cross_entropy_max", logits, Tensor(),
                       [](const auto* v, int64_t n, int64_t, auto, auto&) { return row_max(v, n); });
}

Tensor cross_entropy_sum_exp(const Tensor& logits, const Tensor& max) {
  return per_logit_row("cross_entropy_sum_exp", logits, max, [](const auto* v, int64_t n, int64_t, auto mx, auto& scratch) {
    scratch.resize(size_t(n));
    return decltype(mx)(kernel::exp_row_sum(v, mx, scratch.data(), n));
  });
}

Tensor cross_entropy_target_logit(const Tensor& logits, const Tensor& target, int64_t class_start) {
  const char* op = "cross_entropy_target_logit";
  if (target.dim() != 1 || logits.dim() != 2 || target.size(0) != logits.size(0))
    DT_THROW(ShapeError) << op << ": target " << shape_str(target.shape()) << " does not match logits "
                         << shape_str(logits.shape());
  if (target.dtype() != DType::i64 && target.dtype() != DType::i32)
    DT_THROW(DTypeError) << op << ": target must be i64 or i32, got " << dtype_name(target.dtype());
  const Tensor t = target.to(DType::i64).contiguous();
  const int64_t* tp = t.data<int64_t>();
  return per_logit_row(op, logits, Tensor(), [&](const auto* v, int64_t n, int64_t r, auto, auto&) {
    const int64_t k = tp[r] - class_start;
    return k >= 0 && k < n ? v[k] : std::remove_cvref_t<decltype(v[0])>(0);
  });
}

namespace {

// One row of layer_norm over len values, weight w and bias b optional (null). Inlined into each
// caller's loop.
template <typename C>
[[gnu::always_inline]] inline void layer_norm_row(const C* v, C* o, int64_t len, const C* w, const C* b, double eps) {
  const double mean = row_sum(len, [&](int64_t i) { return double(v[i]); }) / double(len);
  // Biased variance (divides by n, as torch), two-pass for accuracy.
  const double var = row_sum(len, [&](int64_t i) {
                       const double d = double(v[i]) - mean;
                       return d * d;
                     }) /
                     double(len);
  const C m = C(mean), rstd = C(1.0 / std::sqrt(var + eps));
  for (int64_t i = 0; i < len; ++i) {
    C y = (v[i] - m) * rstd;
    if (w) y = y * w[i];
    if (b) y = y + b[i];
    o[i] = y;
  }
}

// layer_norm_row for f32, for each CPU's vector width (simd_clones.h): the same operations in the
// same order on more lanes, so every clone computes the same bits.
DT_SIMD_CLONES void layer_norm_row_f32(const float* v, float* o, int64_t len, const float* w, const float* b,
                                       double eps) {
  layer_norm_row<float>(v, o, len, w, b, eps);
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const int64_t n = check_norm_args("layer_norm", x, normalized_shape, weight, bias);
  // The flattened trailing dims of contiguous x form one row each.
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::uninitialized(x.shape(), x.dtype());
  kernel::dispatch<kFloat>(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const std::vector<C> w = load_param<T>(weight), b = load_param<T>(bias);
    const C* wp = w.empty() ? nullptr : w.data();
    const C* bp = b.empty() ? nullptr : b.data();
    for_each_row<T>(xc, out, n, [&](const C* v, C* o, int64_t len) {
      if constexpr (std::is_same_v<C, float>) layer_norm_row_f32(v, o, len, wp, bp, eps);
      else layer_norm_row<C>(v, o, len, wp, bp, eps);
    });
  });
  return out;
}

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, double eps) {
  const int64_t n = check_norm_args("rms_norm", x, normalized_shape, weight, Tensor());
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::uninitialized(x.shape(), x.dtype());
  kernel::dispatch<kFloat>(x.dtype(), "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const std::vector<C> w = load_param<T>(weight);
    for_each_row<T>(xc, out, n, [&](const C* v, C* o, int64_t len) {
      const double ms = row_sum(len, [&](int64_t i) { return double(v[i]) * double(v[i]); }) / double(len);
      const C r = C(1.0 / std::sqrt(ms + eps));
      for (int64_t i = 0; i < len; ++i) o[i] = w.empty() ? v[i] * r : (v[i] * r) * w[size_t(i)];
    });
  });
  return out;
}

namespace {

// Looks up rows of `weight` for `indices` shifted by -vocab_start; out-of-range indices are an
// error (masked false) or a row of zeros (masked true).
Tensor lookup_rows(const char* op, const Tensor& indices, const Tensor& weight, int64_t vocab_start, bool masked) {
  if (indices.dtype() != DType::i64 && indices.dtype() != DType::i32)
    DT_THROW(DTypeError) << op << " does not support index dtype " << dtype_name(indices.dtype())
                         << " (expected i64 or i32)";
  if (weight.dim() != 2)
    DT_THROW(ShapeError) << op << ": weight must be 2-d [num_embeddings, dim], got shape "
                         << shape_str(weight.shape());
  const int64_t V = weight.shape()[0], H = weight.shape()[1];
  Shape out_shape = indices.shape();
  out_shape.push_back(H);
  Tensor out = Tensor::uninitialized(out_shape, weight.dtype());
  const Tensor idx = indices.to(DType::i64).contiguous();
  const int64_t* ip = idx.data<int64_t>();
  if (!masked)
    for (int64_t i = 0; i < idx.numel(); ++i)
      if (ip[i] < 0 || ip[i] >= V)
        DT_THROW(ValueError) << op << " index " << ip[i] << " out of range for weight with " << V << " rows";
  // Rows are read in place, also from a strided weight (e.g. a column shard of the table).
  const int64_t rs = weight.strides()[0], cs = weight.strides()[1];
  DT_DISPATCH(weight.dtype(), {
    const T* wp = static_cast<const T*>(weight.raw_data());
    T* op_ = static_cast<T*>(out.raw_data());
    for (int64_t i = 0; i < idx.numel(); ++i) {
      const int64_t r = ip[i] - vocab_start;
      T* dst = op_ + i * H;
      if (r < 0 || r >= V) {
        std::fill(dst, dst + H, T(0));
        continue;
      }
      const T* row = wp + r * rs;
      if (cs == 1)
        std::memcpy(static_cast<void*>(dst), static_cast<const void*>(row), size_t(H) * sizeof(T));
      else
        for (int64_t h = 0; h < H; ++h) dst[h] = row[h * cs];
    }
  });
  return out;
}

}  // namespace

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  return lookup_rows("embedding", indices, weight, /*vocab_start=*/0, /*masked=*/false);
}

Tensor masked_embedding(const Tensor& indices, const Tensor& weight, int64_t vocab_start) {
  return lookup_rows("masked_embedding", indices, weight, vocab_start, /*masked=*/true);
}

}  // namespace dt
