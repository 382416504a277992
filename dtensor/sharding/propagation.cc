#include "dtensor/sharding/propagation.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/redistribute/backward.h"

namespace dt::sharding {
namespace {

using ir::FactorKind;
using ir::Node;
using ir::OpShardingRule;
using ir::TensorFactors;
using ir::Value;

constexpr double kInfinite = std::numeric_limits<double>::infinity();
// The one reason a strategy is refused that is a plan's choice, not a limit of the op: a colwise
// or rowwise parameter stays put, so its reader gathers the other operand (Megatron's all_gather
// before a colwise linear under sequence parallelism). No warning for that.
constexpr const char* kPinnedReason = "a colwise/rowwise parameter would have to move";

// What a strategy does on one mesh dim.
// A factor option may be blocked (read from a blocked shard S(d,blocks=b), layout/placement.h: a
// fused projection): `blocks` is the factor's own block count (a fused linear's output factor),
// and `minor` lets the factor be sharded where it is not the first of its dim, which makes that
// dim a blocked shard with the major factors' product as blocks (the split of a fused qkv
// output into q, k, v: [3H] = (3, H), sharding H).
// A factor read from a strided shard SS(d) (fsdp over tp, layout/placement.h) keeps that layout:
// `strided` places it as SS on every tensor that has it, so an optimizer update reads a strided
// parameter, its gradient and its state where they are instead of moving them to S(d).
struct Option {
  enum Kind : uint8_t { none, factor, partial_all, partial_one } kind = none;
  int8_t f = -1;  // factor, or the partial operand for partial_one
  int32_t blocks = 1;
  bool minor = false;
  bool strided = false;
  bool operator==(const Option& o) const {
    return kind == o.kind && f == o.f && blocks == o.blocks && minor == o.minor && strided == o.strided;
  }
};

struct Candidate {
  std::vector<Placements> operands, results;
  uint32_t drop = 0;
  double cost = kInfinite;
  int shards = 0;    // result placements that shard (ties: more work split)
  int reused = 0;    // operands read from a move an earlier reader made (ties: see better)
  int partials = 0;  // partial result placements
  const char* invalid = nullptr;  // why the strategy cannot run (cost infinite)
};

class NodePropagator {
 public:
  // moved[v] (optional): the placements earlier readers already moved v to, which cost nothing
  // more (the partitioner lowers each move of a value once per rank and every reader shares it).
  NodePropagator(const Node& node, const OpShardingRule& rule, const Sharding& s, const std::vector<Placements>& reads,
                 const ResolvedPlan& plan, RedistributePlanner& planner,
                 const std::vector<std::vector<Placements>>* moved = nullptr)
      : n_(node), rule_(rule), s_(s), reads_(reads), plan_(plan), planner_(planner), moved_(moved),
        nd_(size_t(s.mesh.ndim())), reads_stored_(ir::op_def(node.op).reads_stored) {}

  // Returns the options of mesh dim m (never empty). `preferred[m]` >= 0: a reader of result 0
  // is forced to shard that dim on m (a `sequence` norm), so sharding it here is an option too.
  std::vector<Option> options(size_t m, const std::vector<int64_t>& forced, const std::vector<int64_t>& preferred) const {
    std::vector<Option> out;
    auto add = [&](Option o) {
      for (const Option& e : out)
        if (e == o) return;
      out.push_back(o);
    };
    if (s_.mesh.size(int64_t(m)) == 1) return {Option{}};
    if (!forced.empty() && forced[m] >= 0) {
      int f = rule_.operands[0][size_t(forced[m])].first();
      if (f >= 0) return {Option{Option::factor, int8_t(f)}};
      return {Option{}};
    }
    add(Option{});
    bool all_partial = !n_.operands.empty();
    ReduceOp op0 = ReduceOp::sum;
    for (size_t i = 0; i < n_.operands.size(); ++i) {
      const Value* v = n_.operands[i];
      const Placement& p = reads_[size_t(v->id)][m];
      if (p.is_shard() && (reads_stored_ || !((plan_.stored_only[size_t(v->id)] >> m) & 1u))) {
        if (p.is_blocked()) {
          add_blocked(rule_.operands[i][size_t(p.dim())], p.blocks(), add);
        } else {
          int f = rule_.operands[i][size_t(p.dim())].first();
          if (f >= 0) add(Option{Option::factor, int8_t(f), 1, false, p.is_strided()});
        }
      }
      if (!p.is_partial()) all_partial = false;
      else if (i == 0) op0 = p.op();
      else if (p.op() != op0) all_partial = false;
      if (p.is_partial() && p.op() == ReduceOp::sum && ((rule_.partial_one_of >> i) & 1u))
        add(Option{Option::partial_one, int8_t(i)});
    }
    if (all_partial && rule_.partial_all && (op0 == ReduceOp::sum || op0 == ReduceOp::avg))
      add(Option{Option::partial_all, -1});
    if (!preferred.empty() && preferred[m] >= 0 && !rule_.results.empty() &&
        size_t(preferred[m]) < rule_.results[0].size()) {
      int f = rule_.results[0][size_t(preferred[m])].first();
      if (f >= 0 && rule_.factor_kinds[size_t(f)] == FactorKind::pass_through) add(Option{Option::factor, int8_t(f)});
    }
    return out;
  }

  // Adds the option of a dim read as S(d,blocks=b): the factor after major factors whose product
  // is b (unblocked, the dim's blocks are those factors), else the first factor itself blocked.
  template <class Add>
  void add_blocked(const ir::DimFactors& dim, int64_t b, Add& add) const {
    int64_t before = 1;
    for (int k = 0; k < dim.count; ++k) {
      if (k > 0 && before == b) {
        add(Option{Option::factor, dim.factor[size_t(k)], 1, true});
        return;
      }
      before *= rule_.factor_sizes[size_t(dim.factor[size_t(k)])];
    }
    if (dim.count > 0 && rule_.factor_sizes[size_t(dim.factor[0])] % b == 0)
      add(Option{Option::factor, dim.factor[0], int32_t(b), true});
  }

  // Fills `c` for the given per-mesh-dim options; leaves c.cost infinite when invalid.
  void evaluate(const std::vector<Option>& choice, Candidate& c) const {
    const size_t no = n_.operands.size(), nr = n_.results.size();
    c.operands.assign(no, Placements(nd_));
    c.results.assign(nr, Placements(nd_));
    c.drop = 0;
    c.cost = kInfinite;
    c.shards = c.reused = c.partials = 0;
    c.invalid = "a merged or split dim can only be sharded on its major factor";
    for (size_t m = 0; m < nd_; ++m) {
      const Option& o = choice[m];
      switch (o.kind) {
        case Option::none: break;
        case Option::factor:
          for (size_t i = 0; i < no; ++i)
            if (!place_factor(rule_.operands[i], o, c.operands[i][m])) return;
          for (size_t r = 0; r < nr; ++r) {
            if ((rule_.replicated_results >> r) & 1u) continue;
            Option ro = o;
            ro.minor = o.minor || rule_.minor_results;
            if (place_factor(rule_.results[r], ro, c.results[r][m]) && !c.results[r][m].is_replicate()) {
              if (c.results[r][m].is_blocked() && !o.minor && !blocked_gradient(r, m, c.results[r][m])) {
                c.invalid = "a blocked shard is only made for the gradient of a fused projection's output";
                return;
              }
              continue;
            }
            if (rule_.factor_kinds[size_t(o.f)] == FactorKind::expanded) continue;  // result stays R
            if (rule_.factor_kinds[size_t(o.f)] != FactorKind::reduction) {
              c.invalid = "the result cannot be sharded that way";
              return;
            }
            c.results[r][m] = Placement::partial(ReduceOp::sum);
          }
          break;
        case Option::partial_all: {
          ReduceOp op = reads_[size_t(n_.operands[0]->id)][m].op();
          for (size_t i = 0; i < no; ++i) c.operands[i][m] = Placement::partial(op);
          for (size_t r = 0; r < nr; ++r) c.results[r][m] = Placement::partial(op);
          break;
        }
        case Option::partial_one:
          c.operands[size_t(o.f)][m] = Placement::partial(ReduceOp::sum);
          for (size_t r = 0; r < nr; ++r) c.results[r][m] = Placement::partial(ReduceOp::sum);
          break;
      }
      if (rule_.added_once >= 0 && size_t(rule_.added_once) < no && nr > 0 && c.results[0][m].is_partial()) {
        c.drop |= 1u << m;
        c.operands[size_t(rule_.added_once)][m] = Placement::replicate();
      }
    }
    c.invalid = "a merged dim's major factor (e.g. attention heads) does not divide evenly over the ranks";
    for (size_t i = 0; i < no; ++i)
      if (!multi_factor_dims_even(rule_.operands[i], c.operands[i])) return;
    for (size_t r = 0; r < nr; ++r) {
      if (!multi_factor_dims_even(rule_.results[r], c.results[r])) return;
      for (const Placement& p : c.results[r]) {
        c.shards += p.is_shard();
        c.partials += p.is_partial();
      }
    }
    // A pinned (colwise/rowwise) parameter keeps its shard on its mesh dim.
    if (!ignore_pins_)
      for (size_t i = 0; i < no; ++i) {
        const Value* v = n_.operands[i];
        const uint32_t pins = size_t(v->id) < plan_.pinned.size() ? plan_.pinned[size_t(v->id)] : 0;
        for (size_t m = 0; m < nd_; ++m)
          if (((pins >> m) & 1u) && c.operands[i][m] != reads_[size_t(v->id)][m]) {
            c.invalid = kPinnedReason;
            return;
          }
      }
    c.invalid = "the redistribution it needs has no lowering";
    double cost = 0;
    for (size_t i = 0; i < no; ++i) {
      const Value* v = n_.operands[i];
      if (c.operands[i] == reads_[size_t(v->id)]) continue;
      if (moved_already(*v, c.operands[i])) ++c.reused;
      else cost += move_cost(reads_[size_t(v->id)], c.operands[i], v->type);
      if (cost == kInfinite) return;
    }
    c.cost = cost;
    c.invalid = nullptr;
  }

  bool moved_already(const Value& v, const Placements& dst) const {
    if (!moved_) return false;
    for (const Placements& p : (*moved_)[size_t(v.id)])
      if (p == dst) return true;
    return false;
  }

  double move_cost(const Placements& src, const Placements& dst, const ir::TensorType& t) const {
    if (src == dst) return 0;
    try {
      return planner_.plan(s_.mesh.shape(), src, dst, t.shape, t.dtype)->total_time_us;
    } catch (const Error&) {
      return kInfinite;
    }
  }

 private:
  // Sets `p` to S(d) for the dim of `t` whose first factor is f; false when f is a later factor
  // of some dim (a merged or split dim that cannot be sharded that way).
  // A blocked option (Option::minor) may shard a later factor: the dim becomes S(d,blocks=b) with
  // b the product of the factors before it (times the factor's own blocks).
  bool place_factor(const TensorFactors& t, const Option& o, Placement& p) const {
    for (size_t d = 0; d < t.size(); ++d) {
      int64_t before = 1;
      for (int k = 0; k < t[d].count; ++k) {
        if (t[d].factor[size_t(k)] != o.f) {
          before *= rule_.factor_sizes[size_t(t[d].factor[size_t(k)])];
          continue;
        }
        if (k != 0 && !o.minor) return false;
        if (o.strided && k != 0) return false;  // a strided shard of a merged dim's minor factor
        p = o.strided ? Placement::strided_shard(int64_t(d)) : Placement::blocked_shard(int64_t(d), before * o.blocks);
        return true;
      }
    }
    return true;  // the tensor does not have f: replicated on this mesh dim
  }

  // True when result r is the gradient of a forward value laid out as `p` on mesh dim m.
  bool blocked_gradient(size_t r, size_t m, const Placement& p) const {
    const size_t id = size_t(n_.results[r]->id);
    if (id >= plan_.gradient_of.size() || plan_.gradient_of[id] < 0) return false;
    return s_.values[size_t(plan_.gradient_of[id])][m] == p;
  }

  // Returns false when a dim made of several factors is sharded by mesh dims whose total size does
  // not divide its first factor (the chunks of the dim and of the factor would differ).
  bool multi_factor_dims_even(const TensorFactors& t, const Placements& ps) const {
    for (size_t d = 0; d < t.size(); ++d) {
      if (t[d].count < 2) continue;
      int64_t ways = 1;
      for (size_t m = 0; m < nd_; ++m) {
        if (ps[m].is_blocked() && ps[m].is_shard(int64_t(d))) ways = 0;  // cut inside each block
        if (ps[m].is_shard(int64_t(d))) ways *= s_.mesh.size(int64_t(m));
      }
      if (ways > 1 && rule_.factor_sizes[size_t(t[d].factor[0])] % ways != 0) return false;
    }
    return true;
  }

  const Node& n_;
  const OpShardingRule& rule_;
  const Sharding& s_;
  const std::vector<Placements>& reads_;  // the placements each value is read from (see propagate)
  const ResolvedPlan& plan_;
  RedistributePlanner& planner_;
  const std::vector<std::vector<Placements>>* moved_;
  size_t nd_;
  bool reads_stored_;  // OpDef::reads_stored: stored-only (fsdp) shards are options too
  bool ignore_pins_ = false;  // the replicated fallback may move pinned parameters

 public:
  void allow_moving_pinned() { ignore_pins_ = true; }
};

// The placements the readers of `v` take it at. For the gradient of a forward value f
// (ResolvedPlan::gradient_of), the backward rule of a redistribution (redistribute/backward.h):
// f's placements, where a partial f becomes replicated unless the gradient is partial too. The
// backward then mirrors the forward: a replicated activation's partial gradient is all_reduced
// once (Megatron's f before a colwise block), a partial forward output's replicated gradient stays
// as it is, a fsdp parameter's partial gradient is reduce_scattered into its shard, a
// sequence-sharded activation's partial gradient is reduce_scattered. Kept as produced when that
// layout has no lowering.
Placements gradient_layout(const ir::Graph& g, const Value& v, const Sharding& s, const ResolvedPlan& plan,
                           const NodePropagator& prop) {
  const Placements& own = s.values[size_t(v.id)];
  if (size_t(v.id) >= plan.gradient_of.size() || plan.gradient_of[size_t(v.id)] < 0) return own;
  const Value& f = *g.values()[size_t(plan.gradient_of[size_t(v.id)])];
  if (f.type.shape != v.type.shape) return own;
  Placements want = gradient_placements(s.values[size_t(f.id)], own);
  if (want == own || prop.move_cost(own, want, v.type) == kInfinite) return own;
  return want;
}

// Cheaper first; at equal cost, more work split, then more operands read where an earlier reader
// already moved them, then partial results. Reading a reduced copy that exists already beats
// keeping the value partial for free: the partial would be reduced again further on (a residual
// stream read once reduced by its norm and again by the block's add, or a recomputed block reading
// its input; add_rule), and the reduction would need a copy of the partial sums kept for it.
bool better(const Candidate& a, const Candidate& b) {
  if (a.cost != b.cost) return a.cost < b.cost;
  if (a.shards != b.shards) return a.shards > b.shards;
  if (a.reused != b.reused) return a.reused > b.reused;
  return a.partials > b.partials;
}

}  // namespace

Sharding propagate(const ir::Graph& graph, const DeviceMesh& mesh, const ResolvedPlan& plan,
                   RedistributePlanner& planner) {
  Sharding s;
  s.mesh = mesh;
  s.mesh_dim_names = plan.mesh_dim_names;
  s.values = plan.value_placements;
  s.values.resize(graph.num_values());
  s.nodes.resize(graph.nodes().size());
  const size_t nd = size_t(mesh.ndim());
  std::vector<bool> warned(ir::kNumOps, false);
  const Placements replicated(nd);
  static const std::vector<int64_t> kNoForce;

  // preferred[i][m]: the dim of node i's result 0 that a reader forces onto mesh dim m (the input
  // of a `sequence` norm), so that the residual stream is produced sharded, not chunked after.
  std::vector<std::vector<int64_t>> preferred(graph.nodes().size());
  bool any_forced = false;
  for (const auto& f : plan.forced_operand0_dim) any_forced = any_forced || !f.empty();
  if (any_forced) {
    std::unordered_map<const Node*, size_t> index;
    for (size_t i = 0; i < graph.nodes().size(); ++i) index.emplace(graph.nodes()[i], i);
    for (size_t i = 0; i < graph.nodes().size() && i < plan.forced_operand0_dim.size(); ++i) {
      const auto& forced = plan.forced_operand0_dim[i];
      if (forced.empty() || graph.nodes()[i]->operands.empty()) continue;
      const Value* x = graph.nodes()[i]->operands[0];
      if (!x->producer || x->producer->results.empty() || x->producer->results[0] != x) continue;
      auto& pref = preferred[index.at(x->producer)];
      if (pref.empty()) pref.assign(nd, -1);
      for (size_t m = 0; m < nd; ++m)
        if (forced[m] >= 0) pref[m] = forced[m];
    }
  }

  // readers[v]: how many operands and outputs read v. A defers_reduction mapping needs a sole
  // reader of its partial operand, and a plan that allows it (ResolvedPlan::defer_reductions).
  std::vector<int> readers(graph.num_values(), 0);
  for (const Node* n : graph.nodes())
    for (const Value* v : n->operands) ++readers[size_t(v->id)];
  for (const Value* v : graph.outputs()) ++readers[size_t(v->id)];
  auto may_defer = [&](const Node& n, const OpShardingRule& r) {
    if (!plan.defer_reductions) return false;
    for (size_t k = 0; k < n.operands.size(); ++k)
      if (((r.partial_one_of >> k) & 1u) && readers[size_t(n.operands[k]->id)] != 1) return false;
    return true;
  };

  // moved[v]: the placements v's readers so far moved it to (NodePropagator's `moved`).
  std::vector<std::vector<Placements>> moved(graph.num_values());
  std::vector<Placements> reads;  // filled below
  auto record_moves = [&](const Node& n, const std::vector<Placements>& operands) {
    for (size_t k = 0; k < n.operands.size(); ++k) {
      const Value* v = n.operands[k];
      auto& to = moved[size_t(v->id)];
      if (operands[k] != reads[size_t(v->id)] && std::find(to.begin(), to.end(), operands[k]) == to.end())
        to.push_back(operands[k]);
    }
  };

  // reads[v]: the placements v's readers start from. A value's own placements (s.values), except
  // for a gradient, which is redistributed first as its forward value dictates (gradient_layout).
  reads = s.values;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    const Node& n = *graph.nodes()[i];
    NodeSharding& ns = s.nodes[i];
    const ir::RuleFn fn = ir::op_def(n.op).sharding_rule;
    if (!fn) {
      if (!warned[size_t(n.op)]) {
        warned[size_t(n.op)] = true;
        s.warnings.push_back(fmt::format("op {} has no sharding rule: its operands are replicated before it",
                                         ir::op_name(n.op)));
      }
      ns.fallback = true;
      ns.operands.assign(n.operands.size(), replicated);
      record_moves(n, ns.operands);
      for (const Value* r : n.results) reads[size_t(r->id)] = s.values[size_t(r->id)] = replicated;
      continue;
    }
    const OpShardingRule rule = fn(n);
    const auto& forced = i < plan.forced_operand0_dim.size() ? plan.forced_operand0_dim[i] : kNoForce;
    // kept[i] bit m: some valid strategy keeps operand i as it is on mesh dim m; why_not[m]: why a
    // strategy sharding a factor on m could not run (for the warning when a shard is given up).
    std::vector<uint32_t> kept(n.operands.size(), 0);
    std::vector<const char*> why_not(nd, nullptr);
    Candidate best, cand;
    const OpShardingRule* chosen = &rule;
    // The rule's mappings (OpShardingRule::alternatives), each searched the same way.
    for (size_t variant = 0; variant <= rule.alternatives.size(); ++variant) {
      const OpShardingRule& vr = variant == 0 ? rule : rule.alternatives[variant - 1];
      if (vr.defers_reduction && !may_defer(n, vr)) continue;
      DT_CHECK(vr.operands.size() == n.operands.size() && vr.results.size() == n.results.size())
          << ir::op_name(n.op) << " rule has " << vr.operands.size() << " operands and " << vr.results.size()
          << " results";
      NodePropagator prop(n, vr, s, reads, plan, planner, &moved);
      std::vector<std::vector<Option>> opts(nd);
      for (size_t m = 0; m < nd; ++m) opts[m] = prop.options(m, forced, preferred[i]);
      // Odometer over the cartesian product of the mesh dims' options.
      std::vector<size_t> at(nd, 0);
      std::vector<Option> choice(nd);
      for (;;) {
        for (size_t m = 0; m < nd; ++m) choice[m] = opts[m][at[m]];
        prop.evaluate(choice, cand);
        if (cand.cost != kInfinite) {
          for (size_t k = 0; k < n.operands.size(); ++k)
            for (size_t m = 0; m < nd; ++m)
              if (cand.operands[k][m] == reads[size_t(n.operands[k]->id)][m]) kept[k] |= 1u << m;
        } else {
          for (size_t m = 0; m < nd; ++m)
            if (choice[m].kind == Option::factor && !why_not[m]) why_not[m] = cand.invalid;
        }
        if (cand.cost != kInfinite && (best.cost == kInfinite || better(cand, best))) {
          std::swap(best, cand);
          chosen = &vr;
        }
        size_t m = 0;
        while (m < nd && ++at[m] == opts[m].size()) at[m++] = 0;
        if (m == nd) break;
      }
    }
    NodePropagator prop(n, *chosen, s, reads, plan, planner, &moved);
    if (best.cost == kInfinite) {
      // Nothing valid (e.g. a forced factor on an uneven merged dim): replicate everything.
      std::vector<Option> none(nd);
      prop.allow_moving_pinned();
      prop.evaluate(none, best);
      for (const Value* v : n.operands)
        for (const Placement& p : reads[size_t(v->id)])
          if (best.cost == kInfinite && p.is_blocked())
            DT_THROW(ValueError) << "%" << (n.results.empty() ? std::string("?") : n.results[0]->name) << " ("
                                 << ir::op_name(n.op) << "): operand %" << v->name << " is "
                                 << placements_str(reads[size_t(v->id)])
                                 << " (a fused projection's blocked shard) but this op cannot keep it: a "
                                    "blocked colwise output must be read by a split into its blocks";
      // Reachable from user input (issue 29.9: a rank-4 input sharded on an 8-d mesh): moving an
      // operand to replicated can exceed what the redistribution planner searches.
      if (best.cost == kInfinite)
        DT_THROW(ValueError) << ir::op_name(n.op) << (n.results.empty() ? std::string() : " %" + n.results[0]->name)
                             << " cannot run on mesh "
                             << mesh.str() << ", not even replicated"
                             << (best.invalid ? std::string(": ") + best.invalid : std::string())
                             << " (shard its operands over fewer mesh dims)";
    }
    // A shard given up because no strategy could keep it (not a cost decision) gets a warning.
    for (size_t k = 0; k < n.operands.size(); ++k) {
      const Value* v = n.operands[k];
      for (size_t m = 0; m < nd; ++m) {
        const Placement& p = reads[size_t(v->id)][m];
        if (!p.is_shard() || ((kept[k] >> m) & 1u) || ((plan.stored_only[size_t(v->id)] >> m) & 1u)) continue;
        if (why_not[m] == kPinnedReason) continue;
        s.warnings.push_back(fmt::format(
            "%{} ({}): operand %{} is {} on mesh dim {} but no sharding of {} keeps it ({}): it is redistributed to {}",
            n.results.empty() ? std::string("?") : n.results[0]->name, ir::op_name(n.op), v->name, p.str(),
            s.mesh_dim_names.size() > m ? s.mesh_dim_names[m] : std::to_string(m), ir::op_name(n.op),
            why_not[m] ? why_not[m] : "its rule has no such factor", best.operands[k][m].str()));
        break;
      }
    }
    ns.operands = std::move(best.operands);
    record_moves(n, ns.operands);
    ns.drop_added_once = best.drop;
    ns.added_once = chosen->added_once;
    ns.cost_us = best.cost;
    s.total_cost_us += best.cost;
    for (size_t r = 0; r < n.results.size(); ++r) {
      const Value* v = n.results[r];
      s.values[size_t(v->id)] = std::move(best.results[r]);
      reads[size_t(v->id)] = gradient_layout(graph, *v, s, plan, prop);
    }
  }
  s.reads.resize(graph.num_values());
  for (size_t v = 0; v < reads.size(); ++v)
    if (reads[v] != s.values[v]) s.reads[v] = std::move(reads[v]);
  s.outputs = plan.output_placements;
  if (s.outputs.size() != graph.outputs().size()) s.outputs.assign(graph.outputs().size(), replicated);
  return s;
}

std::string placements_of(const Sharding& sharding, const ir::Value* value) {
  return placements_str(sharding.values[size_t(value->id)]);
}

}  // namespace dt::sharding
