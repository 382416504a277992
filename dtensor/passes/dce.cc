// Dead-code elimination: removes every node none of whose results reaches a graph output. Compute
// ops are pure. Communication is not, seen from one rank: a collective's effect is its group's,
// and a send's or recv's is the peer's, so a collective, a transfer and the wait completing one
// are always live. Per-rank programs are not alike: a linear whose result is P(sum) adds its bias
// on group index 0 only (sharding/partitioner.h), yet every rank gathers that bias, so the gather
// is read on rank 0 and dead on the others. Dropping it there left rank 0 alone in the gather
// (an fsdp bias under a colwise-rowwise pair; the programs would hang). Which members read a
// collective is not known to one rank's program, so none is dropped.
#include "dtensor/ir/graph_edit.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/passes/pass.h"

namespace dt::passes {

using ir::GraphEdit;

namespace {

// Returns true for a collective (sends and recvs included) and the wait_tensor completing one.
bool communicates(const ir::Node& n) {
  const ir::Node* c = n.op == ir::OpKind::wait_tensor ? n.operands[0]->producer : &n;
  return c && ir::op_def(c->op).is_collective();
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
    bool used = communicates(n);
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
