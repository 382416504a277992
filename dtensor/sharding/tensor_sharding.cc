#include "dtensor/sharding/tensor_sharding.h"

#include <algorithm>

#include "dtensor/core/error.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/layout/dtensor_spec.h"

namespace dt::sharding {
namespace {

std::vector<int64_t> coordinate_of(const DeviceMesh& mesh, int rank) {
  auto c = mesh.coordinate(rank);
  if (!c) DT_THROW(ValueError) << "rank " << rank << " is not in mesh " << mesh.str();
  return *c;
}

TensorMap shard_values(const std::vector<ir::Value*>& values, const Sharding& s, const TensorMap& full, int rank,
                       bool required) {
  TensorMap out;
  for (const ir::Value* v : values) {
    auto it = full.find(v->name);
    if (it == full.end()) {
      if (required) DT_THROW(IoError) << "no tensor named " << v->name << " to shard";
      continue;
    }
    if (it->second.shape() != v->type.shape || it->second.dtype() != v->type.dtype)
      DT_THROW(IoError) << "tensor " << v->name << " is " << it->second.str() << " but the model declares "
                        << ir::type_str(v->type);
    out[v->name] = shard_tensor(it->second, s.mesh, s.values[size_t(v->id)], rank);
  }
  return out;
}

// A blocked shard S(d,blocks=b) of [.., L, ..] is the plain S(d+1) of [.., b, L/b, ..]: returns the
// mesh dim of the first blocked placement (-1: none) and fills the expanded shape and placements.
int64_t expand_blocked(const Shape& shape, const Placements& placements, Shape& shape2, Placements& placements2) {
  Placements ps = normalize_placements(placements, int64_t(placements.size()), int64_t(shape.size()));
  for (size_t m = 0; m < ps.size(); ++m) {
    if (!ps[m].is_blocked()) continue;
    check_blocks_divide(ps, shape);
    const int64_t d = ps[m].dim(), b = ps[m].blocks();
    shape2 = shape;
    shape2[size_t(d)] = shape[size_t(d)] / b;
    shape2.insert(shape2.begin() + d, b);
    placements2 = ps;
    for (Placement& p : placements2)
      if (p.is_shard() && p.dim() > d) p = p.with_dim(p.dim() + 1);
    placements2[m] = Placement::shard(d + 1);
    return int64_t(m);
  }
  return -1;
}

}  // namespace

Tensor shard_tensor(const Tensor& full, const DeviceMesh& mesh, const Placements& placements, int rank) {
  Shape shape2;
  Placements placements2;
  if (int64_t m = expand_blocked(full.shape(), placements, shape2, placements2); m >= 0) {
    const int64_t d = placements2[size_t(m)].dim() - 1;
    Tensor local = shard_tensor(full.contiguous().view(shape2), mesh, placements2, rank).contiguous();
    Shape back = local.shape();
    back[size_t(d)] *= back[size_t(d) + 1];
    back.erase(back.begin() + d + 1);
    return local.view(back);
  }
  const std::vector<int64_t> coord = coordinate_of(mesh, rank);
  DTensorSpec spec(mesh, placements, full.shape(), full.dtype());
  const Shape off = spec.global_offset_at(coord), len = spec.local_shape_at(coord);
  Tensor t = full;
  for (size_t d = 0; d < len.size(); ++d)
    if (len[d] != full.shape()[d]) t = t.narrow(int64_t(d), off[d], len[d]);
  for (size_t m = 0; m < placements.size(); ++m) {
    const Placement& p = spec.placements()[m];
    if (p.is_partial() && p.op() == ReduceOp::sum && coord[m] != 0) return Tensor::zeros(t.shape(), t.dtype());
  }
  return t;
}

Tensor assemble_tensor(const std::vector<Tensor>& locals, const DeviceMesh& mesh, const Placements& placements,
                       const Shape& global_shape) {
  DT_CHECK(int64_t(locals.size()) >= mesh.size()) << locals.size() << " locals for mesh " << mesh.str();
  Shape shape2;
  Placements placements2;
  if (int64_t m = expand_blocked(global_shape, placements, shape2, placements2); m >= 0) {
    const int64_t d = placements2[size_t(m)].dim() - 1, b = shape2[size_t(d)];
    std::vector<Tensor> split(locals.size());
    for (int rank : mesh.ranks()) {
      const Tensor& l = locals[size_t(rank)];
      Shape s2 = l.shape();
      if (d >= int64_t(s2.size()) || s2[size_t(d)] % b != 0)
        DT_THROW(ShapeError) << "rank " << rank << " holds " << shape_str(s2) << " but " << placements_str(placements)
                             << " of " << shape_str(global_shape) << " needs " << b << " equal blocks";
      s2[size_t(d)] /= b;
      s2.insert(s2.begin() + d, b);
      split[size_t(rank)] = l.contiguous().view(s2);
    }
    return assemble_tensor(split, mesh, placements2, shape2).view(global_shape);
  }
  const DType dtype = locals[size_t(mesh.ranks()[0])].dtype();
  DTensorSpec spec(mesh, placements, global_shape, dtype);
  // Accumulate partial sums in f64-free form: add pieces of partial coordinates, copy the rest once.
  Tensor out = Tensor::zeros(global_shape, dtype);
  for (int rank : mesh.ranks()) {
    const std::vector<int64_t> coord = *mesh.coordinate(rank);
    bool counts = true;  // replicated mesh dims: only group index 0 contributes
    for (size_t m = 0; m < placements.size(); ++m)
      if (spec.placements()[m].is_replicate() && coord[m] != 0) counts = false;
    if (!counts) continue;
    const Tensor& local = locals[size_t(rank)];
    const Shape off = spec.global_offset_at(coord), len = spec.local_shape_at(coord);
    if (local.shape() != len)
      DT_THROW(ShapeError) << "rank " << rank << " holds " << shape_str(local.shape()) << " but "
                           << placements_str(placements) << " of " << shape_str(global_shape) << " needs "
                           << shape_str(len);
    Tensor region = out;
    for (size_t d = 0; d < len.size(); ++d) region = region.narrow(int64_t(d), off[d], len[d]);
    if (spec.has_partial()) region.copy_(dt::add(region, local));
    else region.copy_(local);
  }
  return out;
}

TensorMap shard_weights(const ir::Graph& graph, const Sharding& sharding, const TensorMap& full, int rank) {
  return shard_values(graph.params(), sharding, full, rank, /*required=*/true);
}

TensorMap shard_inputs(const ir::Graph& graph, const Sharding& sharding, const TensorMap& full, int rank) {
  return shard_values(graph.inputs(), sharding, full, rank, /*required=*/true);
}

TensorMap assemble_checkpoint(const io::ShardedCheckpoint& ckpt) {
  const std::vector<int>& ranks = ckpt.mesh.ranks();
  if (ckpt.local.size() != ranks.size())
    DT_THROW(IoError) << "a checkpoint of mesh " << ckpt.mesh.str() << " holds " << ckpt.local.size() << " ranks' shards";
  int max_rank = 0;
  for (int r : ranks) max_rank = std::max(max_rank, r);
  TensorMap full;
  for (const auto& [name, text] : ckpt.placements) {
    auto shape = ckpt.shapes.find(name);
    if (shape == ckpt.shapes.end()) DT_THROW(IoError) << "the checkpoint records no full shape for " << name;
    // A pipeline stage's tensor: on its sub-mesh's ranks only.
    auto sub = ckpt.sub_meshes.find(name);
    const DeviceMesh mesh = sub == ckpt.sub_meshes.end() ? ckpt.mesh : ckpt.mesh.sub_mesh(sub->second.dim, sub->second.index);
    std::vector<Tensor> locals(size_t(max_rank) + 1);  // assemble_tensor indexes by global rank
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (!mesh.contains(ranks[i])) continue;
      auto t = ckpt.local[i].find(name);
      if (t == ckpt.local[i].end()) DT_THROW(IoError) << "rank " << ranks[i] << " of the checkpoint holds no " << name;
      locals[size_t(ranks[i])] = t->second;
    }
    const Placements placements = parse_placements(text);
    if (int64_t(placements.size()) != mesh.ndim())
      DT_THROW(IoError) << "the checkpoint records " << placements.size() << " placements for " << name << " on mesh "
                        << mesh.str();
    full[name] = assemble_tensor(locals, mesh, placements, shape->second);
  }
  return full;
}

}  // namespace dt::sharding
