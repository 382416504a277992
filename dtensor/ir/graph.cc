#include "dtensor/ir/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {

const char* intern_origin(std::string_view origin) {
  // Node-based: a string's characters never move once inserted. The origins of imported models
  // are a few per node of the largest model read, never freed.
  static std::mutex mu;
  static std::unordered_set<std::string> pool;
  std::lock_guard<std::mutex> lock(mu);
  return pool.emplace(origin).first->c_str();
}


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

// Reads 8 bytes at a time (names are mostly 2 to 25 characters), with a final avalanche so that
// the low bits (the slot index) depend on every byte.
uint64_t NameTable::hash(std::string_view s) {
  constexpr uint64_t kMul = 0x9e3779b97f4a7c15ull;
  uint64_t h = s.size() * kMul;
  const char* p = s.data();
  size_t n = s.size();
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * kMul;
    h ^= h >> 32;
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * kMul;
  }
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 32);
}

const NameTable::Slot* NameTable::lookup(std::string_view name, std::span<Value* const> values) const {
  if (slots_.empty()) return nullptr;
  const uint64_t h = hash(name);
  const uint32_t tag = uint32_t(h);
  const size_t mask = slots_.size() - 1;
  for (size_t i = tag & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.entry == kEmpty) return nullptr;
    if (s.tag == tag && s.entry != kErased && values[s.entry - kFirstId]->name == name) return &s;
  }
}

Value* NameTable::find(std::string_view name, std::span<Value* const> values) const {
  const Slot* s = lookup(name, values);
  return s ? values[s->entry - kFirstId] : nullptr;
}

bool NameTable::insert(const Value* v, std::span<Value* const> values) {
  if ((used_ + 1) * 4 > slots_.size() * 3) grow(std::max<size_t>(16, slots_.size() * 2));
  const uint64_t h = hash(v->name);
  const uint32_t tag = uint32_t(h);
  const size_t mask = slots_.size() - 1;
  Slot* reuse = nullptr;
  for (size_t i = tag & mask;; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.entry == kEmpty) {
      if (!reuse) {
        reuse = &s;
        ++used_;
      }
      break;
    }
    if (s.entry == kErased) {
      if (!reuse) reuse = &s;
    } else if (s.tag == tag && values[s.entry - kFirstId]->name == v->name) {
      return false;
    }
  }
  *reuse = Slot{tag, uint32_t(v->id) + kFirstId};
  return true;
}

void NameTable::erase(std::string_view name, std::span<Value* const> values) {
  if (const Slot* s = lookup(name, values)) const_cast<Slot*>(s)->entry = kErased;
}

void NameTable::erase_if_names(const Value* v, std::span<Value* const> values) {
  if (const Slot* s = lookup(v->name, values); s && s->entry == uint32_t(v->id) + kFirstId)
    const_cast<Slot*>(s)->entry = kErased;
}

void NameTable::erase_marked(const std::vector<bool>& dead) {
  for (Slot& s : slots_)
    if (s.entry >= kFirstId && s.entry - kFirstId < dead.size() && dead[s.entry - kFirstId]) s.entry = kErased;
}

void NameTable::reserve(size_t n) {
  size_t want = 16;
  while (want * 3 < n * 4) want *= 2;
  if (want > slots_.size()) grow(want);
}

void NameTable::grow(size_t min_slots) {
  size_t n = 16;
  while (n < min_slots) n *= 2;
  DT_CHECK(n <= (size_t(1) << 32)) << "name table of " << n << " slots";
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(n, Slot{});
  used_ = 0;
  // The tag is the hash's low half, which holds the slot index of any table up to 2^32 slots:
  // growing needs no names.
  for (const Slot& s : old) {
    if (s.entry < kFirstId) continue;
    const size_t mask = n - 1;
    for (size_t i = s.tag & mask;; i = (i + 1) & mask) {
      if (slots_[i].entry == kEmpty) {
        slots_[i] = s;
        ++used_;
        break;
      }
    }
  }
}

Value* Graph::new_value(std::string_view name, TensorType&& type, ValueKind kind, SourceLoc loc) {
  Value* v = value_pool_.make();
  v->id = int(values_.size());
  if (name.empty()) v->name = fresh_name();
  else v->name.assign(name);
  v->type = std::move(type);
  v->kind = kind;
  v->loc = loc;
  // The pool slot is not handed out again, so a refused value just stays unused (not in values_).
  if (!by_name_.insert(v, values_)) DT_THROW(ValueError) << "value %" << v->name << " is defined twice";
  values_.push_back(v);
  return v;
}

std::string Graph::fresh_name() {
  while (true) {
    std::string s = std::to_string(next_auto_name_++);
    if (!by_name_.find(s, values_)) return s;
  }
}

Value* Graph::add_input(std::string_view name, TensorType type, SourceLoc loc) {
  Value* v = new_value(name, std::move(type), ValueKind::input, loc);
  inputs_.push_back(v);
  return v;
}

Value* Graph::add_param(std::string_view name, TensorType type, SourceLoc loc) {
  Value* v = new_value(name, std::move(type), ValueKind::param, loc);
  params_.push_back(v);
  return v;
}

void Graph::add_group(const std::string& name, std::vector<int> ranks, SourceLoc loc) {
  if (find_group(name)) DT_THROW(ValueError) << "group " << name << " is declared twice";
  groups_.push_back(GroupDecl{name, std::move(ranks), loc});
}

void Graph::add_result(Node* n, std::string_view name, TensorType&& type) {
  Value* v = new_value(name, std::move(type), ValueKind::result, n->loc);
  v->producer = n;
  v->result_index = int(n->results.size());
  n->results.push_back(v);
}

Node* Graph::make_node(OpKind op, std::vector<Value*> operands, std::vector<Attr> attrs,
                       std::vector<TensorType> result_types, std::vector<std::string> result_names, SourceLoc loc) {
  Node* n = node_pool_.make();
  n->op = op;
  n->operands = std::move(operands);
  n->attrs = std::move(attrs);
  n->loc = loc;
  n->results.reserve(result_types.size());
  for (size_t i = 0; i < result_types.size(); ++i)
    add_result(n, i < result_names.size() ? std::string_view(result_names[i]) : std::string_view(),
               std::move(result_types[i]));
  return n;
}

Node* Graph::append(OpKind op, std::vector<Value*> operands, std::vector<Attr> attrs,
                    std::vector<TensorType> result_types, std::vector<std::string> result_names, SourceLoc loc) {
  nodes_.push_back(make_node(op, std::move(operands), std::move(attrs), std::move(result_types),
                             std::move(result_names), loc));
  return nodes_.back();
}

Node* Graph::append(NodeParts parts) {
  Node* n = node_pool_.make();
  n->op = parts.op;
  n->operands.assign(parts.operands.begin(), parts.operands.end());
  n->attrs = std::move(parts.attrs);
  n->loc = parts.loc;
  n->results.reserve(parts.result_types.size());
  for (size_t i = 0; i < parts.result_types.size(); ++i)
    add_result(n, i < parts.result_names.size() ? parts.result_names[i] : std::string_view(),
               std::move(parts.result_types[i]));
  // Listed only once complete: a refused result name leaves the graph's node list unchanged.
  nodes_.push_back(n);
  return n;
}

Node* Graph::insert(size_t pos, OpKind op, std::vector<Value*> operands, std::vector<Attr> attrs,
                    std::vector<TensorType> result_types, std::vector<std::string> result_names) {
  DT_CHECK(pos <= nodes_.size()) << pos << " > " << nodes_.size();
  Node* n = make_node(op, std::move(operands), std::move(attrs), std::move(result_types), std::move(result_names),
                      SourceLoc{});
  nodes_.insert(nodes_.begin() + ptrdiff_t(pos), n);
  return n;
}

void Graph::erase(size_t pos) {
  DT_CHECK(pos < nodes_.size()) << pos << " >= " << nodes_.size();
  Node* n = nodes_[pos];
  for (Value* r : n->results) {
    by_name_.erase(r->name, values_);
    r->producer = nullptr;
  }
  nodes_.erase(nodes_.begin() + ptrdiff_t(pos));
  release(n);
}

void Graph::release(Node* n) {
  // The pool keeps the node's slot until the graph dies; its vectors' memory is freed now.
  *n = Node{};
}

void Graph::replace_all_uses(Value* from, Value* to) {
  for (auto& n : nodes_)
    for (Value*& v : n->operands)
      if (v == from) v = to;
  for (Value*& v : outputs_)
    if (v == from) v = to;
}

void Graph::set_node_order(const std::vector<Node*>& order) {
  std::unordered_map<const Node*, size_t> slot;
  slot.reserve(nodes_.size() * 2);
  for (size_t i = 0; i < nodes_.size(); ++i) slot.emplace(nodes_[i], i);
  std::vector<size_t> positions;
  positions.reserve(order.size());
  for (Node* n : order) {
    auto it = slot.find(n);
    DT_CHECK(it != slot.end()) << "set_node_order: node not in the graph";
    positions.push_back(it->second);
  }
  set_node_order(positions);
}

void Graph::set_node_order(std::span<const size_t> positions) {
  std::vector<Node*> next;
  next.reserve(positions.size());
  for (size_t i : positions) {
    DT_CHECK(i < nodes_.size() && nodes_[i]) << "set_node_order: node not in the graph or listed twice";
    next.push_back(std::exchange(nodes_[i], nullptr));
  }
  std::vector<Value*> freed;
  for (Node* dropped : nodes_) {
    if (!dropped) continue;
    for (Value* r : dropped->results) {
      freed.push_back(r);
      r->producer = nullptr;
    }
    release(dropped);
  }
  nodes_ = std::move(next);
  // Free the dropped results' names: a probe each when few, one sweep of the table when many.
  if (freed.size() * 16 < by_name_.slots()) {
    for (const Value* r : freed) by_name_.erase_if_names(r, values_);
  } else if (!freed.empty()) {
    std::vector<bool> dead(values_.size(), false);
    for (const Value* r : freed) dead[size_t(r->id)] = true;
    by_name_.erase_marked(dead);
  }
}

void Graph::rename(Value* v, const std::string& name) {
  if (v->name == name) return;
  if (by_name_.find(name, values_)) DT_THROW(ValueError) << "value %" << name << " is defined twice";
  if (by_name_.find(v->name, values_) == v) by_name_.erase(v->name, values_);
  v->name = name;
  by_name_.insert(v, values_);
}

Value* Graph::find(std::string_view name) const { return by_name_.find(name, values_); }

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
  for (const Value* v : values_) {
    Value* c = g.value_pool_.make();
    *c = *v;
    c->producer = nullptr;
    g.values_.push_back(c);
  }
  for (const Value* v : values_)
    if (find(v->name) == v) g.by_name_.insert(g.values_[size_t(v->id)], g.values_);
  auto map = [&](const Value* v) { return g.values_[size_t(v->id)]; };
  for (Value* v : inputs_) g.inputs_.push_back(map(v));
  for (Value* v : params_) g.params_.push_back(map(v));
  for (const Node* n : nodes_) {
    Node* c = g.node_pool_.make();
    c->op = n->op;
    c->attrs = n->attrs;
    c->loc = n->loc;
    c->operands.reserve(n->operands.size());
    for (Value* v : n->operands) c->operands.push_back(map(v));
    c->results.reserve(n->results.size());
    for (Value* v : n->results) {
      Value* r = map(v);
      r->producer = c;
      c->results.push_back(r);
    }
    g.nodes_.push_back(c);
  }
  for (Value* v : outputs_) g.outputs_.push_back(map(v));
  return g;
}

}  // namespace dt::ir
