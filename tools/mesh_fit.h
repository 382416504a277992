// Whether a mesh fits a model under a plan: checked by the commands before sharding, so that a
// mesh with more ranks than the model's dims can take is a user error (ValueError naming the mesh
// dim, the parameter and its size), not a failed check deep in propagation.
#pragma once

#include "dtensor/layout/device_mesh.h"
#include "dtensor/ir/graph.h"
#include "dtensor/sharding/parallel_plan.h"

namespace dt::tools {

// Throws ValueError when a parameter the plan shards on tensor dim d over mesh dim m has fewer
// than mesh.size(m) elements along d: some ranks would hold nothing of it, which the sharding
// stage does not support in general (gpt_tp on the example gpt fails from 257 ranks).
void check_mesh_fits_model(const ir::Graph& model, const sharding::ParallelPlan& plan, const DeviceMesh& mesh);

}  // namespace dt::tools
