#include "dtensor/sharding/partitioner.h"

#include <unordered_map>

#include "dtensor/core/error.h"
#include "dtensor/layout/dtensor_spec.h"
#include "dtensor/ir/builder.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/verifier.h"
#include "dtensor/redistribute/executor.h"
#include "dtensor/sharding/redistribute_lowering.h"

namespace dt::sharding {
namespace {

using ir::Node;
using ir::Value;

class RankPartitioner {
 public:
  RankPartitioner(const ir::Graph& g, const Sharding& s, int rank, RedistributePlanner& planner)
      : g_(g), s_(s), planner_(planner), out_(g.name()),
        ctx_{out_, &g, s.mesh, checked_coordinate(s.mesh, rank), s.mesh_dim_names},
        local_(g.num_values(), nullptr), moved_(g.num_values()) {
    for (int64_t m = 0; m < s.mesh.ndim(); ++m)
      if (s.mesh.size(m) > 1) out_.add_group(s.mesh_dim_names[size_t(m)], s.mesh.group_ranks(m, rank));
  }

  ir::Graph run() {
    for (const Value* v : g_.inputs()) local_[size_t(v->id)] = out_.add_input(v->name, local_type(v));
    for (const Value* v : g_.params()) local_[size_t(v->id)] = out_.add_param(v->name, local_type(v));
    std::vector<Value*> operands;
    std::vector<ir::TensorType> types;
    std::vector<std::string> names;
    for (size_t i = 0; i < g_.nodes().size(); ++i) {
      const Node& n = *g_.nodes()[i];
      const NodeSharding& ns = s_.nodes[i];
      operands.clear();
      bool skipped = false;
      for (size_t k = 0; k < n.operands.size(); ++k) {
        if (int(k) == ns.added_once && skips_added_once(ns.drop_added_once)) {
          // Skipped here, but redistributed when the move's collectives span a mesh dim whose
          // index 0 adds it: every member of a group must issue them (dce keeps them, unread).
          if (spans_dims(n.operands[k], ns.operands[k], ns.drop_added_once)) moved(n.operands[k], ns.operands[k]);
          skipped = true;
          continue;
        }
        operands.push_back(moved(n.operands[k], ns.operands[k]));
      }
      // An add without its added-once operand (add_rule: P(sum) + R) is its other operand.
      if (skipped && n.op == ir::OpKind::add) {
        DT_CHECK(operands.size() == 1 && operands[0]->type == local_type(n.result()))
            << "add " << n.result()->name << " without its added-once operand";
        local_[size_t(n.result()->id)] = operands[0];
        if (size_t(n.result()->id) < s_.reads.size() && !s_.reads[size_t(n.result()->id)].empty())
          moved(n.result(), s_.reads[size_t(n.result()->id)]);
        continue;
      }
      if (expand(n, ns, operands)) {
        weight_row_shard(n, ns);
        continue;
      }
      types.clear();
      names.clear();
      for (const Value* r : n.results) {
        types.push_back(local_type(r));
        names.push_back(r->name);
      }
      std::vector<ir::Attr> attrs = n.attrs;
      ir::OpKind op = n.op;
      localize_attrs(n, ns, types, op, attrs);
      Node* copy = out_.append(op, operands, std::move(attrs), types, names, n.loc);
      for (size_t r = 0; r < n.results.size(); ++r) local_[size_t(n.results[r]->id)] = copy->results[r];
      weight_row_shard(n, ns);
      // A gradient moves where its forward value says right away (its readers find it in moved_).
      for (const Value* r : n.results)
        if (size_t(r->id) < s_.reads.size() && !s_.reads[size_t(r->id)].empty()) moved(r, s_.reads[size_t(r->id)]);
    }
    std::vector<Value*> outputs;
    for (size_t k = 0; k < g_.outputs().size(); ++k) outputs.push_back(moved(g_.outputs()[k], s_.outputs[k]));
    out_.set_outputs(std::move(outputs));
    return std::move(out_);
  }

 private:
  static std::vector<int64_t> checked_coordinate(const DeviceMesh& mesh, int rank) {
    auto c = mesh.coordinate(rank);
    if (!c) DT_THROW(ValueError) << "rank " << rank << " is not in mesh " << mesh.str();
    return *c;
  }

  ir::TensorType local_type(const Value* v) const {
    return {v->type.dtype, local_shape_at(s_.mesh.shape(), s_.values[size_t(v->id)], v->type.shape, ctx_.coord)};
  }

  bool skips_added_once(uint32_t mask) const {
    for (size_t m = 0; m < ctx_.coord.size(); ++m)
      if (((mask >> m) & 1u) && ctx_.coord[m] != 0) return true;
    return false;
  }

  // True when moving `v` to `dst` issues a collective over a mesh dim in `mask`. A collective over
  // the other dims only has members with this rank's coordinates on the masked dims, which all
  // skip the operand alike, so it is left out on them all.
  bool spans_dims(const Value* v, const Placements& dst, uint32_t mask) {
    const Placements& src = s_.values[size_t(v->id)];
    if (src == dst) return false;
    auto plan = planner_.plan(s_.mesh.shape(), src, dst, v->type.shape, v->type.dtype);
    for (const RedistributeStep& step : plan->steps)
      if (is_collective(step.kind))
        for (int64_t m : step.mesh_dims())
          if ((mask >> m) & 1u) return true;
    return false;
  }

  // Returns the local value of `v` laid out as `dst`, inserting the redistribution once.
  Value* moved(const Value* v, const Placements& dst) {
    const Placements& src = s_.values[size_t(v->id)];
    Value* x = local_[size_t(v->id)];
    DT_CHECK(x) << "value %" << v->name << " used before definition";
    if (src == dst) return x;
    for (const auto& [placements, value] : moved_[size_t(v->id)])
      if (placements == dst) return value;
    auto plan = planner_.plan(s_.mesh.shape(), src, dst, v->type.shape, v->type.dtype);
    Value* y = lower_redistribution(ctx_, x, *plan, module_stem(v));
    moved_[size_t(v->id)].emplace_back(dst, y);
    return y;
  }

  // Writes the node's own local form when its op has one for this sharding (OpDef::expand: loss
  // parallel); returns false where the node is copied as it is.
  bool expand(const Node& n, const NodeSharding& ns, const std::vector<Value*>& operands) {
    const ir::ExpandFn fn = ir::op_def(n.op).expand;
    if (!fn) return false;
    auto name = [&](int result, const std::string& suffix) {
      const std::string& base = n.results[size_t(result)]->name;
      return suffix.empty() ? base : ctx_.fresh(base + suffix);
    };
    auto append = [&](ir::OpKind op, std::vector<Value*> in, const ir::NamedAttrs& attrs, const ir::TensorType& type,
                      const std::string& suffix) {
      return out_.append(op, std::move(in), ir::complete_attrs(op, attrs), {type}, {name(0, suffix)}, n.loc)->results[0];
    };
    auto append_results = [&](ir::OpKind op, std::vector<Value*> in, const ir::NamedAttrs& attrs,
                              const std::vector<ir::TensorType>& types, const std::vector<std::pair<int, std::string>>& names) {
      std::vector<std::string> named;
      for (const auto& [result, suffix] : names) named.push_back(name(result, suffix));
      const auto& rs = out_.append(op, std::move(in), ir::complete_attrs(op, attrs), types, named, n.loc)->results;
      return std::vector<Value*>(rs.begin(), rs.end());
    };
    auto reduce_over = [&](Value* local, ReduceOp op, int k, int d) {
      // From a partial on the mesh dims sharding dim d to the rows' own placements.
      const Placements& lp = ns.operands[size_t(k)];
      Placements partial(lp.size()), rows(lp.size());
      for (size_t m = 0; m < lp.size(); ++m) {
        if (lp[m].is_shard(0)) rows[m] = partial[m] = lp[m];
        if (lp[m].is_shard(d)) partial[m] = Placement::partial(op);
      }
      const Shape stat{n.operands[size_t(k)]->type.shape[0]};
      auto plan = planner_.plan(s_.mesh.shape(), partial, rows, stat, local->type.dtype);
      return lower_redistribution(ctx_, local, *plan);
    };
    std::vector<ir::TensorType> local_results;
    for (const Value* r : n.results) local_results.push_back(local_type(r));
    ir::ExpandContext ctx{.node = n,
                          .operands = operands,
                          .local_result = local_results[0],
                          .shard_start = [&](int k, int d) { return shard_start(n, ns, k, d); },
                          .append = append,
                          .local_results = local_results,
                          .other_results = {},
                          .append_results = append_results,
                          .reduce_over = reduce_over,
                          .kept = kept_};
    Value* result = fn(ctx);
    if (!result) return false;
    DT_CHECK(ctx.other_results.size() + 1 == n.results.size()) << ir::op_name(n.op) << "'s expansion left "
                                                                << ctx.other_results.size() + 1 << " results";
    local_[size_t(n.result()->id)] = result;
    for (size_t r = 1; r < n.results.size(); ++r) local_[size_t(n.results[r]->id)] = ctx.other_results[r - 1];
    return true;
  }

  // Where this rank's block of operand k's dim d starts, or nullopt when no mesh dim shards it.
  std::optional<int64_t> shard_start(const Node& n, const NodeSharding& ns, int k, int d) const {
    const Placements& ps = ns.operands[size_t(k)];
    bool sharded = false;
    for (const Placement& p : ps) sharded = sharded || p.is_shard(d);
    if (!sharded) return std::nullopt;
    return shard_extent(s_.mesh.shape(), ps, n.operands[size_t(k)]->type.shape[size_t(d)], d, ctx_.coord,
                        s_.mesh.ndim())
        .first;
  }

  // A mean over rows (OpDef::row_mean: cross_entropy) on operands sharded on their rows (data
  // parallel; sharding_loss.cc): the local op gives the mean over this rank's rows, the loss is the
  // sum over ranks of those means weighted by each rank's share of the rows (uneven shards too).
  // Rewrites the local loss to mean * local_rows / rows (0 on a rank without rows, whose mean is
  // 0/0), a partial sum.
  void weight_row_shard(const Node& n, const NodeSharding& ns) {
    const ir::RowMeanFn row_mean = ir::op_def(n.op).row_mean;
    if (!row_mean || !row_mean(n)) return;
    const Placements& lp = ns.operands[0];
    bool rows_sharded = false;
    for (const Placement& p : lp) rows_sharded = rows_sharded || p.is_shard(0);
    if (!rows_sharded) return;
    const int64_t rows = n.operands[0]->type.shape[0];
    const int64_t mine = local_shape_at(s_.mesh.shape(), lp, n.operands[0]->type.shape, ctx_.coord)[0];
    Value*& loss = local_[size_t(n.result()->id)];
    const ir::TensorType scalar = loss->type;
    const std::string name = loss->name;
    out_.rename(loss, ctx_.fresh(name + ".rows"));
    auto full = [&](double value, const std::string& result_name) {
      return out_.append(ir::OpKind::full, {},
                         ir::complete_attrs(ir::OpKind::full, {{"shape", std::vector<int64_t>{}},
                                                               {"value", value},
                                                               {"dtype", scalar.dtype}}),
                         {scalar}, {result_name}, n.loc)->results[0];
    };
    if (mine == 0) {
      loss = full(0.0, name);
      return;
    }
    Value* w = full(double(mine) / double(rows), ctx_.fresh(name + ".share"));
    loss = out_.append(ir::OpKind::mul, {loss, w}, ir::complete_attrs(ir::OpKind::mul, {}), {scalar}, {name}, n.loc)
               ->results[0];
  }

  // The op's own localize_attrs (ir/op_registry.h), told where this rank's block of each sharded
  // operand dim starts.
  void localize_attrs(const Node& n, const NodeSharding& ns, const std::vector<ir::TensorType>& types, ir::OpKind& op,
                      std::vector<ir::Attr>& attrs) const {
    const ir::LocalizeFn fn = ir::op_def(n.op).localize_attrs;
    if (!fn) return;
    fn({.node = n, .local_results = types, .shard_start = [&](int k, int d) { return shard_start(n, ns, k, d); }}, op,
       attrs);
  }

  const ir::Graph& g_;
  const Sharding& s_;
  RedistributePlanner& planner_;
  ir::Graph out_;
  LoweringContext ctx_;
  std::vector<Value*> local_;
  std::vector<std::vector<std::pair<Placements, Value*>>> moved_;
  std::unordered_map<const Value*, std::vector<Value*>> kept_;  // what expansions leave for later ones (ExpandContext)
};

}  // namespace

ir::Graph partition(const ir::Graph& graph, const Sharding& sharding, int rank, RedistributePlanner& planner,
                    const PartitionOptions& options) {
  ir::Graph program = RankPartitioner(graph, sharding, rank, planner).run();
  if (options.verify) ir::verify(program);
  return program;
}

}  // namespace dt::sharding
