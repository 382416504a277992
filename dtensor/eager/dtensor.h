// The eager distributed tensor: this rank's local shard plus the spec that says how the shards
// of all ranks form the global tensor.
//
// It lives in dtensor/eager (above redistribute, not in dtensor/layout) because redistribute()
// runs the planner and the executor. Every function here is collective over the mesh except
// to_local() and the accessors: all ranks call it with the same arguments.
#pragma once

#include <memory>

#include "dtensor/core/tensor.h"
#include "dtensor/layout/dtensor_spec.h"
#include "dtensor/layout/mesh_groups.h"
#include "dtensor/redistribute/planner.h"

namespace dt {

class DTensor {
 public:
  DTensor() = default;
  // Wraps a local shard without checks (use from_local to check).
  DTensor(Tensor local, std::shared_ptr<const DTensorSpec> spec, std::shared_ptr<const MeshGroups> groups);

  const Tensor& to_local() const { return local_; }
  const DTensorSpec& spec() const { return *spec_; }
  const Placements& placements() const { return spec_->placements(); }
  const Shape& shape() const { return spec_->shape(); }
  DType dtype() const { return spec_->dtype(); }
  const std::shared_ptr<const MeshGroups>& groups() const { return groups_; }

  // Returns the same tensor laid out as `placements` (the cheapest plan; cached). Returns *this
  // without communication when the placements already match.
  DTensor redistribute(const Placements& placements, RedistributePlanner& planner = default_planner()) const;
  // Same, refusing a different mesh (cross-mesh moves are not supported).
  DTensor redistribute(const DeviceMesh& mesh, const Placements& placements,
                       RedistributePlanner& planner = default_planner()) const;
  // Returns the global tensor on every rank (redistribute to all-Replicate).
  Tensor full_tensor(RedistributePlanner& planner = default_planner()) const;

 private:
  Tensor local_;
  std::shared_ptr<const DTensorSpec> spec_;
  std::shared_ptr<const MeshGroups> groups_;
};

// Returns this rank's shard of `full` (the same global tensor on every rank). For P(sum) only
// group index 0 of that mesh dim holds the value (the others hold zeros); P(avg|max|min) keep
// the value everywhere, so the reduction of the locals is `full`.
DTensor distribute_tensor(const Tensor& full, std::shared_ptr<const MeshGroups> groups, const Placements& placements);

// Wraps this rank's shard of a tensor of `global_shape`. Throws ShapeError when the local shape
// is not this rank's chunk shape. With check_cross_rank, also exchanges the metadata over the
// mesh and throws ValueError on every rank when ranks disagree on the global shape, placements or
// dtype, or ShapeError on every rank when any rank's local shape is wrong.
DTensor from_local(const Tensor& local, std::shared_ptr<const MeshGroups> groups, const Placements& placements,
                   const Shape& global_shape, bool check_cross_rank = false);

// Returns the gradient of redistribute(src -> grad_output's placements) w.r.t. its input: the
// gradient moved back to src, with src's partials replaced by R where the gradient is not
// partial (backward.h).
DTensor redistribute_backward(const DTensor& grad_output, const Placements& src,
                              RedistributePlanner& planner = default_planner());

}  // namespace dt
