// A model compiled and sharded for a mesh with every rank in this process (the threads backend):
// what `profile --mesh` and the gpt benchmarks (`bench model`, `bench styles`) launch.
#pragma once

#include <vector>

#include "dtensor/layout/device_mesh.h"
#include "dtensor/runtime/interpreter.h"
#include "dtensor/sharding/compiler.h"
#include "dtensor/sharding/parallel_plan.h"
#include "dtensor/sharding/tensor_sharding.h"

namespace dt::tools {

struct ShardedPrograms {
  sharding::CompiledModel compiled;         // owns the programs
  std::vector<const ir::Graph*> programs;   // by rank: programs[r] is rank r's
  std::vector<runtime::Bindings> bindings;  // by rank: its shards of the parameters and data inputs
};

// Compiles `model` with `plan` on `mesh`, runs the default pass pipeline over every rank's program
// (as `dtensor run` does by default) and cuts each rank's shards of `full` (parameters and data
// inputs by name). Throws ValueError when the mesh's ranks are not 0..size-1.
ShardedPrograms shard_for_threads(const ir::Graph& model, const sharding::ParallelPlan& plan, const DeviceMesh& mesh,
                                  const sharding::TensorMap& full);

}  // namespace dt::tools
