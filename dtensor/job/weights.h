// The parameters a job runs or trains with: full tensors, or a sharded checkpoint directory
// (io/sharded_checkpoint.h). A checkpoint whose mesh and placements are the job's is used shard
// by shard as it is; any other mesh or plan reshards it: the full tensors are assembled once and
// cut again for the job's placements.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "dtensor/core/tensor.h"
#include "dtensor/io/sharded_checkpoint.h"
#include "dtensor/ir/graph.h"
#include "dtensor/layout/device_mesh.h"
#include "dtensor/sharding/propagation.h"

namespace dt::job {

using TensorMap = std::map<std::string, Tensor>;

class Weights {
 public:
  Weights() = default;  // no tensors (a model without parameters)
  // Full tensors by name (shared, not copied: a rank's shards are views of them).
  static Weights full(TensorMap tensors);
  static Weights checkpoint(io::ShardedCheckpoint checkpoint);
  // Reads a safetensors file of full tensors, or a checkpoint directory (anything not ending in
  // .safetensors that is a directory); `flag` names the option in error messages.
  static Weights load(const std::string& path, const std::string& flag = "--weights");

  bool empty() const;
  bool is_checkpoint() const { return checkpoint_.has_value(); }
  const std::optional<io::ShardedCheckpoint>& checkpoint_data() const { return checkpoint_; }
  // The full tensors (assembled from the checkpoint on first use, then kept).
  const TensorMap& full_tensors() const;
  // Returns rank r's shard of every parameter of `graph` under `sharding` on `mesh`: the
  // checkpoint's own shard when it was written for this mesh with these placements, else a view
  // cut from the full tensors. IoError naming a parameter the weights lack.
  TensorMap rank_shards(const ir::Graph& graph, const sharding::Sharding& sharding, const DeviceMesh& mesh,
                        int rank) const {
    return rank_shards(graph, sharding, mesh, rank, matches(graph, sharding, mesh));
  }
  // The same with matches(graph, sharding, mesh) given: a caller binding every rank checks the
  // checkpoint's layout once (it parses every parameter's placements), not once per rank.
  TensorMap rank_shards(const ir::Graph& graph, const sharding::Sharding& sharding, const DeviceMesh& mesh,
                        int rank, bool matching) const;
  // True when the checkpoint holds every parameter of `graph` exactly as `sharding` places it on `mesh`.
  bool matches(const ir::Graph& graph, const sharding::Sharding& sharding, const DeviceMesh& mesh) const;

 private:
  std::optional<io::ShardedCheckpoint> checkpoint_;
  // The full tensors: given, or assembled from the checkpoint on first use (shared, so that
  // copies of a Weights assemble once).
  struct Full;
  std::shared_ptr<Full> full_;
};

}  // namespace dt::job
