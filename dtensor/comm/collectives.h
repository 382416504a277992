// Tensor-level collectives on top of the byte-level ProcessGroup (PyTorch's c10d signatures).
//
// All tensors must be contiguous and of the same dtype (ValueError / DTypeError otherwise, with
// the shapes in the message); they must stay alive until the returned Work completes.
#pragma once

#include <vector>

#include "dtensor/comm/process_group.h"
#include "dtensor/core/tensor.h"

namespace dt {

// In place: t becomes the reduction of t over the group.
WorkPtr all_reduce_(ProcessGroup& pg, Tensor& t, ReduceOp op, AllReduceAlgo algo = AllReduceAlgo::automatic);
// out has size(dim) == group size * in.size(dim) and in's other dims; rank i's `in` lands at
// [i*in.size(dim), (i+1)*in.size(dim)) along dim (dim 0: rows; a later dim is gathered straight
// into that layout, with no stacked copy to permute).
WorkPtr all_gather_into_tensor(ProcessGroup& pg, Tensor& out, const Tensor& in, int64_t dim = 0);
// The same gather in place: this rank's block of `out` along dim (group index i: [i*b, (i+1)*b)
// with b = out.size(dim) / group size) already holds its input; the other blocks are gathered
// around it and the own block is neither copied nor written (FSDP2's in-place all_gather, and a
// producer that wrote its result straight into its block). out must be contiguous.
WorkPtr all_gather_into_tensor_inplace(ProcessGroup& pg, Tensor& out, int64_t dim = 0);
// in has size(0) == group size * out.size(0); out = reduction of the rank-th block of every in.
WorkPtr reduce_scatter_tensor(ProcessGroup& pg, Tensor& out, const Tensor& in, ReduceOp op);
// Splits `in` along dim 0 into in_split_sizes (one per rank) and sends piece j to rank j; out is
// the concatenation along dim 0 of the pieces received, sized by out_split_sizes. Empty split
// lists mean equal splits.
WorkPtr all_to_all_single(ProcessGroup& pg, Tensor& out, const Tensor& in,
                          const std::vector<int64_t>& out_split_sizes = {},
                          const std::vector<int64_t>& in_split_sizes = {});
WorkPtr broadcast_(ProcessGroup& pg, Tensor& t, int root);

}  // namespace dt
