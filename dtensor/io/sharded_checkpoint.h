// A sharded checkpoint: a directory of per-rank safetensors files, each rank's local shards with
// the metadata needed to assemble them (mesh, plan, placements and full shape per tensor).
// `train --save DIR` writes its sharded state so, `shard-weights` writes parameter shards so and
// `run --save-outputs DIR --sharded` writes each rank's local outputs so; `run --weights DIR`,
// `train --weights DIR` and `--expect DIR` read them. This file is the format's one home;
// sharding/tensor_sharding.h assembles the full tensors (assemble_checkpoint).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/layout/device_mesh.h"

namespace dt::io {

// Where a tensor of a pipeline's checkpoint lives: on one stage's ranks, the sub-mesh at `index` of
// mesh dim `dim` (DeviceMesh::sub_mesh), with its placements over that sub-mesh's dims; only those
// ranks' files hold it.
struct SubMesh {
  int64_t dim = 0, index = 0;
  bool operator==(const SubMesh&) const = default;
};

// A directory of per-rank safetensors files: each rank's local shards plus the metadata needed
// to assemble them (mesh, plan, placements text per tensor, full shapes).
struct ShardedCheckpoint {
  DeviceMesh mesh;
  std::string plan;                               // the plan file it was written with (informational)
  std::vector<TensorMap> local;                   // per rank, in mesh.ranks() order: name -> local shard
  std::map<std::string, std::string> placements;  // name -> placements text, e.g. "[S(0), R]"
  std::map<std::string, Shape> shapes;            // name -> full shape
  // name -> its stage's sub-mesh, for the tensors of a pipeline (absent: on the whole mesh). A
  // checkpoint with any is written as format version 3, which older readers refuse.
  std::map<std::string, SubMesh> sub_meshes;
};

// True when `path` is (or, not existing, is meant as) a checkpoint directory: anything not ending
// in .safetensors.
bool is_sharded_checkpoint_path(const std::string& path);
// Writes the checkpoint as one unit (whole or not at all).
void write_sharded_checkpoint(const std::string& dir, const ShardedCheckpoint& ckpt);
// Reads and verifies one consistent generation; `flag` names the option in error messages.
ShardedCheckpoint read_sharded_checkpoint(const std::string& dir, const std::string& flag);

}  // namespace dt::io
