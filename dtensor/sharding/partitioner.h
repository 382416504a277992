// The partitioner: rewrites a sharded single-device graph into the program of one rank.
//
// Inputs and parameters keep their names with this rank's local shapes. Every node keeps its op
// and result names, with local result shapes; view/reshape targets become local sizes (attention
// heads split across ranks: [B, S, H] -> [B, S, heads, D] becomes [B, S, heads/tp, D]). Where a
// producer's placements differ from what a consumer needs, the planner's cheapest redistribution
// is inserted as collectives + waits (redistribute_lowering.h), once per (value, placements) and
// shared by every consumer. A linear whose result is P(sum) adds its bias only on group index 0.
// Two ops take another local form: an embedding whose table rows are sharded (vocabulary
// parallel) becomes masked_embedding at this rank's first row, and cross_entropy on class-sharded
// logits becomes its loss-parallel pieces with three all_reduces of one value per row
// (ir/ops/loss.cc); its backward, cross_entropy_backward on the same class shards, reuses the
// forward's row max and sum (no collective; two all_reduces when the forward's are not there).
// Graph outputs end in the placements the sharding requires (R by default). The program declares
// one process group per mesh dim of size > 1, named after the mesh dim and holding this rank's
// group, and is verified.
#pragma once

#include "dtensor/ir/graph.h"
#include "dtensor/redistribute/planner.h"
#include "dtensor/sharding/propagation.h"

namespace dt::sharding {

struct PartitionOptions {
  bool verify = true;  // run ir::verify on the program
};

// Returns the program of global rank `rank` (ValueError when the rank is not in the mesh).
ir::Graph partition(const ir::Graph& graph, const Sharding& sharding, int rank,
                    RedistributePlanner& planner = default_planner(), const PartitionOptions& options = {});

}  // namespace dt::sharding
