#include "dtensor/redistribute/cross_mesh.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "dtensor/core/error.h"

namespace dt {
namespace {

using Box = std::pair<std::vector<int64_t>, std::vector<int64_t>>;  // begin, end

void check_layout(const DTensorSpec& spec, const char* side) {
  for (const Placement& p : spec.placements()) {
    if (p.is_partial())
      DT_THROW(ValueError) << "cross-mesh transfer " << side << " " << spec.str()
                           << " is partial: reduce it on its own mesh first";
    if (p.is_blocked())
      DT_THROW(ValueError) << "cross-mesh transfer " << side << " " << spec.str() << " has a blocked shard";
  }
}

Box box_of(const DTensorSpec& spec, int rank) {
  Shape offset = spec.global_offset(rank), shape = spec.local_shape(rank);
  Box b{std::vector<int64_t>(offset.begin(), offset.end()), std::vector<int64_t>(offset.begin(), offset.end())};
  for (size_t d = 0; d < shape.size(); ++d) b.second[d] += shape[d];
  return b;
}

// Returns the view of `t` (a rank's block starting at global `origin`) covering [begin, end).
Tensor box_view(const Tensor& t, const std::vector<int64_t>& origin, const std::vector<int64_t>& begin,
                const std::vector<int64_t>& end) {
  Tensor v = t;
  for (size_t d = 0; d < begin.size(); ++d) v = v.narrow(int64_t(d), begin[d] - origin[d], end[d] - begin[d]);
  return v;
}

std::string box_str(const CrossMeshPiece& p) {
  std::string s = "[";
  for (size_t d = 0; d < p.begin.size(); ++d) s += fmt::format("{}{}:{}", d ? ", " : "", p.begin[d], p.end[d]);
  return s + "]";
}

}  // namespace

int64_t CrossMeshPiece::numel() const {
  int64_t n = 1;
  for (size_t d = 0; d < begin.size(); ++d) n *= end[d] - begin[d];
  return n;
}

int64_t CrossMeshPlan::bytes() const {
  int64_t b = 0;
  for (const CrossMeshPiece& p : pieces) b += p.numel() * int64_t(itemsize(from.dtype()));
  return b;
}

std::string CrossMeshPlan::str() const {
  std::string s = fmt::format("{} -> {}: {} pieces, {} bytes", from.str(), to.str(), pieces.size(), bytes());
  for (size_t i = 0; i < pieces.size(); ++i)
    s += fmt::format("{}{}->{} {}", i ? ", " : " (", pieces[i].src, pieces[i].dst, box_str(pieces[i]));
  return pieces.empty() ? s : s + ")";
}

CrossMeshPlan plan_cross_mesh(const DTensorSpec& from, const DTensorSpec& to) {
  if (from.shape() != to.shape() || from.dtype() != to.dtype())
    DT_THROW(ValueError) << "cross-mesh transfer from " << from.str() << " to " << to.str()
                         << " changes the shape or dtype";
  check_layout(from, "source");
  check_layout(to, "destination");
  CrossMeshPlan plan{from, to, {}, {}};
  // Distinct source boxes and the ranks holding each (several when a source dim is replicated).
  std::map<Box, std::vector<int>> holders;
  for (int r : from.mesh().ranks()) holders[box_of(from, r)].push_back(r);
  const size_t ndim = from.shape().size();
  const auto& dst_ranks = to.mesh().ranks();
  for (size_t k = 0; k < dst_ranks.size(); ++k) {
    const int dst = dst_ranks[k];
    const Box want = box_of(to, dst);
    for (const auto& [have, ranks] : holders) {
      CrossMeshPiece piece{.src = -1, .dst = dst, .begin = std::vector<int64_t>(ndim), .end = std::vector<int64_t>(ndim)};
      bool empty = false;
      for (size_t d = 0; d < ndim; ++d) {
        piece.begin[d] = std::max(want.first[d], have.first[d]);
        piece.end[d] = std::min(want.second[d], have.second[d]);
        empty = empty || piece.begin[d] >= piece.end[d];
      }
      if (empty) continue;
      if (std::find(ranks.begin(), ranks.end(), dst) != ranks.end()) {
        piece.src = dst;
        plan.local.push_back(std::move(piece));
        continue;
      }
      piece.src = ranks[k % ranks.size()];
      plan.pieces.push_back(std::move(piece));
    }
  }
  std::sort(plan.pieces.begin(), plan.pieces.end(), [](const CrossMeshPiece& a, const CrossMeshPiece& b) {
    return std::tie(a.src, a.dst, a.begin) < std::tie(b.src, b.dst, b.begin);
  });
  return plan;
}

CrossMeshResult execute_cross_mesh(const CrossMeshPlan& plan, const Tensor& local, ProcessGroup& world) {
  const std::vector<int>& world_ranks = world.global_ranks();
  const int me = world_ranks[size_t(world.rank())];
  auto index_of = [&](int global) {
    auto it = std::find(world_ranks.begin(), world_ranks.end(), global);
    if (it == world_ranks.end()) DT_THROW(ValueError) << "cross-mesh transfer: rank " << global << " is not in the world group";
    return int(it - world_ranks.begin());
  };
  const bool is_src = plan.from.mesh().contains(me), is_dst = plan.to.mesh().contains(me);
  const DType dtype = plan.from.dtype();
  std::vector<int64_t> src_origin, dst_origin;
  if (is_src) {
    if (local.shape() != plan.from.local_shape(me) || local.dtype() != dtype)
      DT_THROW(ShapeError) << "cross-mesh transfer: rank " << me << " holds " << local.str() << " but "
                           << plan.from.str() << " gives it " << shape_str(plan.from.local_shape(me));
    Shape o = plan.from.global_offset(me);
    src_origin.assign(o.begin(), o.end());
  }
  CrossMeshResult result;
  if (is_dst) {
    result.local = Tensor::zeros(plan.to.local_shape(me), dtype);
    Shape o = plan.to.global_offset(me);
    dst_origin.assign(o.begin(), o.end());
  }
  for (const CrossMeshPiece& p : plan.local)
    if (p.dst == me) box_view(result.local, dst_origin, p.begin, p.end).copy_(box_view(local, src_origin, p.begin, p.end));
  // Issue in the plan's global order (file comment), then wait in the same order.
  struct Pending {
    WorkPtr work;
    Tensor buffer;
    const CrossMeshPiece* recv = nullptr;
  };
  std::vector<Pending> pending;
  const size_t elem = itemsize(dtype);
  for (const CrossMeshPiece& p : plan.pieces) {
    if (p.src == me) {
      Tensor buf = box_view(local, src_origin, p.begin, p.end).contiguous();
      pending.push_back({world.send(buf.raw_data(), size_t(buf.numel()), dtype, index_of(p.dst)), buf, nullptr});
      result.bytes_sent += buf.numel() * int64_t(elem);
    } else if (p.dst == me) {
      Shape shape;
      for (size_t d = 0; d < p.begin.size(); ++d) shape.push_back(p.end[d] - p.begin[d]);
      Tensor buf = Tensor::uninitialized(shape, dtype);
      pending.push_back({world.recv(buf.raw_data(), size_t(buf.numel()), dtype, index_of(p.src)), buf, &p});
      result.bytes_received += buf.numel() * int64_t(elem);
    }
  }
  for (Pending& q : pending) {
    q.work->wait();
    if (q.recv) box_view(result.local, dst_origin, q.recv->begin, q.recv->end).copy_(q.buffer);
  }
  return result;
}

}  // namespace dt
