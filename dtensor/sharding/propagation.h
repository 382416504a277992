// Sharding propagation: annotates every value of a single-device graph with placements on a mesh.
//
// Inputs and parameters start with the plan's placements (parallel_plan.h). Nodes are visited in
// order; for each node the candidate strategies come from its rule (OpDef::sharding_rule, ir/sharding_factors.h): on every
// mesh dim of size > 1, either nothing is sharded, or a factor that some operand already shards
// on that mesh dim (shardings propagate, they are never invented; fsdp-stored parameter shardings
// do not propagate), or a partial operand passes through a linear op. A plan's `sequence` style
// forces the factor of a node's first operand. Every combination over the mesh dims is costed as
// the sum of the planner's estimated times to move each operand from its placements to the ones
// the strategy needs; the cheapest wins (ties: the more sharded result, then enumeration order).
// An op without a rule takes replicated operands and gives replicated results, with one warning
// per op.
//
// A gradient of a training step (ResolvedPlan::gradient_of) is read, by every reader, as the
// backward rule of a redistribution derives from its forward value (redistribute/backward.h): the
// forward value's placements, partial turned replicated unless the gradient is partial. The
// partitioner inserts that redistribution right after the gradient is produced (Sharding::reads),
// so the backward issues the collectives that mirror the forward's and a full-size partial
// gradient dies at its reduce_scatter instead of living until the optimizer reads it.
//
// Invariants of the result: every value has one placement per mesh dim, normalised; every node
// records the placements its operands must have (the partitioner inserts the redistribution where
// they differ from the producer's); graph outputs end as the plan says (R by default).
#pragma once

#include <string>
#include <vector>

#include "dtensor/layout/device_mesh.h"
#include "dtensor/layout/placement.h"
#include "dtensor/ir/graph.h"
#include "dtensor/redistribute/planner.h"
#include "dtensor/sharding/parallel_plan.h"

namespace dt::sharding {

struct NodeSharding {
  std::vector<Placements> operands;  // the placements each operand must have
  uint32_t drop_added_once = 0;      // mesh dims whose group index > 0 skips the added-once operand
  int added_once = -1;               // that operand (the rule's added_once)
  bool fallback = false;             // the op has no rule: everything replicated
  double cost_us = 0;                // estimated time of the operands' redistributions
};

struct Sharding {
  DeviceMesh mesh;
  std::vector<std::string> mesh_dim_names;
  std::vector<Placements> values;    // by Value::id
  // By Value::id: where the value is redistributed right after it is produced, for all its readers
  // (a gradient laid out like its forward value); empty when it is read where it is produced.
  std::vector<Placements> reads;
  std::vector<NodeSharding> nodes;   // by node index
  std::vector<Placements> outputs;   // required placements of the graph outputs
  std::vector<std::string> warnings;  // one per op without a rule
  double total_cost_us = 0;
};

// Propagates the resolved plan through `graph`. The planner prices the redistributions (its cache
// is shared with the partitioner).
Sharding propagate(const ir::Graph& graph, const DeviceMesh& mesh, const ResolvedPlan& plan,
                   RedistributePlanner& planner = default_planner());

// Returns the value's placements as text for reports and tests ("S(0),R").
std::string placements_of(const Sharding& sharding, const ir::Value* value);

}  // namespace dt::sharding
