#include "dtensor/redistribute/transition_rules.h"

#include <algorithm>

#include "dtensor/core/error.h"
#include "dtensor/layout/dtensor_spec.h"

namespace dt {

namespace {

// Returns the lowest mesh dim of a flattened step's mask (at least two dims, all below ndim).
int64_t first_flat_dim(uint32_t dims_mask, int64_t ndim) {
  DT_CHECK(__builtin_popcount(dims_mask) >= 2 && (dims_mask >> ndim) == 0) << dims_mask;
  return __builtin_ctz(dims_mask);
}

}  // namespace

TransitionRules::TransitionRules(const Shape& mesh_shape, const Placement* state, const Shape& shape, size_t itemsize)
    : state_(state),
      itemsize_(itemsize),
      ndim_(int64_t(mesh_shape.size())),
      rank_(int64_t(shape.size())) {
  DT_CHECK(rank_ <= kMaxPlanTensorRank && ndim_ <= kMaxPlanMeshDims) << rank_ << " " << ndim_;
  std::copy(mesh_shape.begin(), mesh_shape.end(), mesh_.begin());
  std::copy(shape.begin(), shape.end(), shape_.begin());
  for (int64_t t = 0; t < rank_; ++t) {
    loc_[size_t(t)] = shape_[size_t(t)];
    innermost_[size_t(t)] = -1;
  }
  for (int64_t m = 0; m < ndim_; ++m) {
    const Placement& p = state_[m];
    if (!p.is_shard() || mesh_[size_t(m)] == 1) continue;
    int64_t t = p.dim();
    // Nested ceilings commute (ceil(ceil(L/a)/b) = ceil(L/(ab))), so the split order does not
    // matter for the extent at coordinate 0; it does for which split is innermost.
    loc_[size_t(t)] = chunk_size(loc_[size_t(t)], mesh_[size_t(m)]);
    const int64_t in = innermost_[size_t(t)];
    if (in < 0 || split_key(p, m) > split_key(state_[in], in)) innermost_[size_t(t)] = m;
  }
}

int64_t TransitionRules::parent_extent(int64_t t, int64_t m) const {
  int64_t len = shape_[size_t(t)];
  const int64_t key = split_key(state_[m], m);
  for (int64_t k = 0; k < ndim_; ++k)
    if (state_[k].is_shard(t) && mesh_[size_t(k)] > 1 && split_key(state_[k], k) < key)
      len = chunk_size(len, mesh_[size_t(k)]);
  return len;
}

int64_t TransitionRules::rest(int64_t a, int64_t b) const {
  int64_t p = 1;
  for (int64_t t = 0; t < rank_; ++t)
    if (t != a && t != b) p *= loc_[size_t(t)];
  return p;
}

bool TransitionRules::partial_allowed(int64_t m, ReduceOp op) const {
  for (int64_t k = m + 1; k < ndim_; ++k)
    if (mesh_[size_t(k)] > 1 && state_[k].is_partial() && !partial_ops_commute(state_[k].op(), op)) return false;
  return true;
}

std::optional<Transition> TransitionRules::step(int64_t m, const Placement& to) const {
  const Placement& from = state_[m];
  DT_CHECK(from != to) << from.str();
  const int64_t n = mesh_[size_t(m)];
  const int64_t item = int64_t(itemsize_);
  if (from.is_partial() && to.is_partial()) return std::nullopt;
  if (n == 1) return Transition{StepKind::keep, 0};
  if (to.is_partial() && !partial_allowed(m, to.op())) return std::nullopt;
  if (from.is_partial() && !partial_allowed(m, from.op())) return std::nullopt;
  // A new shard on t must be the innermost split of t (split_key: strided shards split last).
  auto can_start_shard = [&](int64_t t) {
    const int64_t in = innermost_[size_t(t)];
    return in < 0 || split_key(to, m) > split_key(state_[in], in);
  };

  if (from.is_replicate()) {
    if (to.is_shard()) {
      if (!can_start_shard(to.dim())) return std::nullopt;
      return Transition{StepKind::chunk, 0};
    }
    const bool fill = to.op() == ReduceOp::sum || to.op() == ReduceOp::prod;
    return Transition{fill ? StepKind::zero : StepKind::keep, 0};
  }
  if (from.is_partial()) {
    if (to.is_replicate()) {
      int64_t s = rest(-1, -1) * item;
      return Transition{StepKind::all_reduce, 2 * (n - 1) * s / n};
    }
    int64_t t = to.dim();
    if (!can_start_shard(t)) return std::nullopt;
    int64_t c = chunk_size(loc_[size_t(t)], n);
    return Transition{StepKind::reduce_scatter, (n - 1) * c * rest(t, -1) * item};
  }
  // from S(t): only the innermost split of t can be undone or moved.
  int64_t t = from.dim();
  if (to.is_shard(t)) {
    // S(t) <-> SS(t): the same rows when no other mesh dim splits t (a relabel), else another
    // interleaving of the same pieces, reached through R.
    for (int64_t k = 0; k < ndim_; ++k)
      if (k != m && state_[k].is_shard(t) && mesh_[size_t(k)] > 1) return std::nullopt;
    return Transition{StepKind::keep, 0};
  }
  if (innermost_[size_t(t)] != m) return std::nullopt;
  int64_t parent = parent_extent(t, m);
  if (to.is_replicate()) {
    int64_t c = chunk_size(parent, n);
    return Transition{StepKind::all_gather, (n - 1) * c * rest(t, -1) * item};
  }
  if (to.is_partial()) {
    if (to.op() == ReduceOp::avg) return std::nullopt;
    return Transition{StepKind::zero, 0};
  }
  int64_t u = to.dim();
  if (!can_start_shard(u)) return std::nullopt;
  // Rank i keeps its own piece of u and sends the other pieces of its t-chunk: exact split sizes.
  int64_t lu = loc_[size_t(u)], worst = 0;
  for (int64_t i = 0; i < n; ++i) worst = std::max(worst, chunk_length(parent, n, i) * (lu - chunk_length(lu, n, i)));
  return Transition{StepKind::all_to_all, worst * rest(t, u) * item};
}

int64_t TransitionRules::uniform_group(uint32_t dims_mask) const {
  const Placement& p = state_[__builtin_ctz(dims_mask)];
  int64_t group = 1;
  for (uint32_t b = dims_mask; b; b &= b - 1) {
    const int64_t m = __builtin_ctz(b);
    if (state_[m] != p) return 0;
    group *= mesh_[size_t(m)];
  }
  return group;
}

std::optional<Transition> TransitionRules::flat_step(uint32_t dims_mask) const {
  const int64_t first = first_flat_dim(dims_mask, ndim_);
  for (uint32_t b = dims_mask; b; b &= b - 1)
    DT_CHECK(mesh_[size_t(__builtin_ctz(b))] > 1) << "mesh dim " << __builtin_ctz(b);
  const Placement& p = state_[first];
  const int64_t group = uniform_group(dims_mask);
  if (group == 0) return std::nullopt;
  const int64_t item = int64_t(itemsize_);
  if (p.is_partial()) {
    if (!partial_allowed(first, p.op())) return std::nullopt;
    for (int64_t k = first + 1; k < ndim_; ++k)  // a later partial outside the group must commute
      if (!(dims_mask >> k & 1u) && mesh_[size_t(k)] > 1 && state_[k].is_partial() &&
          !partial_ops_commute(state_[k].op(), p.op()))
        return std::nullopt;
    return Transition{StepKind::all_reduce, 2 * (group - 1) * rest(-1, -1) * item / group};
  }
  if (!p.is_shard() || p.is_strided()) return std::nullopt;
  // Gathering over the flattened group puts the pieces in its member order (lowest mesh dim
  // slowest), which is the nested split order when the dims are the innermost plain splits of t.
  // Even splits keep every member's piece the same size, so no padding or per-member sizes.
  const int64_t t = p.dim();
  int64_t all_splits = 1;
  for (int64_t k = 0; k < ndim_; ++k) {
    if (!state_[k].is_shard(t) || mesh_[size_t(k)] == 1) continue;
    if (state_[k].is_strided()) return std::nullopt;
    if (!(dims_mask >> k & 1u) && k > first) return std::nullopt;  // a split inside the group's
    all_splits *= mesh_[size_t(k)];
  }
  if (shape_[size_t(t)] % all_splits != 0) return std::nullopt;
  const int64_t piece = shape_[size_t(t)] / all_splits;
  return Transition{StepKind::all_gather, (group - 1) * piece * rest(t, -1) * item};
}

std::optional<Transition> TransitionRules::flat_reduce_scatter(uint32_t dims_mask, int64_t t) const {
  const int64_t first = first_flat_dim(dims_mask, ndim_);
  const Placement& p = state_[first];
  if (!p.is_partial()) return std::nullopt;
  const int64_t group = uniform_group(dims_mask);
  if (group == 0) return std::nullopt;
  // Every dim of the group is reduced at once: each must be reducible first (no later mesh dim
  // outside the group with a partial op that does not commute), as in flat_step.
  for (int64_t k = first + 1; k < ndim_; ++k)
    if (!(dims_mask >> k & 1u) && mesh_[size_t(k)] > 1 && state_[k].is_partial() &&
        !partial_ops_commute(state_[k].op(), p.op()))
      return std::nullopt;
  // The group's members take the chunks of t in member order (lowest mesh dim slowest), the nested
  // split order when t's existing splits are all plain and on mesh dims before the group.
  int64_t extent = shape_[size_t(t)];
  for (int64_t k = 0; k < ndim_; ++k) {
    if (!state_[k].is_shard(t) || mesh_[size_t(k)] == 1) continue;
    if (state_[k].is_strided() || k > first) return std::nullopt;
    if (extent % mesh_[size_t(k)] != 0) return std::nullopt;
    extent /= mesh_[size_t(k)];
  }
  if (extent % group != 0) return std::nullopt;
  return Transition{StepKind::reduce_scatter, (group - 1) * (extent / group) * rest(t, -1) * int64_t(itemsize_)};
}

}  // namespace dt
