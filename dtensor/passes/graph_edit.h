// Batched rewriting of a Graph for the passes: record new nodes, drops, value replacements and
// position keys, then commit() rebuilds the graph once in O(n log n).
//
// Every node has a position key: an existing node's key is its index, a new node's key is given
// by the pass. commit() emits the nodes in a stable topological order: among the nodes whose
// operands are all emitted, the one with the smallest (key, creation index) goes first. With no
// key changes this is exactly the original order; a pass moves a node by changing its key (a
// wait to just before its first reader: key(reader) - 0.5), and data dependencies always win
// over keys, so no rewrite can produce an invalid order. A node's key also pulls its producers:
// each node is ordered by the smallest key among itself and its transitive readers.
//
// A value replaced by a new value whose producer is new hands it its name when the replaced
// value's node is dropped, so readers print unchanged (`%ag_w` stays `%ag_w` after bucketing).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "dtensor/ir/builder.h"
#include "dtensor/ir/graph.h"

namespace dt::passes {

// Readers of every value, by Value::id (nodes in graph order; graph outputs are not listed).
struct UseLists {
  explicit UseLists(const ir::Graph& graph);
  const std::vector<const ir::Node*>& users(const ir::Value* v) const { return users_[size_t(v->id)]; }
  bool is_output(const ir::Value* v) const { return is_output_[size_t(v->id)]; }

 private:
  std::vector<std::vector<const ir::Node*>> users_;
  std::vector<bool> is_output_;
};

class GraphEdit {
 public:
  explicit GraphEdit(ir::Graph& graph);

  ir::Graph& graph() { return g_; }
  // Returns the node's index in the graph at construction (new nodes: after all old ones).
  size_t index(const ir::Node* node) const;
  double key(const ir::Node* node) const { return keys_[index(node)]; }
  void set_key(const ir::Node* node, double key) { keys_[index(node)] = key; }

  // Records a new node (single result) at position `key`; its result is named `name`, or a
  // fresh unique name built from `name` when taken ("" gives a numeric name).
  ir::Value* add(ir::OpKind op, std::vector<ir::Value*> operands, const ir::NamedAttrs& attrs, double key,
                 const std::string& name = "");
  void drop(const ir::Node* node) { dropped_[index(node)] = true; }
  bool dropped(const ir::Node* node) const { return dropped_[index(node)]; }
  // Makes every reader of `from` (and graph outputs) read `to`.
  void replace(const ir::Value* from, ir::Value* to);
  // Returns the value that now stands for v (following replacements).
  ir::Value* resolve(const ir::Value* v) const;
  // Returns a name not used in the graph, `base` when free, else base_1, base_2, ...
  std::string unique_name(const std::string& base) const;

  // Rebuilds the graph: stable topological order by key, dropped nodes removed, replacements
  // applied. Returns whether the node list changed. The edit must not be used afterwards.
  bool commit();

 private:
  ir::Graph& g_;
  ir::Builder builder_;
  std::unordered_map<const ir::Node*, size_t> index_;
  std::vector<double> keys_;
  std::vector<bool> dropped_;
  std::vector<ir::Value*> replaced_by_;  // by value id
  size_t original_nodes_ = 0;
  bool changed_ = false;
};

}  // namespace dt::passes
