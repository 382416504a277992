// Wait placement (the CommTensor rule): every wait_tensor sits immediately before the first node
// that reads its result, never earlier; a wait nobody reads goes to the end of the graph. For an
// in-place collective (all_reduce_) the readers of its operand that come after it also count,
// since they see the buffer the collective writes. Waits only ever move down: a wait already
// right before its first reader stays, and no wait moves above a reader.
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/graph_edit.h"
#include "dtensor/passes/pass.h"

namespace dt::passes {

using ir::GraphEdit;
using ir::UseLists;

namespace {

bool place_waits(ir::Graph& graph) {
  UseLists uses(graph);
  GraphEdit edit(graph);
  const double end = double(graph.nodes().size());
  for (const auto& node : graph.nodes()) {
    if (node->op != ir::OpKind::wait_tensor) continue;
    double first = end;
    for (const ir::Node* u : uses.users(node->result())) first = std::min(first, edit.key(u));
    const ir::Node* coll = node->operands[0]->producer;
    if (coll && ir::op_def(coll->op).in_place) {
      for (const ir::Node* u : uses.users(coll->operands[0]))
        if (edit.key(u) > edit.key(coll) && u != coll) first = std::min(first, edit.key(u));
    }
    // Just before the reader; waits for the same reader keep their relative order.
    edit.set_key(node, first - 0.5);
  }
  return edit.commit();
}

}  // namespace

PassPtr make_wait_placement_pass() {
  return make_pass("wait-placement", "sink every wait_tensor to just before the first reader of its result",
                   place_waits);
}

}  // namespace dt::passes
