#include "dtensor/ir/graph.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {

std::string type_str(const TensorType& t) {
  std::string s(dtype_name(t.dtype));
  s += '[';
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (i) s += ", ";
    fmt::format_to(std::back_inserter(s), "{}", t.shape[i]);
  }
  s += ']';
  return s;
}

const Attr& Node::attr(std::string_view name) const {
  int i = op_def(op).attr_index(name);
  DT_CHECK(i >= 0 && size_t(i) < attrs.size()) << op_name(op) << " has no attribute " << name;
  return attrs[size_t(i)];
}

Value* Graph::new_value(const std::string& name, TensorType type, ValueKind kind, SourceLoc loc) {
  auto v = std::make_unique<Value>();
  v->id = int(values_.size());
  v->name = name.empty() ? fresh_name() : name;
  v->type = std::move(type);
  v->kind = kind;
  v->loc = loc;
  Value* p = v.get();
  auto [it, inserted] = by_name_.emplace(std::string_view(p->name), p);
  if (!inserted) DT_THROW(ValueError) << "value %" << p->name << " is defined twice";
  values_.push_back(std::move(v));
  return p;
}

std::string Graph::fresh_name() {
  while (true) {
    std::string s = std::to_string(next_auto_name_++);
    if (!by_name_.count(s)) return s;
  }
}

Value* Graph::add_input(const std::string& name, TensorType type, SourceLoc loc) {
  Value* v = new_value(name, std::move(type), ValueKind::input, loc);
  inputs_.push_back(v);
  return v;
}

Value* Graph::add_param(const std::string& name, TensorType type, SourceLoc loc) {
  Value* v = new_value(name, std::move(type), ValueKind::param, loc);
  params_.push_back(v);
  return v;
}

void Graph::add_group(const std::string& name, std::vector<int> ranks, SourceLoc loc) {
  if (find_group(name)) DT_THROW(ValueError) << "group " << name << " is declared twice";
  groups_.push_back(GroupDecl{name, std::move(ranks), loc});
}

std::unique_ptr<Node> Graph::make_node(OpKind op, std::vector<Value*> operands,
                                       std::vector<Attr> attrs,
                                       const std::vector<TensorType>& result_types,
                                       const std::vector<std::string>& result_names,
                                       SourceLoc loc) {
  auto n = std::make_unique<Node>();
  n->op = op;
  n->operands = std::move(operands);
  n->attrs = std::move(attrs);
  n->loc = loc;
  n->results.reserve(result_types.size());
  static const std::string kEmpty;
  for (size_t i = 0; i < result_types.size(); ++i) {
    const std::string& name = i < result_names.size() ? result_names[i] : kEmpty;
    Value* v = new_value(name, result_types[i], ValueKind::result, loc);
    v->producer = n.get();
    v->result_index = int(i);
    n->results.push_back(v);
  }
  return n;
}

Node* Graph::append(OpKind op, std::vector<Value*> operands, std::vector<Attr> attrs,
                    const std::vector<TensorType>& result_types,
                    const std::vector<std::string>& result_names, SourceLoc loc) {
  nodes_.push_back(make_node(op, std::move(operands), std::move(attrs), result_types,
                             result_names, loc));
  return nodes_.back().get();
}

Node* Graph::insert(size_t pos, OpKind op, std::vector<Value*> operands, std::vector<Attr> attrs,
                    const std::vector<TensorType>& result_types,
                    const std::vector<std::string>& result_names) {
  DT_CHECK(pos <= nodes_.size()) << pos << " > " << nodes_.size();
  auto it = nodes_.insert(nodes_.begin() + ptrdiff_t(pos),
                          make_node(op, std::move(operands), std::move(attrs), result_types,
                                    result_names, SourceLoc{}));
  return it->get();
}

void Graph::erase(size_t pos) {
  DT_CHECK(pos < nodes_.size()) << pos << " >= " << nodes_.size();
  for (Value* r : nodes_[pos]->results) {
    by_name_.erase(r->name);
    r->producer = nullptr;
  }
  nodes_.erase(nodes_.begin() + ptrdiff_t(pos));
}

void Graph::replace_all_uses(Value* from, Value* to) {
  for (auto& n : nodes_)
    for (Value*& v : n->operands)
      if (v == from) v = to;
  for (Value*& v : outputs_)
    if (v == from) v = to;
}

Value* Graph::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const GroupDecl* Graph::find_group(std::string_view name) const {
  for (const GroupDecl& g : groups_)
    if (g.name == name) return &g;
  return nullptr;
}

int Graph::group_size(std::string_view name) const {
  const GroupDecl* g = find_group(name);
  return g ? int(g->ranks.size()) : -1;
}

void Graph::reserve(size_t nodes) {
  nodes_.reserve(nodes);
  values_.reserve(nodes + 16);
  by_name_.reserve(nodes + 16);
}

Graph Graph::clone() const {
  Graph g(name_);
  g.source_ = source_;
  g.groups_ = groups_;
  g.next_auto_name_ = next_auto_name_;
  g.reserve(nodes_.size());
  // Recreate values with the same ids; erased nodes' results stay as unnamed placeholders.
  for (const auto& v : values_) {
    auto c = std::make_unique<Value>(*v);
    c->producer = nullptr;
    g.values_.push_back(std::move(c));
  }
  for (const auto& v : values_) {
    bool live = find(v->name) == v.get();
    if (live) g.by_name_.emplace(std::string_view(g.values_[size_t(v->id)]->name),
                                 g.values_[size_t(v->id)].get());
  }
  auto map = [&](const Value* v) { return g.values_[size_t(v->id)].get(); };
  for (Value* v : inputs_) g.inputs_.push_back(map(v));
  for (Value* v : params_) g.params_.push_back(map(v));
  for (const auto& n : nodes_) {
    auto c = std::make_unique<Node>();
    c->op = n->op;
    c->attrs = n->attrs;
    c->loc = n->loc;
    for (Value* v : n->operands) c->operands.push_back(map(v));
    for (Value* v : n->results) {
      Value* r = map(v);
      r->producer = c.get();
      c->results.push_back(r);
    }
    g.nodes_.push_back(std::move(c));
  }
  for (Value* v : outputs_) g.outputs_.push_back(map(v));
  return g;
}

}  // namespace dt::ir
