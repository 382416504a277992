// The sharding pipeline in one call: resolve the plan, propagate, partition every rank's program.
// Also the static report of a per-rank program: collectives per kind and bytes each rank sends.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "dtensor/layout/device_mesh.h"
#include "dtensor/ir/graph.h"
#include "dtensor/ir/program_orbits.h"
#include "dtensor/redistribute/planner.h"
#include "dtensor/sharding/parallel_plan.h"
#include "dtensor/sharding/partitioner.h"
#include "dtensor/sharding/propagation.h"

namespace dt::sharding {

struct CompileOptions {
  std::vector<int> ranks;  // programs to build (empty: every rank of the mesh)
  bool verify = true;
  // Also find which ranks get the same program up to renaming (CompiledModel::orbits,
  // sharding/rank_orbits.h) and build every orbit representative's program too, after those of
  // `ranks` (that are not among them): what passes::run_rank_pipelines needs to check and plan
  // the whole job from a few programs. With `ranks` = {first rank of the mesh} only the
  // representatives are built, however large the mesh.
  bool orbits = false;
  // Called on the resolved plan before propagation: lets a caller that built the graph add what a
  // plan file cannot say (a training step places each optimizer state tensor and each updated
  // parameter output like its parameter).
  std::function<void(ResolvedPlan&)> adjust_plan;
};

struct CompiledModel {
  ResolvedPlan plan;
  Sharding sharding;
  std::vector<int> ranks;           // the global rank of each program
  std::vector<ir::Graph> programs;  // one per entry of `ranks`
  ir::RankOrbits orbits;            // when CompileOptions::orbits
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
