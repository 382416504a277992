// Batched rewriting of a Graph for the passes: record new nodes, drops, value replacements and
// position keys, then commit() rebuilds the graph once in O(n log n).
//
// Every node has a position key: an existing node's key is its index, a new node's key is given
// by the pass. commit() emits the nodes in a stable topological order: among the nodes whose
// operands are all emitted, the one with the smallest (key, creation index) goes first. With no
// key changes this is exactly the original order; a pass moves a node by changing its key (a
// wait to just before its first reader: key(reader) - 0.5), and data dependencies always win
// over keys, so no rewrite can produce an invalid order. A node's key also pulls its producers:
// each node is ordered by the smallest key among itself and its transitive readers, except an
// in-place collective and the readers of its buffer, whose order is not a data dependency.
//
// Collectives of one process group keep their relative order: commit() chains every group's
// collectives (an ordering edge from each to the next, which also pulls the earlier one along)
// in their order in the pass's input; a new collective takes the place given by set_order()
// (the replaced or first merged member's index), else its key. Passes decide positions from
// per-rank facts (memory profiles differ where a bias is added on one rank only), and a pull
// across ranks' programs must never change the sequence a group's members issue: that would hang
// (rank_consistency.h proves it after every pass).
//
// A value replaced by a new value whose producer is new hands it its name when the replaced
// value's node is dropped, so readers print unchanged (`%ag_w` stays `%ag_w` after bucketing).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "dtensor/ir/builder.h"
#include "dtensor/ir/graph.h"

namespace dt::passes {

// Readers of every value, by Value::id (nodes in graph order; graph outputs are not listed).
// Stored as one array sliced per value (two allocations in all, not one per value: the passes
// build these on graphs of tens of thousands of nodes).
struct UseLists {
  explicit UseLists(const ir::Graph& graph);
  std::span<const ir::Node* const> users(const ir::Value* v) const {
    const size_t id = size_t(v->id);
    return {users_.data() + begin_[id], begin_[id + 1] - begin_[id]};
  }
  bool is_output(const ir::Value* v) const { return is_output_[size_t(v->id)]; }

 private:
  std::vector<const ir::Node*> users_;
  std::vector<size_t> begin_;  // users of value id are users_[begin_[id], begin_[id + 1])
  std::vector<bool> is_output_;
};

class GraphEdit {
 public:
  explicit GraphEdit(ir::Graph& graph);

  ir::Graph& graph() { return g_; }
  // Returns the node's index in the graph at construction (new nodes: after all old ones).
  size_t index(const ir::Node* node) const {
    if (!node->results.empty()) {
      const size_t id = size_t(node->results[0]->id);
      if (id < index_by_result_.size() && index_by_result_[id] != kNone) return index_by_result_[id];
    }
    return index_slow(node);
  }
  double key(const ir::Node* node) const { return keys_[index(node)]; }
  void set_key(const ir::Node* node, double key) { keys_[index(node)] = key; }
  // Places a new collective (the producer of `result`) in its group's order as if it stood at
  // index `order` of the input (see the class comment).
  void set_order(const ir::Value* result, double order) { order_[index(result->producer)] = order; }

  // Records a new node (single result) at position `key`; its result is named `name`, or a
  // fresh unique name built from `name` when taken ("" gives a numeric name).
  ir::Value* add(ir::OpKind op, std::vector<ir::Value*> operands, const ir::NamedAttrs& attrs, double key,
                 const std::string& name = "");
  // Turns an existing single-result node into `op` reading `operands`, keeping its result value
  // (name, id, readers) and its key: the cheap form of add + replace + drop when the new op
  // computes a value of the same type (checked with the op's inference).
  void morph(const ir::Node* node, ir::OpKind op, std::vector<ir::Value*> operands, const ir::NamedAttrs& attrs);
  // Same, with `attrs` already complete and in schema order (ir::complete_attrs): a pass that
  // turns many nodes into one op completes the attributes once and sets the few that differ.
  void morph_complete(const ir::Node* node, ir::OpKind op, std::vector<ir::Value*> operands, std::vector<ir::Attr> attrs);
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
  static constexpr size_t kNone = SIZE_MAX;
  size_t index_slow(const ir::Node* node) const;
  void record_index(const ir::Node* node, size_t i);

  ir::Graph& g_;
  ir::Builder builder_;
  // Node index by the id of the node's first result (every node has one but for the rare op
  // without results, kept in index_no_result_): a vector lookup instead of hashing a pointer.
  std::vector<size_t> index_by_result_;
  std::unordered_map<const ir::Node*, size_t> index_no_result_;
  std::vector<double> keys_;
  std::vector<double> order_;  // group order of new collectives (NaN: their key)
  std::vector<bool> dropped_;
  std::vector<ir::Value*> replaced_by_;  // by value id
  std::vector<ir::TensorType> types_;    // morph's inferred types (kept: one allocation per edit)
  size_t original_nodes_ = 0;
  bool any_replaced_ = false;  // replace() was called (else resolve() is the identity)
  bool changed_ = false;
};

}  // namespace dt::passes
