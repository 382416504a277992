// The chain an all_gather along a dim d > 0 is lowered to by the sharding (stacked_to_dim in
// sharding/redistribute_lowering.cc): all_gather_into_tensor (blocks stacked along dim 0) ->
// wait_tensor -> view [n, p...] -> permute (the members' axis to d) -> reshape (p with p[d] *= n).
// The interpreter gathers such a chain straight into the reshape's layout (runtime's GatherJoin),
// and comm lowering lets a linear producing the block write into its columns of that layout
// (all_gather_linear_in); both recognise it here.
#pragma once

#include <optional>

#include "dtensor/ir/graph.h"
#include "dtensor/ir/use_lists.h"

namespace dt::ir {

struct GatherJoinChain {
  const Node* wait = nullptr;
  const Node* view = nullptr;
  const Node* permute = nullptr;
  const Node* join = nullptr;  // the reshape: its result is the gathered value
  int64_t dim = 0;             // the gathered dim of the join's result
};

// Whether the block of one rank along `dim` of a gathered tensor of `shape` is rows (its last dim)
// of contiguous values one stride apart, which a GEMM can write straight into (linear_into): the
// last dim, or a dim with only size-1 dims before it. A block along a middle dim is not (its rows
// jump at every index of the dims before it).
bool block_rows_fold(const Shape& shape, int64_t dim);

// Returns the chain after `gather` (an all_gather_into_tensor) when each of its nodes is the only
// reader of the previous one's result (none a graph output) with exactly the shapes above; else
// nullopt (an empty block says nothing about the group size: nullopt too).
std::optional<GatherJoinChain> match_gather_join(const Node& gather, const UseLists& uses);

}  // namespace dt::ir
