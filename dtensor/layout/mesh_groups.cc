#include "dtensor/layout/mesh_groups.h"

#include "dtensor/core/error.h"

namespace dt {

std::shared_ptr<const MeshGroups> MeshGroups::create(ProcessGroup& world, const DeviceMesh& mesh) {
  mesh.check_fits(world.size());
  auto out = std::make_shared<MeshGroups>();
  out->mesh_ = mesh;
  out->global_rank_ = world.global_ranks()[size_t(world.rank())];
  auto coord = mesh.coordinate(out->global_rank_);
  if (!coord) DT_THROW(ValueError) << "rank " << out->global_rank_ << " is not in mesh " << mesh.str();
  out->coordinate_ = *coord;
  for (int64_t m = 0; m < mesh.ndim(); ++m) {
    ProcessGroupPtr g = world.new_group(mesh.group_ranks(m, out->global_rank_));
    DT_CHECK(g && g->rank() == out->coordinate_[size_t(m)] && g->size() == mesh.size(m))
        << "group of mesh dim " << m << " on rank " << out->global_rank_;
    out->groups_.push_back(std::move(g));
  }
  uint32_t split = 0;  // the mesh dims of size > 1
  for (int64_t m = 0; m < mesh.ndim(); ++m)
    if (mesh.size(m) > 1) split |= 1u << m;
  if (__builtin_popcount(split) <= DeviceMesh::kMaxFlatDims) {
    for (uint32_t mask = 1; mask <= split; ++mask) {
      if ((mask & ~split) != 0 || __builtin_popcount(mask) < 2) continue;
      out->flat_groups_.emplace_back(mask, world.new_group(mesh.flat_group_ranks(mask, out->global_rank_)));
    }
  }
  return out;
}

ProcessGroup& MeshGroups::flat_group(uint32_t dims_mask) const {
  for (const auto& [mask, group] : flat_groups_)
    if (mask == dims_mask) return *group;
  DT_THROW(InternalError) << "no flattened group for mesh dims mask " << dims_mask << " of mesh " << mesh_.str();
}

}  // namespace dt
