#include "dtensor/passes/graph_edit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <span>
#include <unordered_map>

#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"

namespace dt::passes {

UseLists::UseLists(const ir::Graph& graph) : begin_(graph.num_values() + 1, 0), is_output_(graph.num_values(), false) {
  // One sweep over the nodes collects (value, reader) pairs (a node reading a value twice counts
  // once: its operands are few, so compare with the earlier ones); a counting sort by value then
  // places them. The graph is walked once because on large graphs each node visit is a cache miss.
  std::vector<std::pair<uint32_t, const ir::Node*>> reads;
  reads.reserve(graph.nodes().size() * 2);
  for (const auto& n : graph.nodes()) {
    const auto& ops = n->operands;
    for (size_t k = 0; k < ops.size(); ++k) {
      bool seen = false;
      for (size_t q = 0; q < k && !seen; ++q) seen = ops[q] == ops[k];
      if (seen) continue;
      reads.emplace_back(uint32_t(ops[k]->id), n);
      ++begin_[size_t(ops[k]->id) + 1];
    }
  }
  const size_t nv = graph.num_values();
  for (size_t id = 0; id < nv; ++id) begin_[id + 1] += begin_[id];
  users_.resize(reads.size());
  std::vector<size_t> fill(begin_.begin(), begin_.end() - 1);
  for (const auto& [id, node] : reads) users_[fill[id]++] = node;
  for (const ir::Value* v : graph.outputs()) is_output_[size_t(v->id)] = true;
}

GraphEdit::GraphEdit(ir::Graph& graph) : g_(graph), builder_(graph) {
  const auto& nodes = g_.nodes();
  original_nodes_ = nodes.size();
  index_by_result_.assign(g_.num_values(), kNone);
  keys_.reserve(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    record_index(nodes[i], i);
    keys_.push_back(double(i));
  }
  order_.assign(nodes.size(), std::numeric_limits<double>::quiet_NaN());
  dropped_.assign(nodes.size(), false);
}

void GraphEdit::record_index(const ir::Node* node, size_t i) {
  if (node->results.empty()) {
    index_no_result_.emplace(node, i);
    return;
  }
  const size_t id = size_t(node->results[0]->id);
  if (id >= index_by_result_.size()) index_by_result_.resize(std::max(id + 1, index_by_result_.size() * 2), kNone);
  index_by_result_[id] = i;
}

size_t GraphEdit::index_slow(const ir::Node* node) const {
  auto it = index_no_result_.find(node);
  DT_CHECK(it != index_no_result_.end()) << "node not in the edited graph";
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
  record_index(r->producer, keys_.size());
  keys_.push_back(key);
  order_.push_back(std::numeric_limits<double>::quiet_NaN());
  dropped_.push_back(false);
  changed_ = true;
  return r;
}

void GraphEdit::morph(const ir::Node* node, ir::OpKind op, std::vector<ir::Value*> operands,
                      const ir::NamedAttrs& attrs) {
  morph_complete(node, op, std::move(operands), ir::complete_attrs(op, attrs));
}

void GraphEdit::morph_complete(const ir::Node* node, ir::OpKind op, std::vector<ir::Value*> operands,
                               std::vector<ir::Attr> attrs) {
  DT_CHECK(node->results.size() == 1 && index(node) < original_nodes_) << "morph of a new or multi-result node";
  const ir::OpDef& def = ir::op_def(op);
  DT_CHECK(attrs.size() == def.attrs.size()) << ir::op_name(op) << " given " << attrs.size() << " attributes";
  ir::Node probe;
  probe.op = op;
  probe.operands = std::move(operands);
  probe.attrs = std::move(attrs);
  types_.clear();
  def.infer(probe, g_, types_);
  DT_CHECK(types_.size() == 1 && types_[0] == node->result()->type)
      << ir::op_name(op) << " would change the type of %" << node->result()->name;
  auto* n = const_cast<ir::Node*>(node);  // the edit owns the graph's nodes until commit()
  n->op = op;
  n->operands = std::move(probe.operands);
  n->attrs = std::move(probe.attrs);
  changed_ = true;
}

void GraphEdit::replace(const ir::Value* from, ir::Value* to) {
  if (replaced_by_.size() < g_.num_values()) replaced_by_.resize(g_.num_values(), nullptr);
  DT_CHECK(from != to) << "replacing %" << from->name << " by itself";
  replaced_by_[size_t(from->id)] = to;
  any_replaced_ = true;
  changed_ = true;
}

ir::Value* GraphEdit::resolve(const ir::Value* v) const {
  auto* cur = const_cast<ir::Value*>(v);
  if (!any_replaced_) return cur;  // most edits only add, drop and morph: no lookup per operand
  while (size_t(cur->id) < replaced_by_.size() && replaced_by_[size_t(cur->id)]) cur = replaced_by_[size_t(cur->id)];
  return cur;
}

bool GraphEdit::commit() {
  const auto& nodes = g_.nodes();
  const size_t n = nodes.size();
  DT_CHECK(n == keys_.size()) << "nodes were added to the graph outside the edit";
  if (any_replaced_) replaced_by_.resize(g_.num_values(), nullptr);

  // Names handed from dropped values to the new values that replace them.
  std::vector<const std::string*> name_of(any_replaced_ ? g_.num_values() : 0, nullptr);
  std::vector<bool> name_taken(name_of.size(), false);
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
  // Edges producer -> reader as one array sliced per producer (users of j: edge_to[edge_begin[j],
  // edge_begin[j + 1])), built in two sweeps without a vector per node.
  std::vector<int> pending(n, 0);
  std::vector<size_t> edge_begin(n + 1, 0);
  std::vector<std::pair<size_t, size_t>> edges;  // (producer, reader)
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    if (dropped_[i]) continue;
    ++kept;
    for (const ir::Value* v : nodes[i]->operands) {
      const ir::Value* r = resolve(v);
      if (!r->producer) continue;
      size_t j = index(r->producer);
      DT_CHECK(!dropped_[j]) << ir::op_name(nodes[i]->op) << " reads %" << r->name << " of a dropped node";
      edges.emplace_back(j, i);
      ++edge_begin[j + 1];
      ++pending[i];
    }
  }
  // Each group's collectives in their order (class comment): an edge from each to the next.
  {
    std::map<std::string_view, std::vector<std::pair<double, size_t>>> chains;
    for (size_t i = 0; i < n; ++i) {
      if (dropped_[i] || !ir::op_def(nodes[i]->op).is_collective()) continue;
      const double o = !std::isnan(order_[i]) ? order_[i] : i < original_nodes_ ? double(i) : keys_[i];
      chains[nodes[i]->attr_str("group")].emplace_back(o, i);
    }
    for (auto& [group, chain] : chains) {
      std::sort(chain.begin(), chain.end());
      for (size_t k = 1; k < chain.size(); ++k) {
        edges.emplace_back(chain[k - 1].second, chain[k].second);
        ++edge_begin[chain[k - 1].second + 1];
        ++pending[chain[k].second];
      }
    }
  }
  // Readers of a buffer an in-place op writes (OpDef::written_operand) stay on their side of it:
  // those before it read the old contents (a parameter before its optimizer update), those after
  // it the new. An edge from each earlier reader to the op, and from the op to each later one, by
  // their order in the pass's input (new nodes: their key).
  {
    auto position = [&](size_t i) { return i < original_nodes_ ? double(i) : keys_[i]; };
    std::unordered_map<const ir::Value*, std::vector<size_t>> writers;  // buffer -> in-place nodes
    for (size_t i = 0; i < n; ++i) {
      const ir::OpDef& def = ir::op_def(nodes[i]->op);
      for (size_t k = 0; !dropped_[i] && def.in_place && k < nodes[i]->results.size(); ++k)
        if (const int j = def.written_operand(k); j >= 0) writers[resolve(nodes[i]->operands[size_t(j)])].push_back(i);
    }
    for (size_t i = 0; i < n && !writers.empty(); ++i) {
      if (dropped_[i]) continue;
      for (const ir::Value* v : nodes[i]->operands) {
        auto it = writers.find(resolve(v));
        if (it == writers.end()) continue;
        for (size_t w : it->second) {
          if (w == i) continue;
          const auto [from, to] = position(i) < position(w) ? std::pair(i, w) : std::pair(w, i);
          edges.emplace_back(from, to);
          ++edge_begin[from + 1];
          ++pending[to];
        }
      }
    }
  }
  for (size_t j = 0; j < n; ++j) edge_begin[j + 1] += edge_begin[j];
  std::vector<size_t> edge_to(edges.size());
  {
    std::vector<size_t> fill(edge_begin.begin(), edge_begin.end() - 1);
    for (const auto& [j, i] : edges) edge_to[fill[j]++] = i;
  }
  auto users = [&](size_t j) {
    return std::span<const size_t>(edge_to.data() + edge_begin[j], edge_begin[j + 1] - edge_begin[j]);
  };
  // A node wanted early pulls its producers along: the effective key of a node is the smallest
  // key among itself and everything that (transitively) reads it, computed in reverse
  // topological order. Without this a producer left at its old key (a split-out feeding a copy-in
  // issued one bucket ahead) would hold its early reader back.
  std::vector<double> eff(keys_);
  {
    std::vector<int> left(pending);
    std::vector<size_t> topo;
    topo.reserve(kept);
    for (size_t i = 0; i < n; ++i)
      if (!dropped_[i] && left[i] == 0) topo.push_back(i);
    for (size_t k = 0; k < topo.size(); ++k)
      for (size_t u : users(topo[k]))
        if (--left[u] == 0) topo.push_back(u);
    // Order against an in-place collective is not a data dependency (a reader of its buffer
    // must stay on its side of it), so it and the readers of its buffer are never pulled. (The
    // optimizer updates, also in place, need no pin: the ordering edges above keep every reader
    // of a parameter or its state on its side of the update, wherever the update is placed.)
    auto inplace_collective = [&](size_t i) {
      const ir::OpDef& def = ir::op_def(nodes[i]->op);
      return def.in_place && def.is_collective();
    };
    std::vector<bool> inplace_buffer(g_.num_values(), false);
    bool any_inplace = false;
    for (size_t i = 0; i < n; ++i)
      if (!dropped_[i] && inplace_collective(i)) {
        any_inplace = true;
        for (const ir::Value* v : nodes[i]->operands) inplace_buffer[size_t(resolve(v)->id)] = true;
      }
    auto pinned = [&](size_t i) {
      if (!any_inplace) return false;
      if (inplace_collective(i)) return true;
      for (const ir::Value* v : nodes[i]->operands)
        if (inplace_buffer[size_t(resolve(v)->id)]) return true;
      return false;
    };
    for (size_t k = topo.size(); k-- > 0;) {
      if (pinned(topo[k])) continue;
      for (size_t u : users(topo[k])) eff[topo[k]] = std::min(eff[topo[k]], eff[u]);
    }
  }
  using Item = std::pair<double, size_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
  for (size_t i = 0; i < n; ++i)
    if (!dropped_[i] && pending[i] == 0) ready.push({eff[i], i});
  std::vector<size_t> order;
  order.reserve(kept);
  while (!ready.empty()) {
    size_t i = ready.top().second;
    ready.pop();
    order.push_back(i);
    for (size_t u : users(i))
      if (--pending[u] == 0) ready.push({eff[u], u});
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
  if (any_replaced_)
    for (size_t i : order)
      for (ir::Value*& v : nodes[i]->operands) v = resolve(v);
  std::vector<ir::Value*> outputs;
  for (const ir::Value* v : g_.outputs()) outputs.push_back(resolve(v));
  g_.set_outputs(std::move(outputs));
  g_.set_node_order(order);  // positions are the edit's node indices
  for (size_t id = 0; id < name_of.size(); ++id)
    if (name_of[id]) g_.rename(g_.values()[id], *name_of[id]);
  return true;
}

}  // namespace dt::passes
