// Which ranks of a sharded job get the same program up to renaming (ir/program_orbits.h), found from
// the sharding alone, without partitioning every rank.
//
// A rank's program depends on its mesh coordinate only through (partitioner.cc,
// redistribute_lowering.cc): the chunk length (torch.chunk, nested in split order: layout's
// shard_extent) that each coordinate gets of each tensor dim it splits; whether a coordinate is 0
// (group index 0 adds a bias once, keeps the value of a replicate -> partial move); the group's
// rank lists and where its shard starts (attributes only). So per
// mesh dim m the coordinates fall into classes, intervals of [0, n_m) between cut points: 1, and
// for every size L that a split on m may divide (every dim of every value of the model, and every
// chunk length an earlier split leaves of one), f and f + 1 where f = L / ceil(L / n_m) is the
// number of full chunks (from f on chunks are short, from f + 1 on empty). Coordinates of one
// class get chunks of the same lengths of everything, so ranks whose coordinates fall into the
// same class on every dim are one orbit. The classes may be finer than needed (a size no split
// divides adds cuts), never coarser; when every split is even there are two per dim ({0} and the
// rest) whatever the mesh size. rank_pipeline.h checks, for every program it transforms, that it
// is its orbit representative's up to renaming, so a wrong class is an internal error, not a hang.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/ir/graph.h"
#include "dtensor/ir/program_orbits.h"
#include "dtensor/sharding/propagation.h"

namespace dt::sharding {

class MeshOrbits {
 public:
  MeshOrbits(const ir::Graph& graph, const Sharding& sharding);

  // Returns the first coordinate of each class of mesh dim m, increasing (starts with 0).
  const std::vector<int64_t>& class_starts(int64_t m) const { return starts_[size_t(m)]; }
  // Returns the class of coordinate c on mesh dim m.
  int64_t class_of(int64_t m, int64_t c) const;
  // Returns the orbits (representative, rank count, peers per group) in representative order.
  ir::RankOrbits orbits() const;

 private:
  DeviceMesh mesh_;
  std::vector<std::string> dim_names_;
  std::vector<std::vector<int64_t>> starts_;  // per mesh dim
};

// Returns MeshOrbits(graph, sharding).orbits().
ir::RankOrbits rank_orbits(const ir::Graph& graph, const Sharding& sharding);

}  // namespace dt::sharding
