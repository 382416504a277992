// One rank's view of a DeviceMesh: its coordinate and a ProcessGroup per mesh dim.
//
// Creating the groups is collective: every rank of the mesh calls MeshGroups::create with the
// same mesh, and for each mesh dim in order calls world.new_group(its group's ranks), then, when
// the mesh has at most DeviceMesh::kMaxFlatDims dims of size > 1, for each subset of two or more
// of those dims (in increasing mask order) world.new_group(its flattened group's ranks). Create
// once per (mesh, rank) and share: DTensors hold a shared_ptr to it.
#pragma once

#include <memory>
#include <vector>

#include "dtensor/comm/process_group.h"
#include "dtensor/layout/device_mesh.h"

namespace dt {

class MeshGroups {
 public:
  // Creates the per-mesh-dim groups of the calling rank. Throws ValueError when the mesh does not
  // fit the world or the caller is not in the mesh.
  static std::shared_ptr<const MeshGroups> create(ProcessGroup& world, const DeviceMesh& mesh);

  const DeviceMesh& mesh() const { return mesh_; }
  int global_rank() const { return global_rank_; }
  const std::vector<int64_t>& coordinate() const { return coordinate_; }
  // Returns the group of a mesh dim; the caller's index in it is coordinate()[mesh_dim].
  ProcessGroup& group(int64_t mesh_dim) const { return *groups_[size_t(mesh_dim)]; }
  // Returns the flattened group of the mesh dims in `dims_mask` (DeviceMesh::flat_group_ranks);
  // the caller's index in it is mesh().flat_group_index(dims_mask, coordinate()). Throws
  // InternalError when no such group was made.
  ProcessGroup& flat_group(uint32_t dims_mask) const;

 private:
  DeviceMesh mesh_;
  int global_rank_ = 0;
  std::vector<int64_t> coordinate_;
  std::vector<ProcessGroupPtr> groups_;
  std::vector<std::pair<uint32_t, ProcessGroupPtr>> flat_groups_;  // by increasing mask
};

}  // namespace dt
