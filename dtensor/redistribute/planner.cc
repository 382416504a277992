#include "dtensor/redistribute/planner.h"

#include <algorithm>
#include <queue>
#include <tuple>

#include "dtensor/core/error.h"

namespace dt {

namespace {

// A search label: the cost of the best known path to a state, compared lexicographically.
struct Label {
  double time_us = 0;
  int64_t bytes = 0;
  int32_t steps = 0;
  bool operator<(const Label& o) const {
    return std::tie(time_us, bytes, steps) < std::tie(o.time_us, o.bytes, o.steps);
  }
};

// How the search reached a state: the previous state and the step taken.
struct Edge {
  int64_t prev = -1;
  int32_t mesh_dim = 0;
  int32_t to_code = 0;
  StepKind kind = StepKind::keep;
  int64_t bytes = 0;
  double time_us = 0;
  uint32_t flat_dims = 0;  // a flattened step's mesh dims (redistribute_plan.h), 0 otherwise
};

constexpr int64_t kMaxStates = int64_t(1) << 20;

// Returns the placement code used by the cache key: R=0, P(op)=1+op, S(d)=6+d, SS(d)=6+16+d
// (16 = kMaxPlanTensorRank); -1 when d is out of range (the slow path then reports the error).
int code_of(const Placement& p, int64_t rank) {
  if (p.is_replicate()) return 0;
  if (p.is_partial()) return 1 + int(p.op());
  if (p.is_blocked()) return -1;  // never cached: only the identity plan exists for it
  int64_t d = p.dim() < 0 ? p.dim() + rank : p.dim();
  if (d < 0 || d >= rank || d >= kMaxPlanTensorRank) return -1;
  return 1 + kNumReduceOps + int(d) + (p.is_strided() ? int(kMaxPlanTensorRank) : 0);
}

void check_limits(const Shape& mesh_shape, const Shape& shape) {
  if (mesh_shape.empty() || int64_t(mesh_shape.size()) > kMaxPlanMeshDims)
    DT_THROW(ValueError) << "mesh of " << mesh_shape.size() << " dims: the planner supports 1 to "
                         << kMaxPlanMeshDims;
  for (int64_t s : mesh_shape)
    if (s <= 0) DT_THROW(ValueError) << "mesh sizes must be positive, got " << shape_str(mesh_shape);
  if (int64_t(shape.size()) > kMaxPlanTensorRank)
    DT_THROW(ValueError) << "tensor rank " << shape.size() << " exceeds the planner limit of " << kMaxPlanTensorRank;
  for (int64_t s : shape)
    if (s < 0) DT_THROW(ValueError) << "negative size in tensor shape " << shape_str(shape);
}

}  // namespace

bool RedistributePlanner::Key::operator==(const Key& o) const {
  return mesh_ndim == o.mesh_ndim && rank == o.rank && dtype == o.dtype && src == o.src && dst == o.dst &&
         mesh == o.mesh && shape == o.shape;
}

size_t RedistributePlanner::KeyHash::operator()(const Key& k) const {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t(k.mesh_ndim) << 16 | uint64_t(k.rank) << 8 | k.dtype);
  auto mix = [&h](uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
  };
  for (int i = 0; i < k.mesh_ndim; ++i) mix(uint64_t(k.mesh[size_t(i)]) << 16 | k.src[size_t(i)] << 8 | k.dst[size_t(i)]);
  for (int i = 0; i < k.rank; ++i) mix(uint64_t(k.shape[size_t(i)]));
  return size_t(h ^ (h >> 31));
}

std::shared_ptr<const RedistributePlan> RedistributePlanner::plan(const Shape& mesh_shape, const Placements& src,
                                                                  const Placements& dst, const Shape& shape,
                                                                  DType dtype) {
  const size_t ndim = mesh_shape.size(), rank = shape.size();
  // A blocked shard (a fused projection's layout) has no transitions: it only stays where it is.
  bool blocked = false;
  for (const Placements* ps : {&src, &dst})
    for (const Placement& p : *ps) blocked = blocked || p.is_blocked();
  if (blocked && src != dst) return std::make_shared<const RedistributePlan>(plan_around_blocks(mesh_shape, src, dst, shape, dtype));
  bool cacheable = ndim >= 1 && int64_t(ndim) <= kMaxPlanMeshDims && int64_t(rank) <= kMaxPlanTensorRank &&
                   src.size() == ndim && dst.size() == ndim;
  Key key;
  if (cacheable) {
    key.mesh_ndim = uint8_t(ndim);
    key.rank = uint8_t(rank);
    key.dtype = uint8_t(dtype);
    for (size_t m = 0; m < ndim && cacheable; ++m) {
      int a = code_of(src[m], int64_t(rank)), b = code_of(dst[m], int64_t(rank));
      cacheable = a >= 0 && b >= 0;
      key.src[m] = uint8_t(a);
      key.dst[m] = uint8_t(b);
      key.mesh[m] = mesh_shape[m];
    }
    for (size_t t = 0; t < rank; ++t) key.shape[t] = shape[t];
  }
  if (cacheable) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  auto plan = std::make_shared<const RedistributePlan>(plan_uncached(mesh_shape, src, dst, shape, dtype));
  if (cacheable) {
    std::lock_guard<std::mutex> lock(mu_);
    cache_.emplace(key, plan);
  }
  return plan;
}

std::shared_ptr<const RedistributePlan> RedistributePlanner::plan(const DTensorSpec& src, const DTensorSpec& dst) {
  if (src.mesh() != dst.mesh())
    DT_THROW(ValueError) << "cross-mesh redistribution is not supported: source mesh " << src.mesh().str()
                         << ", target mesh " << dst.mesh().str();
  if (src.shape() != dst.shape())
    DT_THROW(ValueError) << "cannot redistribute a tensor of shape " << shape_str(src.shape()) << " to shape "
                         << shape_str(dst.shape());
  if (src.dtype() != dst.dtype())
    DT_THROW(ValueError) << "cannot redistribute " << dtype_name(src.dtype()) << " to " << dtype_name(dst.dtype())
                         << " (cast first)";
  return plan(src.mesh().shape(), src.placements(), dst.placements(), src.shape(), src.dtype());
}

RedistributePlan RedistributePlanner::plan_around_blocks(const Shape& mesh_shape, const Placements& src,
                                                         const Placements& dst, const Shape& shape, DType dtype) const {
  auto refuse = [&](const char* why) {
    DT_THROW(ValueError) << "cannot redistribute " << placements_str(src) << " to " << placements_str(dst) << ": "
                         << why;
  };
  if (src.size() != mesh_shape.size() || dst.size() != mesh_shape.size())
    return plan_uncached(mesh_shape, src, dst, shape, dtype);  // reports the bad placement count
  // The blocked mesh dims become mesh dims of size 1 (R) and their tensor dims the local extent,
  // the same on every rank; the other mesh dims then move this rank's blocked piece as a whole.
  Shape sub_mesh = mesh_shape, sub_shape = shape;
  Placements sub_src = src, sub_dst = dst;
  uint32_t fixed = 0;
  for (size_t m = 0; m < mesh_shape.size(); ++m) {
    if (!src[m].is_blocked() && !dst[m].is_blocked()) continue;
    if (src[m] != dst[m]) refuse("a blocked shard is never moved");
    const Placement p = src[m].normalized(int64_t(shape.size()));
    const int64_t d = p.dim(), n = mesh_shape[m];
    if (shape[size_t(d)] % (p.blocks() * n) != 0) refuse("the blocks do not divide evenly over the mesh dim");
    sub_shape[size_t(d)] = shape[size_t(d)] / n;
    sub_mesh[m] = 1;
    sub_src[m] = sub_dst[m] = Placement::replicate();
    fixed |= 1u << d;
  }
  for (const Placements* ps : {&sub_src, &sub_dst})
    for (const Placement& p : *ps)
      if (p.is_shard() && (fixed >> p.normalized(int64_t(shape.size())).dim() & 1u))
        refuse("a blocked shard must be the only shard of its tensor dim");
  RedistributePlan plan = plan_uncached(sub_mesh, sub_src, sub_dst, sub_shape, dtype, fixed);
  RedistributePlan real = RedistributePlan::empty_for(mesh_shape, src, dst, shape, dtype);
  real.steps = std::move(plan.steps);
  real.total_bytes = plan.total_bytes;
  real.total_time_us = plan.total_time_us;
  return real;
}

RedistributePlan RedistributePlanner::plan_uncached(const Shape& mesh_shape, const Placements& src_in,
                                                    const Placements& dst_in, const Shape& shape,
                                                    DType dtype, uint32_t fixed_dims) const {
  check_limits(mesh_shape, shape);
  const int64_t ndim = int64_t(mesh_shape.size()), rank = int64_t(shape.size());
  RedistributePlan plan = RedistributePlan::empty_for(mesh_shape, src_in, dst_in, shape, dtype);
  const Placements& dst = plan.dst;
  for (int64_t m = 0; m < ndim; ++m) {
    const Placement &a = plan.src[size_t(m)], &b = dst[size_t(m)];
    if (a.is_partial() && b.is_partial() && a.op() != b.op())
      DT_THROW(ValueError) << "cannot redistribute " << a.str() << " to " << b.str() << " on mesh dim " << m
                           << ": partial ops differ (not a redistribution)";
  }
  const size_t item = itemsize(dtype);
  Placements state = plan.src;

  // Mesh dims of size 1 first (to non-partial targets) and last (to partial targets): their data
  // never changes, and this order keeps every intermediate state's partial ops commuting.
  auto relabel_trivial_dims = [&](bool partial_targets) {
    for (int64_t m = 0; m < ndim; ++m) {
      if (mesh_shape[size_t(m)] != 1 || state[size_t(m)] == dst[size_t(m)]) continue;
      if (dst[size_t(m)].is_partial() != partial_targets) continue;
      plan.steps.push_back({m, StepKind::keep, state[size_t(m)], dst[size_t(m)], 0, 0.0});
      state[size_t(m)] = dst[size_t(m)];
    }
  };
  relabel_trivial_dims(false);

  // Candidate placements of a searched mesh dim.
  std::vector<Placement> cand{Placement::replicate()};
  for (int64_t t = 0; t < rank; ++t)
    if (!(fixed_dims >> t & 1u)) cand.push_back(Placement::shard(t));
  // Strided shards only where the source or target has them (they exist for FSDP over TP).
  for (const Placements* ps : {&plan.src, &plan.dst})
    for (const Placement& p : *ps)
      if (p.is_strided() && std::find(cand.begin(), cand.end(), p) == cand.end()) cand.push_back(p);
  bool has_op[kNumReduceOps] = {true};
  for (const Placements* ps : {&plan.src, &plan.dst})
    for (const Placement& p : *ps)
      if (p.is_partial()) has_op[int(p.op())] = true;
  for (int o = 0; o < kNumReduceOps; ++o)
    if (has_op[o]) cand.push_back(Placement::partial(ReduceOp(o)));
  const int64_t K = int64_t(cand.size());
  auto code = [&](const Placement& p) -> int64_t {
    for (int64_t c = 0; c < K; ++c)
      if (cand[size_t(c)] == p) return c;
    DT_CHECK(false) << "placement " << p.str() << " is not a candidate";
    return -1;
  };

  std::vector<int64_t> dims;  // searched mesh dims (size > 1)
  for (int64_t m = 0; m < ndim; ++m)
    if (mesh_shape[size_t(m)] > 1) dims.push_back(m);
  int64_t num_states = 1;
  for (size_t k = 0; k < dims.size(); ++k) {
    num_states *= K;
    if (num_states > kMaxStates)
      DT_THROW(ValueError) << "redistribution search space too large: " << K << " placements on "
                           << dims.size() << " mesh dims";
  }
  auto encode = [&](const Placements& s) {
    int64_t id = 0;
    for (size_t k = dims.size(); k-- > 0;) id = id * K + code(s[size_t(dims[k])]);
    return id;
  };
  auto decode = [&](int64_t id, Placements& s) {
    for (size_t k = 0; k < dims.size(); ++k) {
      s[size_t(dims[k])] = cand[size_t(id % K)];
      id /= K;
    }
  };
  // Flattened steps (every dim of a subset to R at once) on meshes with few enough split dims
  // for MeshGroups to hold a group per subset.
  std::vector<uint32_t> flat_masks;
  if (int64_t(dims.size()) <= DeviceMesh::kMaxFlatDims) {
    for (uint32_t sub = 1; sub < (1u << dims.size()); ++sub) {
      if (__builtin_popcount(sub) < 2) continue;
      uint32_t mask = 0;
      for (size_t k = 0; k < dims.size(); ++k)
        if (sub >> k & 1u) mask |= 1u << dims[k];
      flat_masks.push_back(mask);
    }
  }
  Placements target = state;
  for (int64_t m : dims) target[size_t(m)] = dst[size_t(m)];
  const int64_t start = encode(state), goal = encode(target);

  std::vector<Label> best(static_cast<size_t>(num_states));
  std::vector<Edge> how(static_cast<size_t>(num_states));
  std::vector<uint8_t> seen(size_t(num_states), 0), done(size_t(num_states), 0);
  using Item = std::pair<Label, int64_t>;
  auto worse = [](const Item& a, const Item& b) { return b.first < a.first; };
  std::priority_queue<Item, std::vector<Item>, decltype(worse)> queue(worse);
  seen[size_t(start)] = 1;
  queue.push({Label{}, start});
  Placements cur = state;
  while (!queue.empty()) {
    // Named copies, not a structured binding: flat_edge below captures them, which clang before 16
    // refuses for structured bindings.
    const Label label = queue.top().first;
    const int64_t id = queue.top().second;
    queue.pop();
    if (done[size_t(id)]) continue;
    done[size_t(id)] = 1;
    if (id == goal) break;
    decode(id, cur);
    TransitionRules rules(mesh_shape, cur.data(), shape, item);
    int64_t stride = 1;
    for (size_t k = 0; k < dims.size(); ++k, stride *= K) {
      const int64_t m = dims[k];
      const int64_t here = (id / stride) % K;
      for (int64_t c = 0; c < K; ++c) {
        if (c == here) continue;
        auto tr = rules.step(m, cand[size_t(c)]);
        if (!tr) continue;
        double t = step_time_us(model_, mesh_shape, 1u << m, tr->kind, tr->bytes);
        Label next{label.time_us + t, label.bytes + tr->bytes, label.steps + 1};
        int64_t nid = id + (c - here) * stride;
        if (done[size_t(nid)] || (seen[size_t(nid)] && !(next < best[size_t(nid)]))) continue;
        seen[size_t(nid)] = 1;
        best[size_t(nid)] = next;
        how[size_t(nid)] = Edge{id, int32_t(m), int32_t(c), tr->kind, tr->bytes, t};
        queue.push({next, nid});
      }
    }
    // Flattened steps: every dim of the mask to R (code 0), or from one P(op) to S(t) each.
    auto flat_edge = [&](uint32_t mask, const std::optional<Transition>& tr, int64_t to_code) {
      if (!tr) return;
      int64_t nid = id;
      int64_t s = 1;
      for (size_t k = 0; k < dims.size(); ++k, s *= K)
        if (mask >> dims[k] & 1u) nid += (to_code - (id / s) % K) * s;
      double t = step_time_us(model_, mesh_shape, mask, tr->kind, tr->bytes);
      Label next{label.time_us + t, label.bytes + tr->bytes, label.steps + 1};
      if (done[size_t(nid)] || (seen[size_t(nid)] && !(next < best[size_t(nid)]))) return;
      seen[size_t(nid)] = 1;
      best[size_t(nid)] = next;
      how[size_t(nid)] = Edge{id, int32_t(__builtin_ctz(mask)), int32_t(to_code), tr->kind, tr->bytes, t, mask};
      queue.push({next, nid});
    };
    for (uint32_t mask : flat_masks) {
      flat_edge(mask, rules.flat_step(mask), 0);
      for (int64_t t = 0; t < rank; ++t)
        if (!(fixed_dims >> t & 1u)) flat_edge(mask, rules.flat_reduce_scatter(mask, t), code(Placement::shard(t)));
    }
  }
  DT_CHECK(done[size_t(goal)]) << "no path from " << placements_str(plan.src) << " to " << placements_str(dst);

  std::vector<Edge> path;
  for (int64_t id = goal; id != start; id = how[size_t(id)].prev) path.push_back(how[size_t(id)]);
  for (size_t i = path.size(); i-- > 0;) {
    const Edge& e = path[i];
    Placement to = cand[size_t(e.to_code)];
    plan.steps.push_back({e.mesh_dim, e.kind, state[size_t(e.mesh_dim)], to, e.bytes, e.time_us, e.flat_dims});
    for (int64_t m : plan.steps.back().mesh_dims()) state[size_t(m)] = to;
  }
  relabel_trivial_dims(true);
  DT_CHECK(state == dst) << "plan ends in " << placements_str(state) << ", not " << placements_str(dst);
  for (const RedistributeStep& s : plan.steps) {
    plan.total_bytes += s.bytes;
    plan.total_time_us += s.time_us;
  }
  return plan;
}

size_t RedistributePlanner::cache_size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.size();
}

void RedistributePlanner::clear_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  cache_.clear();
}

RedistributePlanner& default_planner() {
  static RedistributePlanner planner;
  return planner;
}

}  // namespace dt
