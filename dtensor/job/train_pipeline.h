// Pipeline-parallel training (the plan's `pipeline` section): what train_sharded runs for such a
// plan. The model is cut into stages (pipeline/stages.h), each stage's rank runs its program of
// micro-batch forwards and backwards in schedule order (pipeline/program.h), proved deadlock-free
// at compile time (passes/p2p_order.h), and the optimizer step runs once per step.
//
// Each stage runs on its sub-mesh (the mesh at one index of the pipeline dim): its graph is
// partitioned there under the rest of the plan (sharding/compiler.h), the values crossing stages
// laid out R, or S(0) on the mesh dims that shard the plan's data inputs on dim 0 (the batch), so
// that the rank at each place of a stage's sub-mesh exchanges them with the rank at the same place
// of the neighbouring stage whole.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "dtensor/job/train.h"
#include "dtensor/pipeline/program.h"

namespace dt::job {

// The pipeline of a plan on a mesh: its stages' programs (ValueError for a plan whose pipeline
// dim is not among its mesh dims, other dims larger than 1, and pipeline/stages.h's errors).
struct PipelinePrograms {
  pipeline::StageSplit split;
  std::vector<pipeline::StageGraph> graphs;       // [stage]
  std::vector<DeviceMesh> meshes;                 // [stage]: its sub-mesh
  std::vector<sharding::CompiledModel> compiled;  // [stage]: its graph partitioned on its sub-mesh
  std::vector<pipeline::StageProgram> programs;   // by stage, then place
};
PipelinePrograms compile_pipeline(const ir::Graph& forward, const sharding::ParallelPlan& plan, const DeviceMesh& mesh,
                                  const pipeline::ProgramOptions& options);

TrainResult train_pipeline(ir::Graph forward, const std::map<std::string, Tensor>& weights,
                           const std::map<std::string, Tensor>& data, const TrainOptions& options,
                           const ShardedTrainOptions& sharded);

}  // namespace dt::job
