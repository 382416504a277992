#include "dtensor/redistribute/executor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "dtensor/comm/collectives.h"
#include "dtensor/comm/reduce_kernel.h"
#include "dtensor/core/error.h"
#include "dtensor/layout/dtensor_spec.h"

namespace dt {

namespace {

// Returns x with dim t moved to the front (a view).
Tensor to_front(const Tensor& x, int64_t t) {
  if (t == 0) return x;
  std::vector<int64_t> perm{t};
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != t) perm.push_back(d);
  return x.permute(perm);
}

// Returns y (dim t at the front) with dim t moved back to its place, contiguous.
Tensor from_front(const Tensor& y, int64_t t) {
  if (t == 0) return y.contiguous();
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < y.dim(); ++d) perm.push_back(d == t ? 0 : d < t ? d + 1 : d);
  return y.permute(perm).contiguous();
}

// Returns the shape of x with dim t moved to the front and sized `rows`.
Shape front_shape(const Shape& shape, int64_t t, int64_t rows) {
  Shape s{rows};
  for (size_t d = 0; d < shape.size(); ++d)
    if (int64_t(d) != t) s.push_back(shape[d]);
  return s;
}

Shape with_dim(Shape s, int64_t d, int64_t v) {
  s[size_t(d)] = v;
  return s;
}

// Fills t with the identity of op (comm/reduce_kernel.h); fresh tensors already hold sum's and
// avg's zeros. Typed, so that integer limits stay exact.
void fill_identity(Tensor& t, ReduceOp op) {
  if (op == ReduceOp::sum || op == ReduceOp::avg || t.numel() == 0) return;  // zeros already
  DT_DISPATCH(t.dtype(), {
    T* p = t.data<T>();
    std::fill(p, p + t.numel(), identity_of<T>(op));
  });
}

// The state of one rank while the plan runs.
struct Run {
  const RedistributePlan& plan;
  const MeshGroups& groups;
  const Tensor& input;
  Placements state;

  int64_t index(int64_t m) const { return groups.coordinate()[size_t(m)]; }
  int64_t group_size(int64_t m) const { return plan.mesh_shape[size_t(m)]; }
  // Returns the extent of tensor dim t on this rank before mesh dim m splits it.
  int64_t parent_extent(int64_t t, int64_t m) const {
    return shard_extent(plan.mesh_shape, state, plan.shape[size_t(t)], t, groups.coordinate(), m).second;
  }

  // The group a step runs on: its mesh dim's, or the flattened group of its mesh dims.
  struct Member {
    ProcessGroup& group;
    int64_t n, i;
  };
  Member member(const RedistributeStep& s) const {
    if (!s.flattened()) return {groups.group(s.mesh_dim), group_size(s.mesh_dim), index(s.mesh_dim)};
    ProcessGroup& g = groups.flat_group(s.flat_dims);
    return {g, int64_t(g.size()), groups.mesh().flat_group_index(s.flat_dims, groups.coordinate())};
  }

  // S(t) -> R over `g`, whose members hold the pieces of this rank's extent `parent` of t (the
  // extent before mesh dim m splits it) in member order.
  Tensor all_gather(const Tensor& x, const Member& g, int64_t m, int64_t t) {
    const int64_t n = g.n, i = g.i, parent = parent_extent(t, m);
    const int64_t c = chunk_size(parent, n), len = x.size(t);
    DT_CHECK(len == chunk_length(parent, n, i)) << len << " rows, parent " << parent << " n " << n << " index " << i;
    Shape out_shape = front_shape(x.shape(), t, n * c);
    if (numel(out_shape) == 0) return Tensor::empty(with_dim(x.shape(), t, parent), x.dtype());
    Tensor send;
    if (t == 0 && len == c && x.is_contiguous()) {
      send = x;
    } else {
      send = Tensor::uninitialized(front_shape(x.shape(), t, c), x.dtype());
      if (len > 0) send.narrow(0, 0, len).copy_(to_front(x, t));
      if (c > len) send.narrow(0, len, c - len).fill_(0);  // deterministic padding
    }
    Tensor out = Tensor::uninitialized(out_shape, x.dtype());
    all_gather_into_tensor(g.group, out, send)->wait();
    return from_front(out.narrow(0, 0, parent), t);
  }

  Tensor reduce_scatter(const Tensor& x, const Member& g, int64_t t, ReduceOp op) {
    const int64_t n = g.n, i = g.i, parent = x.size(t);
    const int64_t c = chunk_size(parent, n), len = chunk_length(parent, n, i);
    Shape in_shape = front_shape(x.shape(), t, n * c);
    if (numel(in_shape) == 0) return Tensor::empty(with_dim(x.shape(), t, len), x.dtype());
    Tensor send;
    if (t == 0 && parent == n * c && x.is_contiguous()) {
      send = x;
    } else {
      send = Tensor::uninitialized(in_shape, x.dtype());
      send.narrow(0, 0, parent).copy_(to_front(x, t));
      if (n * c > parent) send.narrow(0, parent, n * c - parent).fill_(0);  // deterministic padding
    }
    Tensor out = Tensor::uninitialized(front_shape(x.shape(), t, c), x.dtype());
    reduce_scatter_tensor(g.group, out, send, op)->wait();
    return from_front(out.narrow(0, 0, len), t);
  }

  Tensor all_reduce(const Tensor& x, const Member& g, ReduceOp op) {
    Tensor y = (x.is_contiguous() && !x.shares_storage_with(input)) ? x : x.clone();
    if (y.numel() > 0) all_reduce_(g.group, y, op)->wait();
    return y;
  }

  // S(t) -> S(u): rank i sends piece j of u (its t rows) to rank j and concatenates the t pieces
  // it receives in rank order. Every member of the group knows every split size, so no padding.
  Tensor all_to_all(const Tensor& x, int64_t m, int64_t t, int64_t u) {
    const int64_t n = group_size(m), i = index(m), parent_t = parent_extent(t, m), lu = x.size(u);
    const int64_t my_u = chunk_length(lu, n, i);
    Shape result_shape = with_dim(with_dim(x.shape(), t, parent_t), u, my_u);
    int64_t other = 1;  // product of the dims other than t and u
    for (int64_t d = 0; d < x.dim(); ++d)
      if (d != t && d != u) other *= x.size(d);
    // Nothing moves when the unsharded block is empty (the same on every member of the group).
    if (parent_t * lu * other == 0) return Tensor::empty(result_shape, x.dtype());
    std::vector<int64_t> in_splits(static_cast<size_t>(n)), out_splits(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      in_splits[size_t(j)] = x.size(t) * chunk_length(lu, n, j) * other;
      out_splits[size_t(j)] = chunk_length(parent_t, n, j) * my_u * other;
    }
    Tensor send;
    if (u == 0 && x.is_contiguous()) {
      send = x.reshape({x.numel()});
    } else {
      send = Tensor::uninitialized({x.numel()}, x.dtype());
      int64_t pos = 0;
      for (int64_t j = 0; j < n; ++j) {
        Tensor piece = x.narrow(u, chunk_offset(lu, n, j), chunk_length(lu, n, j));
        if (piece.numel() > 0) send.narrow(0, pos, piece.numel()).view(piece.shape()).copy_(piece);
        pos += piece.numel();
      }
    }
    Tensor out = Tensor::uninitialized({numel(result_shape)}, x.dtype());
    all_to_all_single(groups.group(m), out, send, out_splits, in_splits)->wait();
    if (t == 0) return out.view(result_shape);
    Tensor result = Tensor::uninitialized(result_shape, x.dtype());
    int64_t pos = 0;
    for (int64_t j = 0; j < n; ++j) {
      Shape seg = with_dim(result_shape, t, chunk_length(parent_t, n, j));
      if (numel(seg) > 0)
        result.narrow(t, chunk_offset(parent_t, n, j), seg[size_t(t)]).copy_(out.narrow(0, pos, numel(seg)).view(seg));
      pos += numel(seg);
    }
    return result;
  }

  // R -> P(sum|prod): group index 0 keeps the value, the others hold the op's identity. S(t) ->
  // P(op): the own chunk inside the unsharded extent, the rest the op's identity.
  Tensor zero(const Tensor& x, int64_t m, const Placement& from, ReduceOp op) {
    const int64_t n = group_size(m), i = index(m);
    if (from.is_replicate()) {
      if (i == 0) return x;
      Tensor y = Tensor::zeros(x.shape(), x.dtype());
      fill_identity(y, op);
      return y;
    }
    const int64_t t = from.dim(), parent = parent_extent(t, m);
    Tensor y = Tensor::zeros(with_dim(x.shape(), t, parent), x.dtype());
    fill_identity(y, op);
    if (x.numel() > 0) y.narrow(t, chunk_offset(parent, n, i), x.size(t)).copy_(x);
    return y;
  }

  Tensor run(const RedistributeStep& s, const Tensor& x) {
    const int64_t m = s.mesh_dim;
    switch (s.kind) {
      case StepKind::all_gather: return all_gather(x, member(s), m, s.src.dim());
      case StepKind::reduce_scatter: return reduce_scatter(x, member(s), s.dst.dim(), s.src.op());
      case StepKind::all_reduce: return all_reduce(x, member(s), s.src.op());
      case StepKind::all_to_all: return all_to_all(x, m, s.src.dim(), s.dst.dim());
      case StepKind::chunk: {
        const int64_t n = group_size(m), i = index(m), t = s.dst.dim(), len = x.size(t);
        return x.narrow(t, chunk_offset(len, n, i), chunk_length(len, n, i));
      }
      case StepKind::zero: return zero(x, m, s.src, s.dst.op());
      case StepKind::keep: return x;
    }
    DT_CHECK(false) << "unknown step kind";
    return x;
  }
};

}  // namespace

Tensor execute_plan(const RedistributePlan& plan, const Tensor& local, const MeshGroups& groups) {
  if (groups.mesh().shape() != plan.mesh_shape)
    DT_THROW(ValueError) << "plan for mesh " << shape_str(plan.mesh_shape) << " run on mesh " << groups.mesh().str();
  Shape expected = local_shape_at(plan.mesh_shape, plan.src, plan.shape, groups.coordinate());
  if (local.shape() != expected)
    DT_THROW(ShapeError) << "local tensor of shape " << shape_str(local.shape()) << " on rank " << groups.global_rank()
                         << " does not match " << placements_str(plan.src) << " of " << shape_str(plan.shape)
                         << " (expected " << shape_str(expected) << ")";
  if (local.dtype() != plan.dtype)
    DT_THROW(DTypeError) << "local tensor of dtype " << dtype_name(local.dtype()) << " for a plan of dtype "
                         << dtype_name(plan.dtype);
  if (plan.steps.empty()) return local;
  Run run{plan, groups, local, plan.src};
  Tensor x = local;
  for (const RedistributeStep& s : plan.steps) {
    DT_CHECK(run.state[size_t(s.mesh_dim)] == s.src) << "step expects " << s.src.str();
    DT_CHECK(!s.flattened() || s.kind == StepKind::all_gather || s.kind == StepKind::all_reduce ||
             s.kind == StepKind::reduce_scatter)
        << "flattened " << step_kind_name(s.kind);
    x = run.run(s, x);
    for (int64_t m : s.mesh_dims()) run.state[size_t(m)] = s.dst;
  }
  DT_CHECK(run.state == plan.dst) << placements_str(run.state);
  Shape final_shape = local_shape_at(plan.mesh_shape, plan.dst, plan.shape, groups.coordinate());
  DT_CHECK(x.shape() == final_shape) << shape_str(x.shape()) << " vs " << shape_str(final_shape);
  return x.shares_storage_with(local) ? x.clone() : x.contiguous();
}

}  // namespace dt
