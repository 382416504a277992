#include "dtensor/layout/dtensor_spec.h"

#include <limits>
#include <sstream>

#include "dtensor/core/error.h"

namespace dt {

Placements normalize_placements(const Placements& placements, int64_t mesh_ndim, int64_t tensor_rank) {
  if (int64_t(placements.size()) != mesh_ndim)
    DT_THROW(ValueError) << "got " << placements.size() << " placements (" << placements_str(placements)
                         << ") for a mesh of " << mesh_ndim << " dims";
  Placements out;
  out.reserve(placements.size());
  // Partial ops may differ between mesh dims (S(0),P(sum),P(min)): the value is reduced from the
  // last mesh dim to the first (dtensor_spec.h), so no mix is refused here.
  for (size_t m = 0; m < placements.size(); ++m) out.push_back(placements[m].normalized(tensor_rank));
  // A blocked shard's chunks are cut inside each block: no other mesh dim may cut the same dim.
  for (size_t m = 0; m < out.size(); ++m) {
    if (!out[m].is_blocked()) continue;
    for (size_t k = 0; k < out.size(); ++k)
      if (k != m && out[k].is_shard(out[m].dim()))
        DT_THROW(ValueError) << "placements " << placements_str(out) << ": the blocked shard on mesh dim " << m
                             << " must be the only shard of tensor dim " << out[m].dim();
  }
  return out;
}

void check_blocks_divide(const Placements& placements, const Shape& shape) {
  for (const Placement& p : placements)
    if (p.is_blocked() && p.dim() >= 0 && size_t(p.dim()) < shape.size() && shape[size_t(p.dim())] % p.blocks() != 0)
      DT_THROW(ShapeError) << "placement " << p.str() << " needs dim " << p.dim() << " of "
                           << shape_str(shape) << " to divide into " << p.blocks() << " equal blocks";
}

std::pair<int64_t, int64_t> shard_extent(const Shape& mesh_shape, const Placements& placements,
                                         int64_t size, int64_t tdim, const std::vector<int64_t>& coord,
                                         int64_t upto_mesh_dim) {
  const int64_t ndim = int64_t(placements.size());
  const int64_t limit = upto_mesh_dim < ndim ? split_key(placements[size_t(upto_mesh_dim)], upto_mesh_dim)
                                             : std::numeric_limits<int64_t>::max();
  int64_t offset = 0, length = size;
  // Two sweeps: plain shards in mesh-dim order, then strided ones (the split order).
  for (bool strided : {false, true}) {
    for (int64_t m = 0; m < ndim; ++m) {
      const Placement& p = placements[size_t(m)];
      if (!p.is_shard(tdim) || p.is_strided() != strided || split_key(p, m) >= limit) continue;
      int64_t n = mesh_shape[size_t(m)], i = coord[size_t(m)];
      if (p.is_blocked()) {  // the only shard of this dim: the chunk of one block, once per block
        const int64_t block = length / p.blocks();
        return {chunk_offset(block, n, i), p.blocks() * chunk_length(block, n, i)};
      }
      offset += chunk_offset(length, n, i);
      length = chunk_length(length, n, i);
    }
  }
  return {offset, length};
}

DTensorSpec::DTensorSpec(DeviceMesh mesh, Placements placements, Shape shape, DType dtype)
    : mesh_(std::move(mesh)), shape_(std::move(shape)), dtype_(dtype) {
  for (int64_t s : shape_)
    if (s < 0) DT_THROW(ValueError) << "negative size in tensor shape " << shape_str(shape_);
  placements_ = normalize_placements(placements, mesh_.ndim(), rank());
  check_blocks_divide(placements_, shape_);
}

std::vector<int64_t> DTensorSpec::checked_coordinate(int global_rank) const {
  auto coord = mesh_.coordinate(global_rank);
  if (!coord) DT_THROW(ValueError) << "rank " << global_rank << " is not in mesh " << mesh_.str();
  return *coord;
}

Shape DTensorSpec::local_shape(int global_rank) const { return local_shape_at(checked_coordinate(global_rank)); }
Shape DTensorSpec::global_offset(int global_rank) const { return global_offset_at(checked_coordinate(global_rank)); }

Shape DTensorSpec::local_shape_at(const std::vector<int64_t>& coord) const {
  return dt::local_shape_at(mesh_.shape(), placements_, shape_, coord);
}

Shape local_shape_at(const Shape& mesh_shape, const Placements& placements, const Shape& shape,
                     const std::vector<int64_t>& coord) {
  Shape out(shape.size());
  for (size_t t = 0; t < shape.size(); ++t)
    out[t] = shard_extent(mesh_shape, placements, shape[t], int64_t(t), coord, int64_t(mesh_shape.size())).second;
  return out;
}

Shape DTensorSpec::global_offset_at(const std::vector<int64_t>& coord) const {
  Shape out(shape_.size());
  for (int64_t t = 0; t < rank(); ++t)
    out[size_t(t)] = shard_extent(mesh_.shape(), placements_, shape_[size_t(t)], t, coord, mesh_.ndim()).first;
  return out;
}

bool DTensorSpec::has_partial() const {
  for (const Placement& p : placements_)
    if (p.is_partial()) return true;
  return false;
}

std::string DTensorSpec::str() const {
  std::ostringstream os;
  os << placements_str(placements_) << " on " << mesh_.str() << ' ' << shape_str(shape_) << ' ' << dtype_name(dtype_);
  return os.str();
}

}  // namespace dt
