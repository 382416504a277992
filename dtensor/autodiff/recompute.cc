#include "dtensor/autodiff/recompute.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "dtensor/core/error.h"
#include "dtensor/ir/builder.h"

namespace dt::autodiff {

using ir::Node;
using ir::Value;

Recompute parse_recompute(std::string_view text) {
  if (text == "none") return Recompute::none;
  if (text == "blocks") return Recompute::blocks;
  DT_THROW(ValueError) << "recompute must be blocks or none, got \"" << text << "\"";
}

std::string_view recompute_name(Recompute r) { return r == Recompute::blocks ? "blocks" : "none"; }

namespace {

// The block of a parameter: the name up to its first all-digit segment that is not the last one
// ("h.3" for "h.3.attn.q_proj.weight"); empty when there is none.
std::string block_of(const std::string& name) {
  size_t start = 0;
  while (true) {
    const size_t dot = name.find('.', start);
    if (dot == std::string::npos) return {};  // the last segment names the tensor, not a block
    const bool digits = dot > start && std::all_of(name.begin() + ptrdiff_t(start), name.begin() + ptrdiff_t(dot),
                                                   [](char c) { return c >= '0' && c <= '9'; });
    if (digits) return name.substr(0, dot);
    start = dot + 1;
  }
}

struct Block {
  std::string name;
  size_t first = 0, last = 0, end = 0;  // first and last parameter reader; ops [first, end)
};

}  // namespace

int recompute_blocks(ir::Graph& g, size_t forward_nodes) {
  const std::vector<Node*> nodes = g.nodes();
  DT_CHECK(forward_nodes <= nodes.size()) << "forward_nodes " << forward_nodes << " > " << nodes.size();
  const size_t nf = forward_nodes;
  // Blocks in the order the forward first reads them; param_block[value id]: index or -1.
  std::vector<Block> blocks;
  std::map<std::string, size_t> index;
  std::vector<int> param_block(g.num_values(), -1);
  for (size_t k = 0; k < nf; ++k)
    for (const Value* v : nodes[k]->operands) {
      if (v->kind != ir::ValueKind::param) continue;
      std::string b = block_of(v->name);
      if (b.empty()) continue;
      auto [it, fresh] = index.try_emplace(b, blocks.size());
      if (fresh) blocks.push_back({std::move(b), k, k, nf});
      param_block[size_t(v->id)] = int(it->second);
      blocks[it->second].last = k;
    }
  if (blocks.empty())
    DT_THROW(ValueError) << "recompute blocks: model " << g.name()
                         << " has no blocks (no parameter named <path>.<index>.<name>, as h.0.attn.q_proj.weight)";
  // A block ends at the first op after its last parameter read that reads another parameter.
  for (size_t b = 0; b < blocks.size(); ++b) {
    Block& blk = blocks[b];
    for (size_t k = blk.last + 1; k < nf && blk.end == nf; ++k)
      for (const Value* v : nodes[k]->operands)
        if (v->kind == ir::ValueKind::param && param_block[size_t(v->id)] != int(b)) blk.end = k;
    if (b > 0 && blocks[b - 1].end > blk.first)
      DT_THROW(ValueError) << "recompute blocks: the ops of blocks " << blocks[b - 1].name << " and " << blk.name
                           << " interleave in the forward of model " << g.name()
                           << " (each block's ops must follow each other)";
  }
  // The block of each forward result, and whether it is kept (read by a forward op outside its
  // block, or an output of the graph).
  std::vector<int> block_of_value(g.num_values(), -1);
  std::vector<char> kept(g.num_values(), 0);
  std::vector<int> block_of_node(nf, -1);
  for (size_t b = 0; b < blocks.size(); ++b)
    for (size_t k = blocks[b].first; k < blocks[b].end; ++k) {
      block_of_node[k] = int(b);
      for (const Value* r : nodes[k]->results) block_of_value[size_t(r->id)] = int(b);
    }
  for (size_t k = 0; k < nf; ++k)
    for (const Value* v : nodes[k]->operands)
      if (block_of_value[size_t(v->id)] >= 0 && block_of_value[size_t(v->id)] != block_of_node[k])
        kept[size_t(v->id)] = 1;
  for (const Value* v : g.outputs()) kept[size_t(v->id)] = 1;

  auto fresh_name = [&](const std::string& base) {
    std::string name = base;
    for (int i = 1; g.find(name); ++i) name = base + "_" + std::to_string(i);
    return name;
  };
  ir::Builder builder(g);
  std::unordered_map<const Value*, Value*> copy;                 // recomputed values
  std::vector<std::unordered_map<const Value*, Value*>> inputs(blocks.size());  // per block: input views
  std::vector<const Node*> anchor(blocks.size(), nullptr);      // first backward reader
  std::unordered_map<const Node*, std::vector<Node*>> before;  // recomputed ops, by that reader
  auto recompute = [&](auto& self, Value* v, int b) -> Value* {
    if (auto it = copy.find(v); it != copy.end()) return it->second;
    const Node* p = v->producer;
    std::vector<Value*> operands;
    for (Value* o : p->operands) {
      if (block_of_value[size_t(o->id)] == b && !kept[size_t(o->id)]) {
        operands.push_back(self(self, o, b));
      } else if (o->kind == ir::ValueKind::param) {
        operands.push_back(o);
      } else {
        Value*& view = inputs[size_t(b)][o];
        if (!view) {
          view = builder.named(fresh_name(o->name + ".recompute")).reshape(o, o->type.shape);
          before[anchor[size_t(b)]].push_back(view->producer);
        }
        operands.push_back(view);
      }
    }
    std::vector<ir::TensorType> types;
    std::vector<std::string> names;
    for (const Value* r : p->results) {
      types.push_back(r->type);
      names.push_back(fresh_name(r->name + ".recompute"));
    }
    Node* c = g.append(p->op, std::move(operands), p->attrs, std::move(types), std::move(names), p->loc);
    before[anchor[size_t(b)]].push_back(c);
    for (size_t k = 0; k < p->results.size(); ++k) copy[p->results[k]] = c->results[k];
    return copy.at(v);
  };
  for (size_t k = nf; k < nodes.size(); ++k)
    for (Value*& v : nodes[k]->operands) {
      const int b = block_of_value[size_t(v->id)];
      if (b < 0 || kept[size_t(v->id)]) continue;
      if (!anchor[size_t(b)]) anchor[size_t(b)] = nodes[k];
      v = recompute(recompute, v, b);
    }
  if (before.empty()) return 0;
  std::vector<Node*> order;
  order.reserve(g.nodes().size());
  for (Node* n : nodes) {
    if (auto it = before.find(n); it != before.end()) order.insert(order.end(), it->second.begin(), it->second.end());
    order.push_back(n);
  }
  g.set_node_order(order);
  return int(before.size());
}

}  // namespace dt::autodiff
