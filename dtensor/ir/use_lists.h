// Graph analysis shared by the passes, the interpreter, the fusions and plan resolution: who reads
// each value (UseLists) and where each node stands (NodePositions). Counting readers by hand in a
// consumer is what these replace: one definition of "reader" (a node reading a value twice is one
// reader; graph outputs are not readers but are flagged) for every stage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "dtensor/ir/graph.h"

namespace dt::ir {

// Readers of every value, by Value::id (nodes in graph order; graph outputs are not listed).
// Stored as one array sliced per value (two allocations in all, not one per value: the passes
// build these on graphs of tens of thousands of nodes).
struct UseLists {
  explicit UseLists(const Graph& graph);
  std::span<const Node* const> users(const Value* v) const {
    const size_t id = size_t(v->id);
    return {users_.data() + begin_[id], begin_[id + 1] - begin_[id]};
  }
  bool is_output(const Value* v) const { return is_output_[size_t(v->id)]; }
  // The one node that reads `v` when v has exactly one reader and is not a graph output (the
  // condition for a fusion to absorb v), else null.
  const Node* sole_user(const Value* v) const {
    const auto u = users(v);
    return u.size() == 1 && !is_output(v) ? u[0] : nullptr;
  }

 private:
  std::vector<const Node*> users_;
  std::vector<size_t> begin_;  // users of value id are users_[begin_[id], begin_[id + 1])
  std::vector<bool> is_output_;
};

// The position of each node: its index in the graph's order at construction, plus positions
// recorded later (GraphEdit's new nodes). Looked up by the id of the node's first result (every
// node has one but for the rare op without results, kept in a map): a vector lookup instead of
// hashing a pointer.
class NodePositions {
 public:
  explicit NodePositions(const Graph& graph);
  size_t operator()(const Node* node) const {
    if (!node->results.empty()) {
      const size_t id = size_t(node->results[0]->id);
      if (id < by_result_.size() && by_result_[id] != kNone) return by_result_[id];
    }
    return slow(node);
  }
  void record(const Node* node, size_t position);

 private:
  static constexpr size_t kNone = SIZE_MAX;
  size_t slow(const Node* node) const;

  std::vector<size_t> by_result_;
  std::unordered_map<const Node*, size_t> no_result_;
};

}  // namespace dt::ir
