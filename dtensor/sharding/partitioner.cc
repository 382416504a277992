#include "dtensor/sharding/partitioner.h"

#include "dtensor/core/error.h"
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
      for (size_t k = 0; k < n.operands.size(); ++k) {
        // Redistribute even a skipped operand: every rank must issue the same collectives.
        Value* x = moved(n.operands[k], ns.operands[k]);
        if (int(k) == ns.added_once && skips_added_once(ns.drop_added_once)) continue;
        operands.push_back(x);
      }
      types.clear();
      names.clear();
      for (const Value* r : n.results) {
        types.push_back(local_type(r));
        names.push_back(r->name);
      }
      std::vector<ir::Attr> attrs = n.attrs;
      localize_attrs(n, types, attrs);
      Node* copy = out_.append(n.op, operands, std::move(attrs), types, names, n.loc);
      for (size_t r = 0; r < n.results.size(); ++r) local_[size_t(n.results[r]->id)] = copy->results[r];
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
    return {v->type.dtype, local_shape_of(s_.mesh.shape(), s_.values[size_t(v->id)], v->type.shape, ctx_.coord)};
  }

  bool skips_added_once(uint32_t mask) const {
    for (size_t m = 0; m < ctx_.coord.size(); ++m)
      if (((mask >> m) & 1u) && ctx_.coord[m] != 0) return true;
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
    Value* y = lower_redistribution(ctx_, x, *plan);
    moved_[size_t(v->id)].emplace_back(dst, y);
    return y;
  }

  // Rewrites attributes that hold sizes of sharded dims to their local values.
  void localize_attrs(const Node& n, const std::vector<ir::TensorType>& types, std::vector<ir::Attr>& attrs) const {
    const ir::OpDef& def = ir::op_def(n.op);
    switch (n.op) {
      case ir::OpKind::view:
      case ir::OpKind::reshape:
        attrs[size_t(def.attr_index("shape"))] = types[0].shape;
        break;
      case ir::OpKind::slice: {
        // Only a slice keeping its whole dim may be sharded on it: keep the whole local dim.
        const Value* x = n.operands[0];
        int64_t d = normalize_dim(n.attr_int("dim"), x->type.rank());
        if (types[0].shape[size_t(d)] != n.result()->type.shape[size_t(d)]) {
          attrs[size_t(def.attr_index("start"))] = int64_t(0);
          attrs[size_t(def.attr_index("end"))] = types[0].shape[size_t(d)];
        }
        break;
      }
      case ir::OpKind::split: {
        int i = def.attr_index("sizes");
        if (n.results.size() == 1 && !std::get<std::vector<int64_t>>(attrs[size_t(i)]).empty()) {
          int64_t d = normalize_dim(n.attr_int("dim"), n.operands[0]->type.rank());
          attrs[size_t(i)] = std::vector<int64_t>{types[0].shape[size_t(d)]};
        }
        break;
      }
      default: break;
    }
  }

  const ir::Graph& g_;
  const Sharding& s_;
  RedistributePlanner& planner_;
  ir::Graph out_;
  LoweringContext ctx_;
  std::vector<Value*> local_;
  std::vector<std::vector<std::pair<Placements, Value*>>> moved_;
};

}  // namespace

ir::Graph partition(const ir::Graph& graph, const Sharding& sharding, int rank, RedistributePlanner& planner,
                    const PartitionOptions& options) {
  ir::Graph program = RankPartitioner(graph, sharding, rank, planner).run();
  if (options.verify) ir::verify(program);
  return program;
}

}  // namespace dt::sharding
