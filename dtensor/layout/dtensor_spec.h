// The layout of a distributed tensor: mesh, one placement per mesh dim, global shape, dtype.
//
// Sharding follows torch.chunk, nested in mesh-dim order. A tensor dim of size L sharded by mesh
// dims m1 < m2 (sizes n1, n2) is split by m1 first (chunk c1 = ceil(L/n1)), then each m1 chunk is
// split again by m2. Worked example: L = 10 on mesh 2x2 with S(0),S(0): m1 gives [0,5) [5,10);
// m2 splits each into 3 + 2, so coordinates (0,0) (0,1) (1,0) (1,1) hold rows [0,3) [3,5) [5,8)
// [8,10). L = 3 on the same mesh: [0,2) [2,3) then [0,1) [1,2) [2,3) [3,3) — the last is empty.
// Strided shards SS(d) split after every plain S(d) (placement.h): the split order of a tensor dim
// is its plain shards in mesh-dim order, then its strided shards in mesh-dim order.
#pragma once

#include <utility>
#include <vector>

#include "dtensor/core/dtype.h"
#include "dtensor/core/shape.h"
#include "dtensor/layout/device_mesh.h"
#include "dtensor/layout/placement.h"

namespace dt {

// Returns the placements with shard dims normalised against tensor_rank. Throws ValueError when
// the count differs from mesh_ndim, DimError for a bad shard dim.
//
// Mixed partials (issue 27.9, PyTorch's test_ordered_redistribute_with_partial): partial ops may
// differ between mesh dims, e.g. S(0),P(sum),P(min) on a 2x2x2 mesh. The global value is the
// reduction of the locals over the partial mesh dims in one fixed order, the last mesh dim first
// (the order in which PyTorch's redistribute of a sharded source replicates: inner to outer):
// here sum over mesh dim 1 of (min over mesh dim 2 of the locals). Ops that commute (equal ops,
// or sum and avg) may be reduced in any order; the planner reduces a non-commuting P(op) only when
// no mesh dim after it holds a partial op it does not commute with (transition_rules.h).
Placements normalize_placements(const Placements& placements, int64_t mesh_ndim, int64_t tensor_rank);

// Throws ShapeError when a blocked shard's dim does not divide into its blocks (placements
// normalised).
void check_blocks_divide(const Placements& placements, const Shape& shape);

// Returns the position of mesh dim m's split in the split order of the tensor dim it shards: plain
// shards come first in mesh-dim order, strided ones after them (compare two mesh dims sharding the
// same tensor dim with it; a larger key splits later, i.e. is more inner).
inline int64_t split_key(const Placement& p, int64_t m) { return p.is_strided() ? m + 1024 : m; }

// Returns [offset, offset+length) of tensor dim `tdim` (global size `size`) held at mesh coordinate
// `coord` after the splits that come before mesh dim `upto_mesh_dim`'s in the split order (all of
// them when upto_mesh_dim is the mesh's ndim) — the extent the next split divides. For a blocked
// shard S(d,blocks=b): the offset inside each block and b times the chunk length.
std::pair<int64_t, int64_t> shard_extent(const Shape& mesh_shape, const Placements& placements,
                                         int64_t size, int64_t tdim, const std::vector<int64_t>& coord,
                                         int64_t upto_mesh_dim);
// Returns the local shape at mesh coordinate `coord` of a tensor of `shape` laid out as
// `placements` on a mesh of `mesh_shape` (DTensorSpec::local_shape_at without building a spec:
// redistribution plans and per-rank programs carry only the mesh shape).
Shape local_shape_at(const Shape& mesh_shape, const Placements& placements, const Shape& shape,
                     const std::vector<int64_t>& coord);

class DTensorSpec {
 public:
  DTensorSpec() = default;
  // Validates and normalises (see normalize_placements).
  DTensorSpec(DeviceMesh mesh, Placements placements, Shape shape, DType dtype);

  const DeviceMesh& mesh() const { return mesh_; }
  const Placements& placements() const { return placements_; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int64_t rank() const { return int64_t(shape_.size()); }

  // Returns the local shape / global offset of the shard on a global rank (ValueError when the
  // rank is not in the mesh).
  Shape local_shape(int global_rank) const;
  Shape global_offset(int global_rank) const;
  Shape local_shape_at(const std::vector<int64_t>& coord) const;
  Shape global_offset_at(const std::vector<int64_t>& coord) const;

  bool has_partial() const;
  std::string str() const;  // "S(0),R on 2x4 [1023, 517] f32"
  bool operator==(const DTensorSpec& o) const {
    return mesh_ == o.mesh_ && placements_ == o.placements_ && shape_ == o.shape_ && dtype_ == o.dtype_;
  }

 private:
  std::vector<int64_t> checked_coordinate(int global_rank) const;

  DeviceMesh mesh_;
  Placements placements_;
  Shape shape_;
  DType dtype_ = DType::f32;
};

}  // namespace dt
