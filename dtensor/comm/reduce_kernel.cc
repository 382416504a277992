#include "dtensor/comm/reduce_kernel.h"

#include <cmath>

namespace dt {

namespace {

// Elements per block: the f32 accumulator (16 KiB) stays in L1 while every input streams past it.
constexpr size_t kBlock = 4096;

template <typename T, ReduceOp Op>
void reduce_typed(const void* const* inputs, int n, void* out_raw, size_t count) {
  using C = compute_t<T>;
  T* out = static_cast<T*>(out_raw);
  alignas(64) C acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    size_t len = std::min(kBlock, count - base);
    const T* first = static_cast<const T*>(inputs[0]) + base;
    for (size_t i = 0; i < len; ++i) acc[i] = C(first[i]);
    for (int j = 1; j < n; ++j) {
      const T* __restrict in = static_cast<const T*>(inputs[j]) + base;
      if constexpr (Op == ReduceOp::sum || Op == ReduceOp::avg) {
        if constexpr (std::is_same_v<T, bool>) {
          for (size_t i = 0; i < len; ++i) acc[i] = acc[i] || in[i];
        } else {
          for (size_t i = 0; i < len; ++i) acc[i] += C(in[i]);
        }
      } else if constexpr (Op == ReduceOp::prod) {
        if constexpr (std::is_same_v<T, bool>) {
          for (size_t i = 0; i < len; ++i) acc[i] = acc[i] && in[i];
        } else {
          for (size_t i = 0; i < len; ++i) acc[i] *= C(in[i]);
        }
      } else if constexpr (Op == ReduceOp::max) {
        // NaN propagates: a NaN input wins and stays (x > NaN is false).
        for (size_t i = 0; i < len; ++i) {
          C x = C(in[i]);
          acc[i] = (x > acc[i] || x != x) ? x : acc[i];
        }
      } else {
        for (size_t i = 0; i < len; ++i) {
          C x = C(in[i]);
          acc[i] = (x < acc[i] || x != x) ? x : acc[i];
        }
      }
    }
    if constexpr (Op == ReduceOp::avg) {
      C divisor = C(n);
      for (size_t i = 0; i < len; ++i) acc[i] = acc[i] / divisor;
    }
    T* dst = out + base;
    for (size_t i = 0; i < len; ++i) dst[i] = T(acc[i]);
  }
}

template <typename T>
void reduce_op_dispatch(const void* const* inputs, int n, void* out, size_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return reduce_typed<T, ReduceOp::sum>(inputs, n, out, count);
    case ReduceOp::avg:
      if constexpr (std::is_same_v<T, bool>) {
        DT_THROW(DTypeError) << "reduce op avg does not support dtype bool";
      } else {
        return reduce_typed<T, ReduceOp::avg>(inputs, n, out, count);
      }
    case ReduceOp::max: return reduce_typed<T, ReduceOp::max>(inputs, n, out, count);
    case ReduceOp::min: return reduce_typed<T, ReduceOp::min>(inputs, n, out, count);
    case ReduceOp::prod: return reduce_typed<T, ReduceOp::prod>(inputs, n, out, count);
  }
}

}  // namespace

void reduce_buffers(const void* const* inputs, int n, void* out, size_t count, DType dtype, ReduceOp op) {
  DT_CHECK(n >= 1) << n;
  DT_DISPATCH(dtype, reduce_op_dispatch<T>(inputs, n, out, count, op));
}

double identity_of(ReduceOp op, DType dtype) {
  double v = 0;
  DT_DISPATCH(dtype, { v = double(identity_of<T>(op)); });
  return v;
}

}  // namespace dt
