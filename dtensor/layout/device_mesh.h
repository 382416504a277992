// An N-d array of global ranks and the process groups its dims define.
//
// Mesh `2x4` holds ranks 0..7 row-major: [[0,1,2,3],[4,5,6,7]]. Mesh dim 0 groups ranks that
// differ only in coordinate 0 ([0,4] [1,5] [2,6] [3,7]); mesh dim 1 groups [0..3] and [4..7]. Any
// rank array is allowed (groups need not be contiguous: [[0,2],[4,6]] gives dim-1 group [0,2]);
// a rank's index inside its group, not its global rank, picks its chunk.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtensor/core/shape.h"

namespace dt {

class DeviceMesh {
 public:
  // Limits on what a mesh may be, checked where it is built so user input never reaches the
  // stages with a mesh they cannot take: sharding keeps per-mesh-dim bit masks in 32 bits, and a
  // mesh's rank arrays and groups are materialised (a mesh of 10^11 ranks is a typo).
  static constexpr int64_t kMaxDims = 8;
  static constexpr int64_t kMaxRanks = 65536;
  // Flattened groups (one group spanning several mesh dims, for a collective over all of them) are
  // made for meshes with at most this many dims of size > 1: one group per subset of two or more
  // of those dims (11 for 4 dims), made up front by MeshGroups and used by the planner.
  static constexpr int64_t kMaxFlatDims = 4;
  static_assert(kMaxDims <= 32, "sharding/parallel_plan.h keeps one bit per mesh dim in a uint32_t");

  DeviceMesh() = default;
  // Mesh of ranks 0..numel(shape)-1 in row-major order.
  explicit DeviceMesh(Shape shape);
  // Mesh of the given ranks (row-major). Throws ValueError when the count does not match the
  // shape, a rank is negative or repeated, a size is not positive, or the mesh has more than
  // kMaxDims dims or kMaxRanks ranks.
  DeviceMesh(Shape shape, std::vector<int> ranks);
  // Parses "2x4", "8" or "2x2x2". Throws ValueError naming the text otherwise.
  static DeviceMesh parse(std::string_view text);

  int64_t ndim() const { return int64_t(shape_.size()); }
  const Shape& shape() const { return shape_; }
  int64_t size(int64_t mesh_dim) const;
  int64_t size() const { return int64_t(ranks_.size()); }
  const std::vector<int>& ranks() const { return ranks_; }
  bool contains(int global_rank) const { return flat_index(global_rank) >= 0; }

  // Returns the coordinate of a global rank, or nullopt when it is not in the mesh.
  std::optional<std::vector<int64_t>> coordinate(int global_rank) const;
  // Returns the global rank at a coordinate.
  int rank_at(const std::vector<int64_t>& coordinate) const;
  // Returns the ranks of the mesh-dim group containing global_rank, in group-index order
  // (mesh [[0,1,2,3],[4,5,6,7]], dim 0, rank 6 -> [2, 6]). Throws ValueError if not a member.
  std::vector<int> group_ranks(int64_t mesh_dim, int global_rank) const;
  // Returns the ranks of the group spanning the mesh dims whose bits are set in `dims_mask` (a
  // flattened group: the members that differ from global_rank only in those coordinates), ordered
  // by those coordinates with the lowest mesh dim slowest. Mesh 2x2x2, dims {0, 2}, rank 0 ->
  // [0, 1, 4, 5]. Throws ValueError if not a member or a bit names no mesh dim.
  std::vector<int> flat_group_ranks(uint32_t dims_mask, int global_rank) const;
  // Returns a coordinate's index in its flattened group of `dims_mask` (the position of its rank
  // in flat_group_ranks).
  int64_t flat_group_index(uint32_t dims_mask, const std::vector<int64_t>& coordinate) const;
  // Returns every group of a mesh dim (dim 0 of 2x4 -> [0,4] [1,5] [2,6] [3,7]).
  std::vector<std::vector<int>> all_groups(int64_t mesh_dim) const;
  // Returns the ranks at index `index` of mesh dim `mesh_dim` as a mesh of the other dims, in their
  // order (a pipeline stage's sub-mesh: dim 0 of 2x2x2, index 1 -> 2x2[4,5,6,7]); a 1-d mesh's is
  // the one rank, shape [1]. Throws ValueError for a dim or index outside the mesh.
  DeviceMesh sub_mesh(int64_t mesh_dim, int64_t index) const;
  // Throws ValueError when the mesh needs a rank outside a world of `world_size` ranks.
  void check_fits(int world_size) const;

  // Returns "2x4" for the default rank order, else "2x4[0,2,4,6,1,3,5,7]".
  std::string str() const;
  bool operator==(const DeviceMesh& other) const { return shape_ == other.shape_ && ranks_ == other.ranks_; }
  bool operator!=(const DeviceMesh& other) const { return !(*this == other); }

 private:
  // Returns the row-major index of a global rank, -1 when absent.
  int64_t flat_index(int global_rank) const;
  int64_t checked_mesh_dim(int64_t mesh_dim) const;

  Shape shape_;
  std::vector<int> ranks_;
  std::vector<int64_t> index_of_rank_;  // global rank -> flat index, -1 when absent
};

}  // namespace dt
