// Static estimate of the live memory of a per-rank program, in the interpreter's model: a node's
// result is allocated at its node and freed after its last reader (graph outputs live to the end);
// graph inputs and parameters belong to the caller and are not counted. A wait_tensor result is the
// collective's own buffer, and an in-place collective's result its operand's, so neither is counted
// twice: the buffer stays live until the last reader of what aliases it. Other views (view, slice, flat_view) are counted as copies, which only
// makes the estimate conservative.
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <vector>

#include "dtensor/ir/graph.h"
#include "dtensor/ir/op_kind.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/passes/graph_edit.h"

namespace dt::passes {

// Ops whose result is their operand's buffer (a wait, an in-place collective: OpDef::in_place):
// not counted again.
inline bool reuses_operand_buffer(ir::OpKind op) {
  return op == ir::OpKind::wait_tensor || ir::op_def(op).in_place;
}

// Returns the last position that reads `v` or what it stands for (the wait of a collective
// result), n - 1 for graph outputs, or `def` when nothing reads it.
// `pos(node)` gives a node's position.
template <typename PositionFn>
size_t last_use(const ir::Value* v, const UseLists& uses, const PositionFn& pos, size_t n, size_t def) {
  if (uses.is_output(v)) return n - 1;
  size_t last = def;
  for (const ir::Node* u : uses.users(v)) {
    size_t i = pos(u);
    // A collective's buffer is read through its wait (and an in-place collective's): follow it.
    if (reuses_operand_buffer(u->op)) i = last_use(u->result(), uses, pos, n, i);
    last = std::max(last, i);
  }
  return last;
}

// Returns live bytes at each position of the graph's current order (see the model above).
std::vector<int64_t> live_bytes_profile(const ir::Graph& graph);
// Same, for a pass that already has the graph's use lists and node positions.
std::vector<int64_t> live_bytes_profile(const ir::Graph& graph, const UseLists& uses, const GraphEdit& edit);
// Returns the largest entry of live_bytes_profile(graph) (0 for an empty graph).
int64_t estimate_peak_bytes(const ir::Graph& graph);

// One result counted in live_bytes_profile at a position: the value, the position of its node and
// of its last use (the buffer's live range), and its bytes.
struct LiveValue {
  const ir::Value* value = nullptr;
  size_t def = 0, last = 0;
  int64_t bytes = 0;
};
// Returns the results live at `position` (their bytes sum to live_bytes_profile(graph)[position]),
// largest first: what a memory report lists at the peak.
std::vector<LiveValue> live_values_at(const ir::Graph& graph, size_t position);

// Range add / range max over positions [0, n): the bucketing pass keeps the live-bytes profile of
// the schedule it is building in one, so that checking a bucket's live range against the budget
// costs O(log n) instead of a scan of the range.
class MaxSegmentTree {
 public:
  explicit MaxSegmentTree(const std::vector<int64_t>& values);
  // Adds `delta` at every position in [lo, hi] (inclusive; nothing when lo > hi).
  void add(size_t lo, size_t hi, int64_t delta);
  // Returns the largest value in [lo, hi] (inclusive; a very negative value when lo > hi).
  int64_t max(size_t lo, size_t hi) const;

 private:
  void add(size_t node, size_t l, size_t r, size_t lo, size_t hi, int64_t delta);
  int64_t max(size_t node, size_t l, size_t r, size_t lo, size_t hi) const;
  size_t n_;
  std::vector<int64_t> max_, pending_;  // pending_: added to the whole subtree, not yet pushed down
};

}  // namespace dt::passes
