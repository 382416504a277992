// Static estimate of the live memory of a per-rank program, in the interpreter's model: a node's
// result is allocated at its node and freed after its last reader (graph outputs live to the end);
// graph inputs and parameters belong to the caller and are not counted. A wait_tensor result is the
// collective's own buffer (OpDef::result_is_operand), and an in-place op's result the operand
// buffer it is written into (OpDef::written_operand), so neither is counted twice: the buffer stays
// live until the last reader of what aliases it. An optimizer update's results are its parameter
// and state operands, counted nowhere (the training loop hands the interpreter its parameters to
// update in place; a caller that does not pays a copy the estimate does not see). Other views
// (view, slice, flat_view) are counted as copies, which only makes the estimate conservative.
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <vector>

#include "dtensor/ir/graph.h"
#include "dtensor/ir/op_kind.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/graph_edit.h"

namespace dt::passes {

// Returns the result of `u` that is the buffer of its operand `v` (a wait's, or an in-place op's
// result written into v), or null.
inline const ir::Value* result_in_buffer_of(const ir::Node& u, const ir::Value* v) {
  const ir::OpDef& def = ir::op_def(u.op);
  for (size_t k = 0; k < u.results.size(); ++k) {
    const int j = def.buffer_operand(k);
    if (j >= 0 && u.operands[size_t(j)] == v) return u.results[k];
  }
  return nullptr;
}
// Returns true when result k of `node` is an operand's buffer (not counted of its own).
inline bool result_reuses_buffer(const ir::Node& node, size_t k) { return ir::op_def(node.op).buffer_operand(k) >= 0; }

// Returns the last position that reads `v` or what it stands for (the wait of a collective
// result, the result an in-place op writes into v), n - 1 for graph outputs, or `def` when
// nothing reads it. `pos(node)` gives a node's position.
template <typename PositionFn>
size_t last_use(const ir::Value* v, const ir::UseLists& uses, const PositionFn& pos, size_t n, size_t def) {
  if (uses.is_output(v)) return n - 1;
  size_t last = def;
  for (const ir::Node* u : uses.users(v)) {
    size_t i = pos(u);
    // A collective's buffer is read through its wait, an in-place op's through its result.
    if (const ir::Value* r = result_in_buffer_of(*u, v)) i = last_use(r, uses, pos, n, i);
    last = std::max(last, i);
  }
  return last;
}

// Returns live bytes at each position of the graph's current order (see the model above).
std::vector<int64_t> live_bytes_profile(const ir::Graph& graph);
// Same, for a pass that already has the graph's use lists and node positions.
std::vector<int64_t> live_bytes_profile(const ir::Graph& graph, const ir::UseLists& uses, const ir::GraphEdit& edit);
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
  // Returns the last position in [lo, hi] whose value is above `threshold`, or SIZE_MAX when
  // none is (O(log n): the overlap scheduler's "how far back may this collective move").
  size_t last_above(size_t lo, size_t hi, int64_t threshold) const;

 private:
  size_t last_above(size_t node, size_t l, size_t r, size_t lo, size_t hi, int64_t threshold, int64_t above) const;
  void add(size_t node, size_t l, size_t r, size_t lo, size_t hi, int64_t delta);
  int64_t max(size_t node, size_t l, size_t r, size_t lo, size_t hi) const;
  size_t n_;
  std::vector<int64_t> max_, pending_;  // pending_: added to the whole subtree, not yet pushed down
};

}  // namespace dt::passes
