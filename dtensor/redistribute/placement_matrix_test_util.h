// Test support shared by planner_test and executor_test: the placement matrix they sweep.
#pragma once

#include <vector>

#include "dtensor/core/error.h"
#include "dtensor/layout/placement.h"

namespace dt::test {

// Every placement a mesh dim can take in the matrix (tensor dims 0 and 1, every reduce op).
inline const std::vector<Placement> kChoices = {
    Placement::replicate(),            Placement::shard(0),
    Placement::shard(1),               Placement::partial(ReduceOp::sum),
    Placement::partial(ReduceOp::avg), Placement::partial(ReduceOp::max),
    Placement::partial(ReduceOp::min)};

// Returns the i-th placement list of the matrix over kChoices (mixed radix, one digit per mesh dim).
inline Placements nth(int64_t i, size_t mesh_ndim) {
  Placements p;
  for (size_t m = 0; m < mesh_ndim; ++m, i /= int64_t(kChoices.size()))
    p.push_back(kChoices[size_t(i % int64_t(kChoices.size()))]);
  return p;
}

// Returns whether `p` is a valid placement list for a 2-d tensor on a mesh of mesh_ndim dims.
inline bool valid(const Placements& p, size_t mesh_ndim) {
  try {
    normalize_placements(p, int64_t(mesh_ndim), 2);
    return true;
  } catch (const ValueError&) {
    return false;
  }
}

// Returns whether redistributing a -> b is refused: a Partial changing its reduce op.
inline bool refused_pair(const Placements& a, const Placements& b) {
  for (size_t m = 0; m < a.size(); ++m)
    if (a[m].is_partial() && b[m].is_partial() && a[m].op() != b[m].op()) return true;
  return false;
}

}  // namespace dt::test
