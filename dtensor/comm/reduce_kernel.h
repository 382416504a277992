// The elementwise reduction every all_reduce / reduce_scatter algorithm uses.
//
// Inputs are combined in index order, acc = in[0]; acc = op(acc, in[1]); ...; so a result depends
// only on the inputs and their order, never on which rank or algorithm computed it: one-shot and
// two-shot all_reduce and reduce_scatter give bitwise-identical results on every rank and run.
// bf16/f16 accumulate in f32 and round once on store; avg is the sum divided by n (integer
// division for integer dtypes; bool supports sum (logical or), max and min, not avg).
#pragma once

#include <cstddef>

#include "dtensor/comm/process_group.h"

namespace dt {

// Writes op(inputs[0][i], ..., inputs[n-1][i]) to out[i] for i < count. out may alias an input at
// the same positions (each block is read from every input before it is stored).
void reduce_buffers(const void* const* inputs, int n, void* out, size_t count, DType dtype, ReduceOp op);

}  // namespace dt
