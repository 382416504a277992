// Private helpers of the kernel files (ops_*.cc): dtype dispatch over a subset of dtypes and the
// elementwise loops built on strided_loop.
//
// Every loop writes a fresh contiguous output and reads inputs that were already expanded to the
// output shape (broadcast dims have stride 0). The innermost row takes a plain indexed loop when
// all operands are unit-stride, so that the compiler vectorises it; other rows use strided
// indexing. Values are loaded as compute_t<T> (f32 for bf16/f16) and rounded on store.
//
// The loops split large outputs over the rank's threads (parallel_strided_loop): every element is
// computed by the same code whichever thread and range it falls in, so results do not depend on
// the thread count.
#pragma once

#include <algorithm>
#include <array>
#include <type_traits>

#include "dtensor/core/bf16_rows.h"
#include "dtensor/core/strided_loop.h"
#include "dtensor/core/tensor.h"

namespace dt::kernel {

template <typename T>
struct TypeTag {
  using type = T;
};

// Dtype classes a kernel accepts (bit set).
inline constexpr unsigned kFloat = 1, kInt = 2, kBool = 4;
inline constexpr unsigned kNumeric = kFloat | kInt, kAll = kFloat | kInt | kBool;

// Calls f(TypeTag<T>{}) for the C++ type of `dtype` if its class is in Allowed; otherwise throws
// DTypeError "<op> does not support dtype <name>". Only allowed types are instantiated.
template <unsigned Allowed, typename F>
void dispatch(DType dtype, const char* op, F&& f) {
  auto reject = [&] { DT_THROW(DTypeError) << op << " does not support dtype " << dtype_name(dtype); };
  switch (dtype) {
#define DT_KERNEL_CASE(enumval, ctype, cls)             \
  case DType::enumval:                                  \
    if constexpr ((Allowed & (cls)) != 0) {             \
      f(TypeTag<ctype>{});                              \
    } else {                                            \
      reject();                                         \
    }                                                   \
    return;
    DT_KERNEL_CASE(f32, float, kFloat)
    DT_KERNEL_CASE(f64, double, kFloat)
    DT_KERNEL_CASE(bf16, ::dt::bf16, kFloat)
    DT_KERNEL_CASE(f16, ::dt::f16, kFloat)
    DT_KERNEL_CASE(i64, int64_t, kInt)
    DT_KERNEL_CASE(i32, int32_t, kInt)
    DT_KERNEL_CASE(boolean, bool, kBool)
#undef DT_KERNEL_CASE
  }
  DT_CHECK(false) << "bad dtype " << int(dtype);
}

// Loads a storage value as its compute type.
template <typename T>
inline compute_t<T> load(T v) {
  return static_cast<compute_t<T>>(v);
}
// Stores a compute value as type T (rounds to nearest even for bf16/f16).
template <typename T, typename C>
inline T store(C v) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}

// Loads n contiguous storage values as their compute type: the vectorised widening for bf16
// (bf16_rows.h), load() for the rest.
template <typename T>
inline void load_run(const T* src, compute_t<T>* dst, int64_t n) {
  if constexpr (std::is_same_v<T, bf16>)
    widen_bf16(src, dst, n);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] = load(src[i]);
}
// Stores n contiguous compute values as type T: the vectorised rounding for bf16, store() for the rest.
template <typename T>
inline void store_run(const compute_t<T>* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, bf16>)
    narrow_to_bf16(src, dst, n);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] = store<T>(src[i]);
}

// Values per block of a bf16 elementwise row: its operands are widened into f32 buffers of this
// size on the stack, f runs on them, and the results are rounded back in one pass. The element
// conversions of the baseline build run on 4 SSE2 lanes; the blocks take the AVX-512 ones where
// the CPU has them. The same conversions either way, so the same bits.
inline constexpr int64_t kBf16Block = 256;

// Computes out = f(x) elementwise. x has out's shape (already expanded).
//
// The row body is flattened (f and all it calls inlined): f can be a whole fast_math.h kernel,
// which GCC's size heuristics would otherwise leave as a call in the loop (tanh's and log's
// were), and a call stops the loop from vectorising.
template <typename In, typename Out, typename F>
void unary_loop(const Tensor& x, const Tensor& out, F f) {
  const In* xp = static_cast<const In*>(x.raw_data());
  Out* op = static_cast<Out*>(out.raw_data());
  std::array<const Strides*, 2> st{&out.strides(), &x.strides()};
  parallel_strided_loop<2>(out.shape(), st, [&](const std::array<int64_t, 2>& off, int64_t n,
                                       const std::array<int64_t, 2>& inner) __attribute__((flatten)) {
    Out* __restrict o = op + off[0];
    const In* __restrict a = xp + off[1];
    if (inner[0] == 1 && inner[1] == 1) {
      if constexpr (std::is_same_v<In, bf16> && std::is_same_v<Out, bf16>) {
        float ab[kBf16Block], ob[kBf16Block];
        for (int64_t i0 = 0; i0 < n; i0 += kBf16Block) {
          const int64_t len = std::min(kBf16Block, n - i0);
          widen_bf16(a + i0, ab, len);
          for (int64_t i = 0; i < len; ++i) ob[i] = f(ab[i]);
          narrow_to_bf16(ob, o + i0, len);
        }
      } else {
        for (int64_t i = 0; i < n; ++i) o[i] = store<Out>(f(load(a[i])));
      }
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * inner[0]] = store<Out>(f(load(a[i * inner[1]])));
    }
  });
}

// Computes out = f(a, b) elementwise. a and b have out's shape (already expanded).
template <typename A, typename B, typename Out, typename F>
void binary_loop(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  const A* ap = static_cast<const A*>(a.raw_data());
  const B* bp = static_cast<const B*>(b.raw_data());
  Out* op = static_cast<Out*>(out.raw_data());
  std::array<const Strides*, 3> st{&out.strides(), &a.strides(), &b.strides()};
  parallel_strided_loop<3>(out.shape(), st, [&](const std::array<int64_t, 3>& off, int64_t n,
                                       const std::array<int64_t, 3>& inner) {
    Out* __restrict o = op + off[0];
    const A* __restrict x = ap + off[1];
    const B* __restrict y = bp + off[2];
    if (inner[0] == 1 && inner[1] == 1 && inner[2] == 1) {
      if constexpr (std::is_same_v<A, bf16> && std::is_same_v<B, bf16> && std::is_same_v<Out, bf16>) {
        float xb[kBf16Block], yb[kBf16Block], ob[kBf16Block];
        for (int64_t i0 = 0; i0 < n; i0 += kBf16Block) {
          const int64_t len = std::min(kBf16Block, n - i0);
          widen_bf16(x + i0, xb, len);
          widen_bf16(y + i0, yb, len);
          for (int64_t i = 0; i < len; ++i) ob[i] = f(xb[i], yb[i]);
          narrow_to_bf16(ob, o + i0, len);
        }
      } else {
        for (int64_t i = 0; i < n; ++i) o[i] = store<Out>(f(load(x[i]), load(y[i])));
      }
    } else if (inner[0] == 1 && inner[1] == 1 && inner[2] == 0) {  // row against a broadcast scalar
      const auto yv = load(y[0]);
      for (int64_t i = 0; i < n; ++i) o[i] = store<Out>(f(load(x[i]), yv));
    } else if (inner[0] == 1 && inner[1] == 0 && inner[2] == 1) {
      const auto xv = load(x[0]);
      for (int64_t i = 0; i < n; ++i) o[i] = store<Out>(f(xv, load(y[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        o[i * inner[0]] = store<Out>(f(load(x[i * inner[1]]), load(y[i * inner[2]])));
    }
  });
}

// Computes out = f(c, a, b) elementwise. All operands have out's shape (already expanded).
template <typename C, typename A, typename B, typename Out, typename F>
void ternary_loop(const Tensor& c, const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  const C* cp = static_cast<const C*>(c.raw_data());
  const A* ap = static_cast<const A*>(a.raw_data());
  const B* bp = static_cast<const B*>(b.raw_data());
  Out* op = static_cast<Out*>(out.raw_data());
  std::array<const Strides*, 4> st{&out.strides(), &c.strides(), &a.strides(), &b.strides()};
  parallel_strided_loop<4>(out.shape(), st, [&](const std::array<int64_t, 4>& off, int64_t n,
                                       const std::array<int64_t, 4>& inner) {
    Out* __restrict o = op + off[0];
    const C* __restrict z = cp + off[1];
    const A* __restrict x = ap + off[2];
    const B* __restrict y = bp + off[3];
    if (inner[0] == 1 && inner[1] == 1 && inner[2] == 1 && inner[3] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = store<Out>(f(load(z[i]), load(x[i]), load(y[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        o[i * inner[0]] =
            store<Out>(f(load(z[i * inner[1]]), load(x[i * inner[2]]), load(y[i * inner[3]])));
    }
  });
}

// True for a NaN of a floating compute type; integers are never NaN.
template <typename C>
inline bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>)
    return v != v;
  else
    return false;
}

// Returns the broadcast of a and b; a ShapeError names the op and both shapes.
Shape broadcast_for(const char* op, const Shape& a, const Shape& b);
// Throws DTypeError unless a and b have the same dtype.
void check_same_dtype(const char* op, const Tensor& a, const Tensor& b);

}  // namespace dt::kernel
