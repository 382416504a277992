// Moving whole tensors in and out of a sharding: this rank's shard of a full tensor (weights and
// data inputs, from the same placements the partitioner used), and the full tensor assembled from
// every rank's local piece (to compare a sharded run with the single-device one).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/io/sharded_checkpoint.h"
#include "dtensor/layout/device_mesh.h"
#include "dtensor/layout/placement.h"
#include "dtensor/ir/graph.h"
#include "dtensor/sharding/propagation.h"

namespace dt::sharding {

using TensorMap = std::map<std::string, Tensor>;

// Returns rank `rank`'s shard of `full` laid out as `placements` (a view for shards; P(sum) keeps
// the value on group index 0 and zeros elsewhere, other partials keep it everywhere).
Tensor shard_tensor(const Tensor& full, const DeviceMesh& mesh, const Placements& placements, int rank);

// Returns the global tensor from every rank's local piece (indexed by global rank): shards are
// placed at their offsets, partial mesh dims reduced, replicated ones taken from group index 0.
Tensor assemble_tensor(const std::vector<Tensor>& locals, const DeviceMesh& mesh, const Placements& placements,
                       const Shape& global_shape);

// Returns rank `rank`'s shards of the graph's parameters (every parameter must be in `full`,
// IoError naming it otherwise).
TensorMap shard_weights(const ir::Graph& graph, const Sharding& sharding, const TensorMap& full, int rank);
// Same for the graph's data inputs (extra tensors in `full` are ignored).
TensorMap shard_inputs(const ir::Graph& graph, const Sharding& sharding, const TensorMap& full, int rank);

// Returns every tensor of a sharded checkpoint assembled from the ranks' shards, a pipeline stage's
// from its sub-mesh's (IoError naming a tensor whose placements, full shape or shard is missing or
// does not fit the mesh).
TensorMap assemble_checkpoint(const io::ShardedCheckpoint& ckpt);

}  // namespace dt::sharding
