// Kernels indexed by position along one dim: gather and gather_elements (and their gradients),
// argmax/argmin, cumsum,
// triu/tril (ops.h). Each views its (contiguous) input as [outer, L, inner] around the dim, so one
// loop shape serves every rank and dim.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "dtensor/kernels/elementwise.h"
#include "dtensor/kernels/ops.h"

namespace dt {
namespace {

// x's shape split around dim d: the product of the dims before it, its size, the product after.
struct Around {
  int64_t outer = 1, len = 1, inner = 1;
};
Around around(const Shape& s, int64_t d) {
  Around a;
  for (int64_t i = 0; i < int64_t(s.size()); ++i) {
    if (i < d) a.outer *= s[size_t(i)];
    else if (i > d) a.inner *= s[size_t(i)];
  }
  a.len = s[size_t(d)];
  return a;
}

// The indices as i64 with negative ones counted from the end; throws ValueError on one outside
// [-len, len) before anything is written.
std::vector<int64_t> checked_indices(const char* op, const Tensor& indices, int64_t len) {
  if (indices.dtype() != DType::i64 && indices.dtype() != DType::i32)
    DT_THROW(DTypeError) << op << ": indices must be i64 or i32, got " << dtype_name(indices.dtype());
  const Tensor idx = indices.to(DType::i64).contiguous();
  const int64_t* p = static_cast<const int64_t*>(idx.raw_data());
  std::vector<int64_t> out(p, p + idx.numel());
  for (int64_t& i : out) {
    if (i < -len || i >= len)
      DT_THROW(ValueError) << op << ": index " << i << " is out of range for a dim of size " << len;
    if (i < 0) i += len;
  }
  return out;
}

Shape gathered_shape(const Shape& x, const Shape& idx, int64_t d) {
  Shape out(x.begin(), x.begin() + d);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), x.begin() + d + 1, x.end());
  return out;
}

template <typename T>
constexpr bool is_float_v = std::is_floating_point_v<compute_t<T>>;

// argmax (Greater) or argmin: the first (or last) index of the extremum; NaN beats every number.
template <bool Greater>
Tensor arg_extremum(const char* op, const Tensor& x, int64_t dim, bool keepdim, bool select_last) {
  if (x.dim() == 0) DT_THROW(ShapeError) << op << " needs a tensor of rank >= 1, got a scalar";
  const int64_t d = normalize_dim(dim, x.dim());
  const Around a = around(x.shape(), d);
  if (a.len == 0) DT_THROW(ShapeError) << op << ": dim " << d << " of " << shape_str(x.shape()) << " is empty";
  Shape s = x.shape();
  if (keepdim) s[size_t(d)] = 1;
  else s.erase(s.begin() + d);
  Tensor out = Tensor::uninitialized(s, DType::i64);
  int64_t* o = static_cast<int64_t*>(out.raw_data());
  const Tensor xc = x.contiguous();
  kernel::dispatch<kernel::kNumeric>(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = static_cast<const T*>(xc.raw_data());
    for (int64_t u = 0; u < a.outer; ++u)
      for (int64_t i = 0; i < a.inner; ++i) {
        const T* row = p + u * a.len * a.inner + i;
        auto best = kernel::load(row[0]);
        int64_t at = 0;
        for (int64_t l = 1; l < a.len; ++l) {
          const auto v = kernel::load(row[l * a.inner]);
          bool better = Greater ? v > best : v < best;
          bool tie = v == best;
          if constexpr (is_float_v<T>) {
            if (best != best) better = tie = false;  // a NaN already won
            else if (v != v) better = true;
          }
          if (better || (select_last && tie)) best = v, at = l;
        }
        o[u * a.inner + i] = at;
      }
  });
  return out;
}

Tensor triangle(const char* op, const Tensor& x, int64_t diagonal, bool upper) {
  if (x.dim() < 2) DT_THROW(ShapeError) << op << " needs a tensor of rank >= 2, got " << shape_str(x.shape());
  Tensor out = x.clone();
  const int64_t rows = x.size(-2), cols = x.size(-1), item = int64_t(itemsize(x.dtype()));
  const int64_t mats = rows * cols == 0 ? 0 : out.numel() / (rows * cols);
  char* p = static_cast<char*>(out.raw_data());
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t i = 0; i < rows; ++i) {
      // triu keeps j >= i + diagonal: zero [0, i + diagonal); tril keeps j <= i + diagonal.
      const int64_t lo = upper ? 0 : std::clamp<int64_t>(i + diagonal + 1, 0, cols);
      const int64_t hi = upper ? std::clamp<int64_t>(i + diagonal, 0, cols) : cols;
      if (hi > lo) std::memset(p + ((m * rows + i) * cols + lo) * item, 0, size_t((hi - lo) * item));
    }
  return out;
}

}  // namespace

Tensor gather(const Tensor& x, const Tensor& indices, int64_t dim) {
  if (x.dim() == 0) DT_THROW(ShapeError) << "gather needs a tensor of rank >= 1, got a scalar";
  const int64_t d = normalize_dim(dim, x.dim());
  const Around a = around(x.shape(), d);
  const std::vector<int64_t> idx = checked_indices("gather", indices, a.len);
  Tensor out = Tensor::uninitialized(gathered_shape(x.shape(), indices.shape(), d), x.dtype());
  const Tensor xc = x.contiguous();
  const size_t row = size_t(a.inner) * itemsize(x.dtype());  // bytes of one [inner] slice
  const char* src = static_cast<const char*>(xc.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  const int64_t n = int64_t(idx.size());
  for (int64_t u = 0; u < a.outer; ++u)
    for (int64_t k = 0; k < n; ++k)
      std::memcpy(dst + size_t(u * n + k) * row, src + size_t(u * a.len + idx[size_t(k)]) * row, row);
  return out;
}

Tensor gather_backward(const Tensor& grad, const Tensor& indices, int64_t dim, const Shape& shape) {
  if (shape.empty()) DT_THROW(ShapeError) << "gather_backward needs a shape of rank >= 1";
  const int64_t d = normalize_dim(dim, int64_t(shape.size()));
  const Around a = around(shape, d);
  const std::vector<int64_t> idx = checked_indices("gather_backward", indices, a.len);
  if (grad.shape() != gathered_shape(shape, indices.shape(), d))
    DT_THROW(ShapeError) << "gather_backward: grad " << shape_str(grad.shape()) << " is not the gather of "
                         << shape_str(shape) << " by indices " << shape_str(indices.shape()) << " on dim " << d;
  if (!is_floating(grad.dtype()))
    DT_THROW(DTypeError) << "gather_backward expects a floating grad, got " << dtype_name(grad.dtype());
  const Tensor g = grad.to(DType::f64).contiguous();
  std::vector<double> acc(size_t(numel(shape)), 0.0);
  const double* gp = static_cast<const double*>(g.raw_data());
  const int64_t n = int64_t(idx.size());
  for (int64_t u = 0; u < a.outer; ++u)
    for (int64_t k = 0; k < n; ++k) {
      double* o = acc.data() + (u * a.len + idx[size_t(k)]) * a.inner;
      const double* s = gp + (u * n + k) * a.inner;
      for (int64_t i = 0; i < a.inner; ++i) o[i] += s[i];
    }
  return Tensor::from_doubles(acc, shape, grad.dtype());
}

namespace {

// Calls f(flat index into indices, flat index into a tensor of `shape` it reads or writes) for
// every element of indices, after checking the shapes and the index range.
template <typename F>
void for_each_element_index(const char* op, const Shape& shape, const Tensor& indices, int64_t dim, F f) {
  const int64_t rank = int64_t(shape.size());
  if (rank == 0) DT_THROW(ShapeError) << op << " needs a tensor of rank >= 1, got a scalar";
  if (indices.dim() != rank)
    DT_THROW(ShapeError) << op << ": indices " << shape_str(indices.shape()) << " must have the rank of " << shape_str(shape);
  const int64_t d = normalize_dim(dim, rank);
  for (int64_t i = 0; i < rank; ++i)
    if (i != d && indices.size(i) > shape[size_t(i)])
      DT_THROW(ShapeError) << op << ": indices " << shape_str(indices.shape()) << " are larger than "
                           << shape_str(shape) << " in dim " << i;
  const std::vector<int64_t> idx = checked_indices(op, indices, shape[size_t(d)]);
  const Shape& is = indices.shape();
  std::vector<int64_t> coord(size_t(rank), 0);
  for (size_t e = 0; e < idx.size(); ++e) {
    int64_t flat = 0;
    for (int64_t i = 0; i < rank; ++i) flat = flat * shape[size_t(i)] + (i == d ? idx[e] : coord[size_t(i)]);
    f(int64_t(e), flat);
    for (int64_t i = rank - 1; i >= 0; --i) {  // next coordinate, row-major
      if (++coord[size_t(i)] < is[size_t(i)]) break;
      coord[size_t(i)] = 0;
    }
  }
}

}  // namespace

Tensor gather_elements(const Tensor& x, const Tensor& indices, int64_t dim) {
  Tensor out = Tensor::uninitialized(indices.shape(), x.dtype());
  const Tensor xc = x.contiguous();
  const size_t item = itemsize(x.dtype());
  const char* src = static_cast<const char*>(xc.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  for_each_element_index("gather_elements", x.shape(), indices, dim,
                         [&](int64_t e, int64_t from) { std::memcpy(dst + size_t(e) * item, src + size_t(from) * item, item); });
  return out;
}

Tensor gather_elements_backward(const Tensor& grad, const Tensor& indices, int64_t dim, const Shape& shape) {
  if (grad.shape() != indices.shape())
    DT_THROW(ShapeError) << "gather_elements_backward: grad " << shape_str(grad.shape()) << " must have the indices' shape "
                         << shape_str(indices.shape());
  if (!is_floating(grad.dtype()))
    DT_THROW(DTypeError) << "gather_elements_backward expects a floating grad, got " << dtype_name(grad.dtype());
  const Tensor g = grad.to(DType::f64).contiguous();
  const double* gp = static_cast<const double*>(g.raw_data());
  std::vector<double> acc(size_t(numel(shape)), 0.0);
  for_each_element_index("gather_elements_backward", shape, indices, dim,
                         [&](int64_t e, int64_t to) { acc[size_t(to)] += gp[e]; });
  return Tensor::from_doubles(acc, shape, grad.dtype());
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim, bool select_last_index) {
  return arg_extremum<true>("argmax", x, dim, keepdim, select_last_index);
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim, bool select_last_index) {
  return arg_extremum<false>("argmin", x, dim, keepdim, select_last_index);
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  if (x.dim() == 0) DT_THROW(ShapeError) << "topk needs a tensor of rank >= 1, got a scalar";
  const int64_t d = normalize_dim(dim, x.dim());
  const Around a = around(x.shape(), d);
  if (k < 0 || k > a.len)
    DT_THROW(ValueError) << "topk k " << k << " is out of range for a dim of size " << a.len;
  Shape shape = x.shape();
  shape[size_t(d)] = k;
  Tensor values = Tensor::uninitialized(shape, x.dtype()), indices = Tensor::uninitialized(shape, DType::i64);
  const Tensor xc = x.contiguous();
  int64_t* ip = indices.data<int64_t>();
  kernel::dispatch<kernel::kNumeric>(x.dtype(), "topk", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = static_cast<const T*>(xc.raw_data());
    T* o = static_cast<T*>(values.raw_data());
    std::vector<int64_t> order(size_t(a.len));
    std::vector<double> row(size_t(a.len));
    for (int64_t u = 0; u < a.outer; ++u)
      for (int64_t i = 0; i < a.inner; ++i) {
        for (int64_t l = 0; l < a.len; ++l) {
          row[size_t(l)] = double(kernel::load(p[(u * a.len + l) * a.inner + i]));
          order[size_t(l)] = l;
        }
        // NaN counts as the largest (torch); equal values keep the lower index first (ONNX TopK).
        auto before = [&](int64_t l, int64_t m) {
          const double x1 = row[size_t(l)], x2 = row[size_t(m)];
          if (std::isnan(x1) || std::isnan(x2)) return largest ? std::isnan(x1) && !std::isnan(x2) : std::isnan(x2) && !std::isnan(x1);
          return largest ? x1 > x2 : x1 < x2;
        };
        std::stable_sort(order.begin(), order.end(), before);
        for (int64_t j = 0; j < k; ++j) {
          const int64_t at = (u * k + j) * a.inner + i, l = order[size_t(j)];
          o[at] = p[(u * a.len + l) * a.inner + i];
          ip[at] = l;
        }
      }
  });
  return {values, indices};
}

Tensor cumsum(const Tensor& x, int64_t dim, bool exclusive, bool reverse) {
  if (x.dim() == 0) DT_THROW(ShapeError) << "cumsum needs a tensor of rank >= 1, got a scalar";
  const int64_t d = normalize_dim(dim, x.dim());
  const Around a = around(x.shape(), d);
  const Tensor xc = x.contiguous();
  Tensor out = Tensor::uninitialized(x.shape(), x.dtype());
  kernel::dispatch<kernel::kNumeric>(x.dtype(), "cumsum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Floating sums in double; integers in the unsigned type, so overflow wraps without UB.
    using Acc = std::conditional_t<is_float_v<T>, double, std::make_unsigned_t<std::conditional_t<is_float_v<T>, int, T>>>;
    const T* p = static_cast<const T*>(xc.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    std::vector<Acc> acc(size_t(a.inner));
    for (int64_t u = 0; u < a.outer; ++u) {
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t s = 0; s < a.len; ++s) {
        const int64_t l = reverse ? a.len - 1 - s : s;
        const int64_t base = (u * a.len + l) * a.inner;
        for (int64_t i = 0; i < a.inner; ++i) {
          const Acc v = Acc(kernel::load(p[base + i]));
          if (exclusive) {
            o[base + i] = kernel::store<T>(std::conditional_t<is_float_v<T>, double, T>(acc[size_t(i)]));
            acc[size_t(i)] += v;
          } else {
            acc[size_t(i)] += v;
            o[base + i] = kernel::store<T>(std::conditional_t<is_float_v<T>, double, T>(acc[size_t(i)]));
          }
        }
      }
    }
  });
  return out;
}

Tensor triu(const Tensor& x, int64_t diagonal) { return triangle("triu", x, diagonal, true); }
Tensor tril(const Tensor& x, int64_t diagonal) { return triangle("tril", x, diagonal, false); }

}  // namespace dt
