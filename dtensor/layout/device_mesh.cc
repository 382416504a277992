#include "dtensor/layout/device_mesh.h"

#include <algorithm>
#include <charconv>
#include <numeric>
#include <sstream>

#include "dtensor/core/error.h"

namespace dt {
namespace {

// Throws ValueError unless `shape` is a mesh shape within DeviceMesh's limits; returns its size.
int64_t checked_mesh_size(const Shape& shape) {
  if (shape.empty()) DT_THROW(ValueError) << "a mesh needs at least one dim";
  if (int64_t(shape.size()) > DeviceMesh::kMaxDims)
    DT_THROW(ValueError) << "mesh " << shape_str(shape) << " has " << shape.size() << " dims, more than the limit of "
                         << DeviceMesh::kMaxDims;
  int64_t n = 1;
  for (int64_t s : shape) {
    if (s <= 0) DT_THROW(ValueError) << "mesh sizes must be positive, got " << shape_str(shape);
    // n <= kMaxRanks and s < 2^63, so test against the quotient: no overflow.
    if (s > DeviceMesh::kMaxRanks / n)
      DT_THROW(ValueError) << "mesh " << shape_str(shape) << " has more than " << DeviceMesh::kMaxRanks
                           << " ranks, the limit";
    n *= s;
  }
  return n;
}

}  // namespace

DeviceMesh::DeviceMesh(Shape shape) : DeviceMesh(shape, [&] {
    std::vector<int> r(size_t(checked_mesh_size(shape)));
    std::iota(r.begin(), r.end(), 0);
    return r;
  }()) {}

DeviceMesh::DeviceMesh(Shape shape, std::vector<int> ranks) : shape_(std::move(shape)), ranks_(std::move(ranks)) {
  checked_mesh_size(shape_);
  if (int64_t(ranks_.size()) != numel(shape_))
    DT_THROW(ValueError) << "mesh shape " << shape_str(shape_) << " needs " << numel(shape_)
                         << " ranks, got " << ranks_.size();
  int max_rank = 0;
  for (int r : ranks_) {
    if (r < 0) DT_THROW(ValueError) << "negative rank " << r << " in mesh";
    if (r >= kMaxRanks) DT_THROW(ValueError) << "rank " << r << " in mesh is not below the limit of " << kMaxRanks;
    max_rank = std::max(max_rank, r);
  }
  index_of_rank_.assign(size_t(max_rank) + 1, -1);
  for (size_t i = 0; i < ranks_.size(); ++i) {
    int64_t& slot = index_of_rank_[size_t(ranks_[i])];
    if (slot >= 0) DT_THROW(ValueError) << "duplicate rank " << ranks_[i] << " in mesh " << shape_str(shape_);
    slot = int64_t(i);
  }
}

DeviceMesh DeviceMesh::parse(std::string_view text) {
  Shape shape;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('x', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view part = text.substr(pos, end - pos);
    int64_t v = 0;
    auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || p != part.data() + part.size() || v <= 0)
      DT_THROW(ValueError) << "bad mesh '" << text << "': expected positive sizes joined by 'x' (e.g. 2x4)";
    shape.push_back(v);
    pos = end + 1;
  }
  return DeviceMesh(shape);
}

int64_t DeviceMesh::checked_mesh_dim(int64_t mesh_dim) const {
  if (mesh_dim < 0 || mesh_dim >= ndim())
    DT_THROW(DimError) << "mesh dim " << mesh_dim << " out of range for mesh of " << ndim() << " dims";
  return mesh_dim;
}

int64_t DeviceMesh::size(int64_t mesh_dim) const { return shape_[size_t(checked_mesh_dim(mesh_dim))]; }

int64_t DeviceMesh::flat_index(int global_rank) const {
  if (global_rank < 0 || size_t(global_rank) >= index_of_rank_.size()) return -1;
  return index_of_rank_[size_t(global_rank)];
}

std::optional<std::vector<int64_t>> DeviceMesh::coordinate(int global_rank) const {
  int64_t flat = flat_index(global_rank);
  if (flat < 0) return std::nullopt;
  std::vector<int64_t> coord(shape_.size());
  for (size_t d = shape_.size(); d-- > 0;) {
    coord[d] = flat % shape_[d];
    flat /= shape_[d];
  }
  return coord;
}

int DeviceMesh::rank_at(const std::vector<int64_t>& coordinate) const {
  DT_CHECK(coordinate.size() == shape_.size()) << coordinate.size() << " vs " << shape_.size();
  int64_t flat = 0;
  for (size_t d = 0; d < shape_.size(); ++d) {
    DT_CHECK(coordinate[d] >= 0 && coordinate[d] < shape_[d]) << "coordinate " << coordinate[d] << " dim " << d;
    flat = flat * shape_[d] + coordinate[d];
  }
  return ranks_[size_t(flat)];
}

std::vector<int> DeviceMesh::group_ranks(int64_t mesh_dim, int global_rank) const {
  checked_mesh_dim(mesh_dim);
  auto coord = coordinate(global_rank);
  if (!coord) DT_THROW(ValueError) << "rank " << global_rank << " is not in mesh " << str();
  std::vector<int> out;
  out.reserve(size_t(shape_[size_t(mesh_dim)]));
  for (int64_t i = 0; i < shape_[size_t(mesh_dim)]; ++i) {
    (*coord)[size_t(mesh_dim)] = i;
    out.push_back(rank_at(*coord));
  }
  return out;
}

DeviceMesh DeviceMesh::sub_mesh(int64_t mesh_dim, int64_t index) const {
  checked_mesh_dim(mesh_dim);
  if (index < 0 || index >= size(mesh_dim))
    DT_THROW(ValueError) << "index " << index << " is outside dim " << mesh_dim << " of mesh " << str();
  Shape shape;
  for (int64_t m = 0; m < ndim(); ++m)
    if (m != mesh_dim) shape.push_back(shape_[size_t(m)]);
  if (shape.empty()) shape = {1};
  std::vector<int> members;
  for (int r : ranks_)
    if ((*coordinate(r))[size_t(mesh_dim)] == index) members.push_back(r);
  return DeviceMesh(shape, members);
}

std::vector<int> DeviceMesh::flat_group_ranks(uint32_t dims_mask, int global_rank) const {
  if (dims_mask >> ndim() != 0)
    DT_THROW(ValueError) << "flattened group mask " << dims_mask << " names a dim outside mesh " << str();
  auto coord = coordinate(global_rank);
  if (!coord) DT_THROW(ValueError) << "rank " << global_rank << " is not in mesh " << str();
  std::vector<int64_t> dims;
  int64_t count = 1;
  for (int64_t m = 0; m < ndim(); ++m)
    if (dims_mask >> m & 1u) {
      dims.push_back(m);
      count *= shape_[size_t(m)];
    }
  std::vector<int> out;
  out.reserve(size_t(count));
  for (int64_t k = 0; k < count; ++k) {
    // Decode k into the coordinates of `dims`, the last dim fastest.
    int64_t rest = k;
    for (size_t j = dims.size(); j-- > 0;) {
      (*coord)[size_t(dims[j])] = rest % shape_[size_t(dims[j])];
      rest /= shape_[size_t(dims[j])];
    }
    out.push_back(rank_at(*coord));
  }
  return out;
}

int64_t DeviceMesh::flat_group_index(uint32_t dims_mask, const std::vector<int64_t>& coordinate) const {
  int64_t index = 0;
  for (int64_t m = 0; m < ndim(); ++m)
    if (dims_mask >> m & 1u) index = index * shape_[size_t(m)] + coordinate[size_t(m)];
  return index;
}

std::vector<std::vector<int>> DeviceMesh::all_groups(int64_t mesh_dim) const {
  checked_mesh_dim(mesh_dim);
  std::vector<std::vector<int>> out;
  for (int r : ranks_) {
    if ((*coordinate(r))[size_t(mesh_dim)] == 0) out.push_back(group_ranks(mesh_dim, r));
  }
  return out;
}

void DeviceMesh::check_fits(int world_size) const {
  int max_rank = *std::max_element(ranks_.begin(), ranks_.end());
  if (max_rank >= world_size)
    DT_THROW(ValueError) << "mesh " << str() << " needs rank " << max_rank << " but the world has "
                         << world_size << " ranks";
}

std::string DeviceMesh::str() const {
  std::ostringstream os;
  for (size_t i = 0; i < shape_.size(); ++i) os << (i ? "x" : "") << shape_[i];
  bool identity = true;
  for (size_t i = 0; i < ranks_.size(); ++i) identity &= ranks_[i] == int(i);
  if (!identity) {
    os << '[';
    for (size_t i = 0; i < ranks_.size(); ++i) os << (i ? "," : "") << ranks_[i];
    os << ']';
  }
  return os.str();
}

}  // namespace dt
