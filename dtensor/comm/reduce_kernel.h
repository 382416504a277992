// The elementwise reduction every all_reduce / reduce_scatter algorithm uses.
//
// Inputs are combined in index order, acc = in[0]; acc = op(acc, in[1]); ...; so a result depends
// only on the inputs and their order, never on which rank or algorithm computed it: one-shot and
// two-shot all_reduce and reduce_scatter give bitwise-identical results on every rank and run.
// bf16/f16 accumulate in f32 and round once on store; avg is the sum divided by n (integer
// division for integer dtypes; bool supports sum (logical or), max and min, not avg).
#pragma once

#include <cstddef>
#include <limits>
#include <type_traits>

#include "dtensor/comm/process_group.h"

namespace dt {

// Writes op(inputs[0][i], ..., inputs[n-1][i]) to out[i] for i < count. out may alias an input at
// the same positions (each block is read from every input before it is stored).
void reduce_buffers(const void* const* inputs, int n, void* out, size_t count, DType dtype, ReduceOp op);

// The identity of `op` over element type T: what a member that contributes nothing to a
// reduction holds (the padding of an S(d) -> P(op) move). 0 for sum and avg, 1 for prod, the lowest
// value for max and the highest for min: -inf/+inf for floating types, the integer limits otherwise (false
// and true for bool).
template <typename T>
T identity_of(ReduceOp op) {
  if (op == ReduceOp::sum || op == ReduceOp::avg) return T(0.0f);
  if (op == ReduceOp::prod) return T(1.0f);
  const bool lowest = op == ReduceOp::max;
  if constexpr (std::is_floating_point_v<T> || !std::numeric_limits<T>::is_specialized) {
    // float, double and the 16-bit floating types (built from a float).
    return T(lowest ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity());
  } else {
    return lowest ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  }
}

// identity_of<T> for a runtime dtype, as the double a `full` op or Tensor::full takes. Exact for
// floating dtypes, i32 and bool; an i64 limit does not fit a double (fill such tensors with
// identity_of<T>).
double identity_of(ReduceOp op, DType dtype);

}  // namespace dt
