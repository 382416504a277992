// Elementwise binary kernels with numpy broadcasting, comparisons and where.
//
// Both operands must have the same dtype (ops.h: no implicit promotion). Integer add/sub/mul wrap
// on overflow like torch (computed in the unsigned type, so there is no signed-overflow UB).
#include <cmath>
#include <limits>

#include "dtensor/kernels/elementwise.h"
#include "dtensor/kernels/ops.h"

namespace dt {

namespace kernel {

Shape broadcast_for(const char* op, const Shape& a, const Shape& b) {
  try {
    return broadcast_shapes(a, b);
  } catch (const ShapeError& e) {
    DT_THROW(ShapeError) << op << ": " << e.what();
  }
}

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    DT_THROW(DTypeError) << op << ": dtype mismatch " << dtype_name(a.dtype()) << " vs "
                         << dtype_name(b.dtype()) << " (cast one operand first)";
}

}  // namespace kernel

namespace {

using kernel::kAll;
using kernel::kFloat;
using kernel::kNumeric;
using kernel::is_nan;

// Returns f(a, b) broadcast, in a's dtype (bool when ToBool). `f` is called with compute-type
// values (float for bf16/f16).
template <unsigned Allowed, bool ToBool = false, typename F>
Tensor binary(const char* op, const Tensor& a, const Tensor& b, F f) {
  kernel::check_same_dtype(op, a, b);
  Shape shape = kernel::broadcast_for(op, a.shape(), b.shape());
  Tensor ae = a.expand(shape), be = b.expand(shape);
  Tensor out = Tensor::uninitialized(shape, ToBool ? DType::boolean : a.dtype());
  kernel::dispatch<Allowed>(a.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Out = std::conditional_t<ToBool, bool, T>;
    kernel::binary_loop<T, T, Out>(ae, be, out, f);
  });
  return out;
}

// Integer arithmetic through the unsigned type: wraps instead of overflowing.
template <typename C, typename Op>
inline C wrap(C x, C y, Op op) {
  using U = std::make_unsigned_t<C>;
  return C(op(U(x), U(y)));
}

// Returns the scalar converted to the compute type of dtype, rejecting non-integral scalars for
// integer tensors (torch would promote to float; we do not promote).
template <typename C>
C scalar_as(const char* op, double s, DType dtype) {
  if constexpr (std::is_integral_v<C>) {
    if (std::trunc(s) != s)
      DT_THROW(DTypeError) << op << ": scalar " << s << " is not an integer for dtype "
                           << dtype_name(dtype) << " (cast the tensor first)";
  }
  return C(s);
}

// Returns f(x, s) for every element x of a, where s is the scalar b in a's compute type.
template <typename F>
Tensor with_scalar(const char* op, const Tensor& a, double b, F f) {
  Tensor out = Tensor::uninitialized(a.shape(), a.dtype());
  kernel::dispatch<kNumeric>(a.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const C s = scalar_as<C>(op, b, a.dtype());
    kernel::unary_loop<T, T>(a, out, [s, &f](C x) -> C { return f(x, s); });
  });
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return binary<kNumeric>("add", a, b, [](auto x, auto y) -> decltype(x) {
    if constexpr (std::is_integral_v<decltype(x)>)
      return wrap(x, y, [](auto u, auto v) { return u + v; });
    else
      return x + y;
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  return binary<kNumeric>("sub", a, b, [](auto x, auto y) -> decltype(x) {
    if constexpr (std::is_integral_v<decltype(x)>)
      return wrap(x, y, [](auto u, auto v) { return u - v; });
    else
      return x - y;
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  return binary<kNumeric>("mul", a, b, [](auto x, auto y) -> decltype(x) {
    if constexpr (std::is_integral_v<decltype(x)>)
      return wrap(x, y, [](auto u, auto v) { return decltype(u)(u * v); });
    else
      return x * y;
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  return binary<kFloat>("div", a, b, [](auto x, auto y) { return x / y; });
}

Tensor pow(const Tensor& a, const Tensor& b) {
  return binary<kFloat>("pow", a, b, [](auto x, auto y) { return std::pow(x, y); });
}

// maximum/minimum propagate NaN like torch.
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary<kNumeric>("maximum", a, b, [](auto x, auto y) {
    return is_nan(x) ? x : is_nan(y) ? y : (x < y ? y : x);
  });
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary<kNumeric>("minimum", a, b, [](auto x, auto y) {
    return is_nan(x) ? x : is_nan(y) ? y : (y < x ? y : x);
  });
}

Tensor add(const Tensor& a, double b) {
  return with_scalar("add", a, b, [](auto x, auto s) -> decltype(x) {
    if constexpr (std::is_integral_v<decltype(x)>)
      return wrap(x, s, [](auto u, auto v) { return u + v; });
    else
      return x + s;
  });
}

Tensor mul(const Tensor& a, double b) {
  return with_scalar("mul", a, b, [](auto x, auto s) -> decltype(x) {
    if constexpr (std::is_integral_v<decltype(x)>)
      return wrap(x, s, [](auto u, auto v) { return decltype(u)(u * v); });
    else
      return x * s;
  });
}

Tensor eq(const Tensor& a, const Tensor& b) {
  return binary<kAll, /*ToBool=*/true>("eq", a, b, [](auto x, auto y) { return x == y; });
}
Tensor ne(const Tensor& a, const Tensor& b) {
  return binary<kAll, /*ToBool=*/true>("ne", a, b, [](auto x, auto y) { return x != y; });
}
Tensor lt(const Tensor& a, const Tensor& b) {
  return binary<kAll, /*ToBool=*/true>("lt", a, b, [](auto x, auto y) { return x < y; });
}
Tensor le(const Tensor& a, const Tensor& b) {
  return binary<kAll, /*ToBool=*/true>("le", a, b, [](auto x, auto y) { return x <= y; });
}
Tensor gt(const Tensor& a, const Tensor& b) {
  return binary<kAll, /*ToBool=*/true>("gt", a, b, [](auto x, auto y) { return x > y; });
}
Tensor ge(const Tensor& a, const Tensor& b) {
  return binary<kAll, /*ToBool=*/true>("ge", a, b, [](auto x, auto y) { return x >= y; });
}

// Logical ops: bool operands only (ONNX And/Or/Xor; torch would also accept numbers as truth values).
Tensor logical_and(const Tensor& a, const Tensor& b) {
  return binary<kernel::kBool>("logical_and", a, b, [](bool x, bool y) { return x && y; });
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return binary<kernel::kBool>("logical_or", a, b, [](bool x, bool y) { return x || y; });
}
Tensor logical_xor(const Tensor& a, const Tensor& b) {
  return binary<kernel::kBool>("logical_xor", a, b, [](bool x, bool y) { return x != y; });
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  if (cond.dtype() != DType::boolean)
    DT_THROW(DTypeError) << "where: condition must be bool, got " << dtype_name(cond.dtype());
  kernel::check_same_dtype("where", a, b);
  Shape shape = kernel::broadcast_for("where", kernel::broadcast_for("where", cond.shape(), a.shape()), b.shape());
  Tensor ce = cond.expand(shape), ae = a.expand(shape), be = b.expand(shape);
  Tensor out = Tensor::uninitialized(shape, a.dtype());
  kernel::dispatch<kAll>(a.dtype(), "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
        kernel::ternary_loop<bool, T, T, T>(ce, ae, be, out, [](bool c, auto x, auto y) { return c ? x : y; });
  });
  return out;
}

}  // namespace dt
