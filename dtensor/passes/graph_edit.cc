#include "dtensor/passes/graph_edit.h"

#include <queue>

#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"

namespace dt::passes {

UseLists::UseLists(const ir::Graph& graph) : users_(graph.num_values()), is_output_(graph.num_values(), false) {
  for (const auto& n : graph.nodes())
    for (const ir::Value* v : n->operands) {
      auto& u = users_[size_t(v->id)];
      if (u.empty() || u.back() != n) u.push_back(n);
    }
  for (const ir::Value* v : graph.outputs()) is_output_[size_t(v->id)] = true;
}

GraphEdit::GraphEdit(ir::Graph& graph) : g_(graph), builder_(graph) {
  const auto& nodes = g_.nodes();
  original_nodes_ = nodes.size();
  index_.reserve(nodes.size() * 2);
  keys_.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    index_.emplace(nodes[i], i);
    keys_.push_back(double(i));
  }
  dropped_.assign(nodes.size(), false);
}

size_t GraphEdit::index(const ir::Node* node) const {
  auto it = index_.find(node);
  DT_CHECK(it != index_.end()) << "node not in the edited graph";
  return it->second;
}

std::string GraphEdit::unique_name(const std::string& base) const {
  if (!g_.find(base)) return base;
  for (int i = 1;; ++i) {
    std::string s = base + "_" + std::to_string(i);
    if (!g_.find(s)) return s;
  }
}

ir::Value* GraphEdit::add(ir::OpKind op, std::vector<ir::Value*> operands, const ir::NamedAttrs& attrs, double key,
                          const std::string& name) {
  if (!name.empty()) builder_.named(unique_name(name));
  ir::Value* r = builder_.record(op, std::move(operands), attrs).at(0);
  index_.emplace(r->producer, keys_.size());
  keys_.push_back(key);
  dropped_.push_back(false);
  changed_ = true;
  return r;
}

void GraphEdit::replace(const ir::Value* from, ir::Value* to) {
  if (replaced_by_.size() < g_.num_values()) replaced_by_.resize(g_.num_values(), nullptr);
  DT_CHECK(from != to) << "replacing %" << from->name << " by itself";
  replaced_by_[size_t(from->id)] = to;
  changed_ = true;
}

ir::Value* GraphEdit::resolve(const ir::Value* v) const {
  auto* cur = const_cast<ir::Value*>(v);
  while (size_t(cur->id) < replaced_by_.size() && replaced_by_[size_t(cur->id)]) cur = replaced_by_[size_t(cur->id)];
  return cur;
}

bool GraphEdit::commit() {
  const auto& nodes = g_.nodes();
  const size_t n = nodes.size();
  DT_CHECK(n == keys_.size()) << "nodes were added to the graph outside the edit";
  replaced_by_.resize(g_.num_values(), nullptr);

  // Names handed from dropped values to the new values that replace them.
  std::vector<const std::string*> name_of(g_.num_values(), nullptr);
  std::vector<bool> name_taken(g_.num_values(), false);
  for (size_t id = 0; id < replaced_by_.size(); ++id) {
    ir::Value* to = replaced_by_[id];
    const ir::Value* from = g_.values()[id];
    if (!to || !from->producer || !dropped_[index(from->producer)]) continue;
    if (!to->producer || index(to->producer) < original_nodes_) continue;
    if (name_taken[size_t(to->id)]) continue;
    name_taken[size_t(to->id)] = true;
    name_of[size_t(to->id)] = &from->name;
  }

  // Dependencies between kept nodes, through resolved operands.
  std::vector<int> pending(n, 0);
  std::vector<std::vector<size_t>> users(n);
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    if (dropped_[i]) continue;
    ++kept;
    for (const ir::Value* v : nodes[i]->operands) {
      const ir::Value* r = resolve(v);
      if (!r->producer) continue;
      size_t j = index(r->producer);
      DT_CHECK(!dropped_[j]) << ir::op_name(nodes[i]->op) << " reads %" << r->name << " of a dropped node";
      users[j].push_back(i);
      ++pending[i];
    }
  }
  using Item = std::pair<double, size_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
  for (size_t i = 0; i < n; ++i)
    if (!dropped_[i] && pending[i] == 0) ready.push({keys_[i], i});
  std::vector<size_t> order;
  order.reserve(kept);
  while (!ready.empty()) {
    size_t i = ready.top().second;
    ready.pop();
    order.push_back(i);
    for (size_t u : users[i])
      if (--pending[u] == 0) ready.push({keys_[u], u});
  }
  DT_CHECK(order.size() == kept) << "graph edit made a cycle: " << order.size() << " of " << kept << " nodes ordered";
  bool reordered = kept != original_nodes_ || changed_;
  for (size_t k = 0; !reordered && k < order.size(); ++k) reordered = order[k] != k;
  if (!reordered) {
    DT_CHECK(n == original_nodes_);
    return false;
  }

  // Apply in place: operands and outputs read the replacements, the node list takes the new
  // order (freeing dropped nodes' names), then new values take the names of the values they
  // replace.
  std::vector<ir::Node*> ordered;
  ordered.reserve(order.size());
  for (size_t i : order) {
    ir::Node* node = nodes[i];
    for (ir::Value*& v : node->operands) v = resolve(v);
    ordered.push_back(node);
  }
  std::vector<ir::Value*> outputs;
  for (const ir::Value* v : g_.outputs()) outputs.push_back(resolve(v));
  g_.set_outputs(std::move(outputs));
  g_.set_node_order(ordered);
  for (size_t id = 0; id < name_of.size(); ++id)
    if (name_of[id]) g_.rename(g_.values()[id], *name_of[id]);
  return true;
}

}  // namespace dt::passes
