// Reshard after forward (FSDP's reshard_after_forward=True): a training step's gathered parameters
// are freed after their last forward reader and gathered again for the backward, instead of being
// kept from their forward gather to their last backward reader.
//
// Why: kept, every layer's gathered parameters are live at the end of the forward at once, so a
// rank's peak holds the whole unsharded model (on the example gpt hidden 512 with fsdp on 2 ranks,
// 56 of its 146 MiB of live results). Resharded, only the layers being gathered, computed or
// prefetched are whole. The price is one more all_gather of every parameter per step (the
// forward's, again in the backward): 1.5x the fsdp bytes of a step (gather, gather, reduce_scatter
// instead of gather, reduce_scatter). A pipeline without this pass keeps them (the issue's "again
// in backward unless kept").
//
// Which readers are the backward: a training step's first output is its scalar loss; the forward
// is every node the loss depends on. A node outside it (backward, optimizer update) that reads a
// value the forward computed from parameters alone through a collective (the gather's wait, or
// what the lowering of an uneven gather makes of it) reads a fresh copy instead: the nodes that
// made the value, cloned (parameters are not cloned), placed just before their first backward
// reader. Later passes bucket and prefetch the copies like any gather (bucketing.cc: about one
// bucket ahead of first use). The last block the forward gathers (no other gathered value is first
// read after its last forward read: on the gpt, lm_head) is kept, as FSDP2 keeps its root module:
// the backward starts with it. Graphs whose first output is not a scalar (no loss: forward-only
// programs) and graphs without such readers are left unchanged. A cse after this pass would merge
// the copies back (the default pipeline runs it before).
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "dtensor/ir/op_registry.h"
#include "dtensor/passes/pass.h"

namespace dt::passes {
namespace {

std::string fresh_name(const ir::Graph& g, const std::string& base) {
  std::string name = base;
  for (int i = 1; g.find(name); ++i) name = base + "_" + std::to_string(i);
  return name;
}

bool free_and_regather(ir::Graph& graph) {
  if (graph.outputs().empty() || graph.outputs()[0]->type.rank() != 0 || !graph.outputs()[0]->producer) return false;
  // The forward: every node the loss depends on.
  std::unordered_set<const ir::Node*> forward;
  std::vector<const ir::Node*> stack = {graph.outputs()[0]->producer};
  while (!stack.empty()) {
    const ir::Node* n = stack.back();
    stack.pop_back();
    if (!forward.insert(n).second) continue;
    for (const ir::Value* v : n->operands)
      if (v->producer && !forward.count(v->producer)) stack.push_back(v->producer);
  }
  // Per value: computed from parameters alone (no data input, no constant-only value), and
  // through a collective.
  std::vector<char> from_params(graph.num_values(), 0), gathered(graph.num_values(), 0);
  for (const ir::Value* p : graph.params()) from_params[size_t(p->id)] = 1;
  for (const ir::Node* n : graph.nodes()) {
    bool params_only = !n->operands.empty(), through = ir::op_def(n->op).is_collective();
    for (const ir::Value* v : n->operands) {
      params_only = params_only && from_params[size_t(v->id)];
      through = through || gathered[size_t(v->id)];
    }
    for (const ir::Value* r : n->results) {
      from_params[size_t(r->id)] = params_only;
      gathered[size_t(r->id)] = params_only && through;
    }
  }
  // Clones of the forward's nodes for the backward, each listed before the backward node that
  // first needs it.
  std::unordered_map<const ir::Value*, ir::Value*> copy;
  std::unordered_map<const ir::Node*, std::vector<ir::Node*>> before;
  const std::vector<ir::Node*> nodes = graph.nodes();
  auto clone = [&](auto& self, ir::Value* v, const ir::Node* reader) -> ir::Value* {
    if (!v->producer) return v;  // a parameter
    if (auto it = copy.find(v); it != copy.end()) return it->second;
    const ir::Node* p = v->producer;
    std::vector<ir::Value*> operands;
    for (ir::Value* o : p->operands) operands.push_back(self(self, o, reader));
    std::vector<ir::TensorType> types;
    std::vector<std::string> names;
    for (const ir::Value* r : p->results) {
      types.push_back(r->type);
      names.push_back(fresh_name(graph, r->name + ".re"));
    }
    ir::Node* c = graph.append(p->op, std::move(operands), p->attrs, std::move(types), std::move(names), p->loc);
    before[reader].push_back(c);
    for (size_t k = 0; k < p->results.size(); ++k) copy[p->results[k]] = c->results[k];
    return copy.at(v);
  };
  // The candidates (gathered in the forward, read after it) and the span of their forward reads.
  std::unordered_map<const ir::Value*, std::pair<size_t, size_t>> span;  // first, last forward read
  auto candidate = [&](const ir::Value* v) {
    return v->producer && forward.count(v->producer) && gathered[size_t(v->id)];
  };
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const ir::Value* v : nodes[i]->operands)
      if (candidate(v) && forward.count(nodes[i])) {
        auto [it, fresh] = span.try_emplace(v, i, i);
        it->second.second = std::max(it->second.second, i);
      }
  // A value no other candidate is first read after (the last block of the forward, e.g. the
  // output projection) is kept: nothing would use the memory its release frees before the
  // backward, which reads it first, would gather it again.
  size_t last_first = 0;
  for (const auto& [v, fl] : span) last_first = std::max(last_first, fl.first);
  for (ir::Node* n : nodes) {
    if (forward.count(n)) continue;
    for (ir::Value*& v : n->operands) {
      if (!candidate(v)) continue;
      auto it = span.find(v);
      if (it != span.end() && it->second.second >= last_first) continue;  // kept
      v = clone(clone, v, n);
    }
  }
  if (before.empty()) return false;
  std::vector<ir::Node*> order;
  order.reserve(graph.nodes().size());
  for (ir::Node* n : nodes) {
    if (auto it = before.find(n); it != before.end()) order.insert(order.end(), it->second.begin(), it->second.end());
    order.push_back(n);
  }
  graph.set_node_order(order);
  return true;
}

}  // namespace

PassPtr make_reshard_after_forward_pass() {
  return make_pass("reshard-after-forward",
                   "free gathered parameters after the forward and gather them again for the backward (fsdp)",
                   free_and_regather);
}

}  // namespace dt::passes
