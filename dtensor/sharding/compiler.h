// The sharding pipeline in one call: resolve the plan, propagate, partition every rank's program.
// Also the static report of a per-rank program: collectives per kind and bytes each rank sends.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "dtensor/dist/device_mesh.h"
#include "dtensor/ir/graph.h"
#include "dtensor/redistribute/planner.h"
#include "dtensor/sharding/parallel_plan.h"
#include "dtensor/sharding/partitioner.h"
#include "dtensor/sharding/propagation.h"

namespace dt::sharding {

struct CompileOptions {
  std::vector<int> ranks;  // programs to build (empty: every rank of the mesh)
  bool verify = true;
};

struct CompiledModel {
  ResolvedPlan plan;
  Sharding sharding;
  std::vector<int> ranks;           // the global rank of each program
  std::vector<ir::Graph> programs;  // one per entry of `ranks`
  double propagate_ms = 0;          // resolve + propagate
  double partition_ms = 0;          // every program, verification included when enabled
};

CompiledModel compile(const ir::Graph& graph, const ParallelPlan& plan, const DeviceMesh& mesh,
                      const CompileOptions& options = {}, RedistributePlanner& planner = default_planner());

struct CollectiveStats {
  std::map<std::string, int> count;         // by op name
  std::map<std::string, int64_t> bytes;     // bytes this rank sends, by op name
  int64_t total_bytes = 0;
  int total = 0;
};

// Returns the collectives of one rank's program (`rank` is its global rank, for its group index).
CollectiveStats collective_stats(const ir::Graph& program, int rank);
// Returns the bytes of the program's parameters (this rank's shards).
int64_t param_bytes(const ir::Graph& program);

}  // namespace dt::sharding
