#include "dtensor/passes/buffer_planner.h"

#include <algorithm>

#include "dtensor/ir/op_registry.h"
#include "dtensor/passes/graph_edit.h"

namespace dt::passes {
namespace {

constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

bool is_alias(ir::OpKind op) {
  return op == ir::OpKind::wait_tensor || op == ir::OpKind::flat_view || op == ir::OpKind::view ||
         op == ir::OpKind::reshape;
}

bool is_copy_in(ir::OpKind op) {
  return op == ir::OpKind::bucket_copy_in || op == ir::OpKind::chunk_cat || op == ir::OpKind::clone;
}

}  // namespace

const CommBuffer* CommBufferPlan::find(const ir::Value* v) const {
  for (const CommBuffer& b : buffers)
    if (b.value == v) return &b;
  return nullptr;
}

CommBufferPlan plan_comm_buffers(const ir::Graph& graph) {
  const auto& nodes = graph.nodes();
  UseLists uses(graph);
  std::vector<size_t> pos(graph.num_values(), 0);
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const ir::Value* r : nodes[i]->results) pos[size_t(r->id)] = i;
  auto node_pos = [&](const ir::Node* n) { return pos[size_t(n->result()->id)]; };

  // Returns the last position at which v or a value aliasing it is read.
  std::vector<const ir::Value*> stack;
  auto last_use = [&](const ir::Value* v) {
    size_t last = pos[size_t(v->id)];
    stack.assign(1, v);
    while (!stack.empty()) {
      const ir::Value* x = stack.back();
      stack.pop_back();
      if (uses.is_output(x)) last = nodes.size();
      for (const ir::Node* u : uses.users(x)) {
        last = std::max(last, node_pos(u));
        if (is_alias(u->op)) stack.push_back(u->result());
      }
    }
    return last;
  };

  CommBufferPlan plan;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& n = *nodes[i];
    bool comm_out = ir::op_def(n.op).is_collective;
    bool copy_in = false;
    if (is_copy_in(n.op))
      for (const ir::Node* u : uses.users(n.result())) copy_in = copy_in || ir::op_def(u->op).is_collective;
    if (!comm_out && !copy_in) continue;
    // An in-place collective's output is its input's buffer, already planned.
    if (n.op == ir::OpKind::all_reduce_ && plan.find(n.operands[0])) continue;
    plan.buffers.push_back({n.result(), 0, n.result()->type.nbytes(), i, last_use(n.result())});
  }
  // An in-place collective extends its input buffer's life to its own readers'.
  for (CommBuffer& b : plan.buffers)
    for (const ir::Node* u : uses.users(b.value))
      if (u->op == ir::OpKind::all_reduce_) b.last = std::max(b.last, last_use(u->result()));

  std::vector<size_t> order(plan.buffers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return plan.buffers[a].bytes > plan.buffers[b].bytes; });
  std::vector<const CommBuffer*> placed;
  std::vector<std::pair<size_t, size_t>> taken;
  for (size_t k : order) {
    CommBuffer& b = plan.buffers[k];
    taken.clear();
    for (const CommBuffer* p : placed)
      if (p->first <= b.last && b.first <= p->last) taken.push_back({p->offset, p->offset + align_up(p->bytes)});
    std::sort(taken.begin(), taken.end());
    size_t offset = 0;
    for (const auto& [lo, hi] : taken) {
      if (offset + align_up(b.bytes) <= lo) break;
      offset = std::max(offset, hi);
    }
    b.offset = offset;
    plan.total_bytes = std::max(plan.total_bytes, offset + align_up(b.bytes));
    placed.push_back(&b);
  }
  return plan;
}

}  // namespace dt::passes
