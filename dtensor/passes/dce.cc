// Dead-code elimination: removes every node none of whose results reaches a graph output. Ops
// are pure (collectives included: a collective whose waited result nobody reads moves data for
// nothing); since every rank runs the same pipeline on the same program structure, every rank
// drops the same collectives, so the ranks stay matched. Point-to-point transfers are the
// exception: their effect is the peer's, so a send or recv and its wait are always live.
#include "dtensor/ir/graph_edit.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/passes/pass.h"

namespace dt::passes {

using ir::GraphEdit;

namespace {

// Returns true for a send or recv, and for the wait_tensor completing one.
bool is_point_to_point(const ir::Node& n) {
  if (n.op == ir::OpKind::wait_tensor) {
    const ir::Node* p = n.operands[0]->producer;
    return p && ir::op_def(p->op).point_to_point;
  }
  return ir::op_def(n.op).point_to_point;
}

// Drops every node none of whose results is live, sweeping backwards (a dead chain goes at once).
bool drop_dead_nodes(ir::Graph& graph) {
  std::vector<bool> live(graph.num_values(), false);
  for (const ir::Value* v : graph.outputs()) live[size_t(v->id)] = true;
  GraphEdit edit(graph);
  bool any = false;
  const auto& nodes = graph.nodes();
  for (size_t i = nodes.size(); i-- > 0;) {
    const ir::Node& n = *nodes[i];
    bool used = is_point_to_point(n);
    for (const ir::Value* r : n.results) used = used || live[size_t(r->id)];
    if (!used) {
      edit.drop(&n);
      any = true;
      continue;
    }
    for (const ir::Value* v : n.operands) live[size_t(v->id)] = true;
  }
  return any && edit.commit();
}

}  // namespace

PassPtr make_dce_pass() { return make_pass("dce", "remove nodes whose results nobody reads", drop_dead_nodes); }

}  // namespace dt::passes
