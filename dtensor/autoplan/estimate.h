// The step-time and memory estimate of a sharded program: the one model the plan search
// (search.h) minimises and `compile --report` prints, so a hand plan and an auto plan compare.
//
// Step time = compute + communication, summed over the nodes in order (no overlap assumed):
//   compute  a node with OpDef::flops: flops / (ranks sharing the work) / MachineModel::gemm_gflops;
//            any other node: its local result bytes / MachineModel::mem_gbs. The work of a node is
//            shared over each mesh dim where its result is sharded or partial.
//   comm     every redistribution propagation asks for (an operand whose producer's placements
//            differ from what the node needs, a gradient laid out after production, a graph output
//            brought to its required placements), each move of a value to a placement once (its
//            readers share the copy, as in the partitioned program), priced step by step by the redistribution
//            planner's α–β model (the same plans `dtensor plan` prints), split by collective kind.
// Memory per rank = the rank program's parameters (its shards; a training step's optimizer state
// is parameters too) + passes::estimate_peak_bytes of the program (activations, and a training
// step's gradients).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dtensor/ir/graph.h"
#include "dtensor/redistribute/planner.h"
#include "dtensor/sharding/compiler.h"

namespace dt::autoplan {

// Machine constants (defaults: documented in docs/plans.md, roughly this 2-core machine's f32
// GEMM and copy rates and the threads backend's collectives).
struct MachineModel {
  double gemm_gflops = 20.0;  // f32 GEMM rate of one rank
  double mem_gbs = 5.0;       // bytes per second of a non-GEMM op's result, GB/s
  CostModel comm;             // α–β of a collective (redistribute/cost_model.h)
};

struct Estimate {
  double compute_us = 0;
  std::map<std::string, double> comm_us;  // by collective kind (all_gather, all_reduce, ...)
  double comm_total_us = 0;
  double step_us = 0;  // compute_us + comm_total_us
  // Per rank (the largest over the ranks whose programs were looked at); -1: not estimated.
  int64_t param_bytes = -1, activation_bytes = -1, peak_bytes = -1;
};

// The time part from a propagated sharding of `graph` (memory left at -1). node_us (optional): each
// node's share of step_us, by node index (its compute, its results' moves after production and its
// operands' moves to what it needs), then one entry for bringing the graph outputs to their
// placements; they sum to step_us.
Estimate estimate_time(const ir::Graph& graph, const sharding::Sharding& sharding, const MachineModel& machine = {},
                       RedistributePlanner& planner = default_planner(), std::vector<double>* node_us = nullptr);
// Per-rank memory of one rank's program: parameters + the activation estimate.
void add_memory(const ir::Graph& program, Estimate& estimate);
// A certified lower bound of estimate_time's step_us for any plan of `graph` on `ranks` ranks: each
// node's compute at its least (its FLOPs, or its result bytes, split over every rank: a block is
// never smaller than numel / ranks) and no communication. The search reports it next to its
// (local) optimum: the gap bounds how far any plan could beat it.
double lower_bound_us(const ir::Graph& graph, int64_t ranks, const MachineModel& machine = {});
// Both, for a compiled model (`graph` is what it was compiled from; memory from every program it
// holds, the largest). What a job's report shows: autoplan::estimate(job.graph(), job.compiled()).
Estimate estimate(const ir::Graph& graph, const sharding::CompiledModel& compiled, const MachineModel& machine = {});

}  // namespace dt::autoplan
