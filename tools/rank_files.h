// A directory of per-rank safetensors files, DIR/rank<r>.safetensors: each rank's local shards,
// with metadata `mesh`, `plan`, `rank`, and per tensor `placements.<name>` and `shape.<name>` (the
// full shape: local shapes are not enough for uneven shards). `train --save DIR` writes its
// checkpoints so (and `shard-weights` writes the same layout); `run --save-outputs DIR --sharded`
// writes each rank's local outputs so. Reading assembles the full tensors back.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/layout/device_mesh.h"

namespace dt::tools {

struct RankFiles {
  DeviceMesh mesh;
  std::string plan;
  std::vector<std::map<std::string, Tensor>> local;  // per rank (mesh.ranks() order): name -> shard
  std::map<std::string, std::string> placements;     // name -> placements text, e.g. "[S(0), R]"
  std::map<std::string, Shape> shapes;               // name -> full shape
};

// Returns DIR/rank<r>.safetensors.
std::string rank_file_path(const std::string& dir, int rank);
// Writes every rank's file; all appear together or not at all (core/atomic_file.h).
void write_rank_files(const std::string& dir, const RankFiles& files);
// True when `path` is (or, not existing, is meant as) such a directory: anything not ending in
// .safetensors.
bool is_rank_files_path(const std::string& path);
// Reads DIR back as full tensors, each assembled from every rank's shard; `flag` names the option
// in error messages (IoError for a missing file, placement or shape).
std::map<std::string, Tensor> read_rank_files(const std::string& dir, const std::string& flag);

}  // namespace dt::tools
