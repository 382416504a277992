#include "dtensor/redistribute/pytorch_greedy.h"

#include <algorithm>
#include <map>

#include "dtensor/layout/dtensor_spec.h"
#include "dtensor/redistribute/transition_rules.h"

namespace dt {

namespace {

struct Move {
  int64_t mesh_dim;
  Placement from, to;
};

// _decompose_reshard: S(i) -> S(j), and repeated shards whose nesting depth differs, go through R.
std::vector<Move> decompose(const Placements& src, const Placements& dst) {
  std::map<int64_t, int> repeat_src, repeat_dst;
  std::vector<Move> out;
  for (size_t i = 0; i < src.size(); ++i) {
    const Placement &c = src[i], &t = dst[i];
    if (c.is_shard()) ++repeat_src[c.dim()];
    if (t.is_shard()) ++repeat_dst[t.dim()];
    if (c.is_shard() && t.is_shard() && (c.dim() != t.dim() || repeat_src[c.dim()] != repeat_dst[t.dim()])) {
      out.push_back({int64_t(i), c, Placement::replicate()});
      out.push_back({int64_t(i), Placement::replicate(), t});
    } else {
      out.push_back({int64_t(i), c, t});
    }
  }
  return out;
}

// _replicate_then_shard: the stable sort key.
int64_t sort_key(const Move& m) {
  if ((m.to.is_replicate() || m.to.is_partial()) && m.from.is_shard()) return -m.mesh_dim;
  if ((m.from.is_replicate() || m.from.is_partial()) && m.to.is_shard()) return m.mesh_dim;
  return 0;
}

}  // namespace

std::optional<RedistributePlan> pytorch_greedy_plan(const Shape& mesh_shape, const Placements& src_in,
                                                    const Placements& dst_in, const Shape& shape, DType dtype,
                                                    const CostModel& model) {
  RedistributePlan plan = RedistributePlan::empty_for(mesh_shape, src_in, dst_in, shape, dtype);
  std::vector<Move> moves = decompose(plan.src, plan.dst);
  std::stable_sort(moves.begin(), moves.end(), [](const Move& a, const Move& b) { return sort_key(a) < sort_key(b); });
  Placements state = plan.src;
  for (const Move& mv : moves) {
    if (mv.from == mv.to) continue;
    if (mv.to.is_partial() && !mv.from.is_replicate()) return std::nullopt;  // PyTorch refuses
    DT_CHECK(state[size_t(mv.mesh_dim)] == mv.from) << mv.from.str();
    TransitionRules rules(mesh_shape, state.data(), shape, itemsize(dtype));
    auto tr = rules.step(mv.mesh_dim, mv.to);
    if (!tr) return std::nullopt;
    double t = step_time_us(model, mesh_shape, 1u << mv.mesh_dim, tr->kind, tr->bytes);
    plan.steps.push_back({mv.mesh_dim, tr->kind, mv.from, mv.to, tr->bytes, t});
    plan.total_bytes += tr->bytes;
    plan.total_time_us += t;
    state[size_t(mv.mesh_dim)] = mv.to;
  }
  DT_CHECK(state == plan.dst) << placements_str(state) << " vs " << placements_str(plan.dst);
  return plan;
}

}  // namespace dt
