// Lowers a redistribution plan (dtensor/redistribute) into IR nodes of one rank's program: each
// collective step becomes functional collectives followed by their wait_tensor, with the local
// transposes, slices and concatenations around them. The group of a step on mesh dim m is the
// program's group named after m; a flattened step (several mesh dims at once) runs on the group
// named after its dims joined by '_' (mesh dims dp and tp: "dp_tp"), declared when first used.
//
// Per step on mesh dim m (group size n, group index i):
//   all_gather S(d)->R      even chunks: transpose d to the front, all_gather_into_tensor, wait,
//                           transpose back. Uneven chunks (torch.chunk leaves the last ones short or
//                           empty): all_to_all_single on the flattened shard, sent to every member
//                           (n copies concatenated), received with each member's exact size, then
//                           viewed as the gathered tensor: exact, no padding.
//   all_reduce P->R         all_reduce + wait.
//   reduce_scatter P->S(d)  even: transpose d to the front, reduce_scatter_tensor, wait, transpose
//                           back. Uneven: pad with zeros to n chunks of the largest size,
//                           reduce_scatter_tensor, wait, slice this rank's rows (never the
//                           whole reduced tensor on a rank).
//   all_to_all S(t)->S(u)   transpose u to the front, flatten, all_to_all_single with exact split
//                           sizes, wait, split the pieces received from each member, view them,
//                           concatenate along t, transpose back.
//   chunk R->S(d)           slice of this rank's chunk (no communication).
//   zero R->P(sum)          group index 0 keeps the value, the others a `full` of zeros.
//   zero S(d)->P(op)        cat of identity-filled `full`s around this member's chunk (the
//                           unsharded extent of d; identity 0, -inf or +inf).
//   keep                    nothing (same data).
#pragma once

#include <string>
#include <vector>

#include "dtensor/layout/device_mesh.h"
#include "dtensor/ir/graph.h"
#include "dtensor/redistribute/redistribute_plan.h"

namespace dt::sharding {

struct LoweringContext {
  ir::Graph& graph;               // the rank's program being built
  const ir::Graph* source;        // the single-device graph (its names are reserved too)
  const DeviceMesh& mesh;
  std::vector<int64_t> coord;     // this rank's mesh coordinate
  const std::vector<std::string>& group_names;  // per mesh dim
  int64_t counter = 0;

  // Returns `base`, or "<base>.<k>" when base is taken, unused in both graphs.
  std::string fresh(const std::string& base);
  // Returns the name of the flattened group of the mesh dims in `dims_mask` (their names joined
  // by '_', as PyTorch's DeviceMesh._flatten names them: "dp_tp"), declaring it in the program
  // the first time.
  const std::string& flat_group(uint32_t dims_mask);
};

// Returns the stem of the names of the values that redistribute `v` (a value of the single-device
// graph), so that a report says which module needed a collective: v's own name when it has one
// (a parameter, an input, `%logits`); else the module path of the node that made it,
// "<module>.out" when that node reads a parameter "<module>.<name>" (`h.0.attn.o_proj.out`), or
// "<module>.<op>" for the nearest such node a few steps up its operands (`h.0.attn.q_proj.view`);
// else v's name (a number).
std::string module_stem(const ir::Value* v);

// Appends the nodes moving `x` (this rank's local value of a tensor laid out as plan.src) to
// plan.dst and returns the new local value (x itself for a plan without data movement). The new
// values are named "<stem><tag>" (`h.0.attn.o_proj.out.ar`, its wait `...ar.w`), stem defaulting
// to x's name; fresh() adds ".<k>" only when a name is taken.
ir::Value* lower_redistribution(LoweringContext& ctx, ir::Value* x, const RedistributePlan& plan,
                                const std::string& stem = {});

}  // namespace dt::sharding
