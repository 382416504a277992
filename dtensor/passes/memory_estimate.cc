#include "dtensor/passes/memory_estimate.h"

#include <algorithm>
#include <limits>

namespace dt::passes {

using ir::GraphEdit;
using ir::UseLists;

namespace {
// Padding leaves and empty ranges; far from INT64_MIN so that adding to it cannot overflow.
constexpr int64_t kNone = std::numeric_limits<int64_t>::min() / 4;
}  // namespace

namespace {

template <typename PositionFn>
std::vector<int64_t> profile(const ir::Graph& graph, const UseLists& uses, const PositionFn& pos) {
  const auto& nodes = graph.nodes();
  const size_t n = nodes.size();
  std::vector<int64_t> delta(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < nodes[i]->results.size(); ++k) {
      if (result_reuses_buffer(*nodes[i], k)) continue;  // counted with the buffer it reuses
      const ir::Value* r = nodes[i]->results[k];
      size_t last = last_use(r, uses, pos, n, i);
      delta[i] += int64_t(r->type.nbytes());
      delta[last + 1] -= int64_t(r->type.nbytes());
    }
  }
  std::vector<int64_t> live(n);
  int64_t acc = 0;
  for (size_t i = 0; i < n; ++i) live[i] = acc += delta[i];
  return live;
}

}  // namespace

std::vector<int64_t> live_bytes_profile(const ir::Graph& graph) {
  return profile(graph, UseLists(graph), ir::NodePositions(graph));
}

std::vector<int64_t> live_bytes_profile(const ir::Graph& graph, const UseLists& uses, const GraphEdit& edit) {
  return profile(graph, uses, [&](const ir::Node* u) { return edit.index(u); });
}

int64_t estimate_peak_bytes(const ir::Graph& graph) {
  std::vector<int64_t> live = live_bytes_profile(graph);
  return live.empty() ? 0 : *std::max_element(live.begin(), live.end());
}

std::vector<LiveValue> live_values_at(const ir::Graph& graph, size_t position) {
  const auto& nodes = graph.nodes();
  const UseLists uses(graph);
  const ir::NodePositions pos(graph);
  std::vector<LiveValue> live;
  for (size_t i = 0; i <= position && i < nodes.size(); ++i) {
    for (size_t k = 0; k < nodes[i]->results.size(); ++k) {
      if (result_reuses_buffer(*nodes[i], k)) continue;  // as profile(): counted with its buffer
      const ir::Value* r = nodes[i]->results[k];
      const size_t last = last_use(r, uses, pos, nodes.size(), i);
      if (last >= position) live.push_back({r, i, last, int64_t(r->type.nbytes())});
    }
  }
  std::sort(live.begin(), live.end(), [](const LiveValue& a, const LiveValue& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.def < b.def;
  });
  return live;
}

MaxSegmentTree::MaxSegmentTree(const std::vector<int64_t>& values) : n_(values.size()) {
  size_t size = 1;
  while (size < n_) size *= 2;
  max_.assign(2 * size, kNone);
  pending_.assign(2 * size, 0);
  for (size_t i = 0; i < n_; ++i) max_[size + i] = values[i];
  for (size_t i = size - 1; i >= 1; --i) max_[i] = std::max(max_[2 * i], max_[2 * i + 1]);
  n_ = size;  // positions past values.size() hold INT64_MIN and are never asked for
}

void MaxSegmentTree::add(size_t lo, size_t hi, int64_t delta) {
  if (lo <= hi && n_) add(1, 0, n_ - 1, lo, hi, delta);
}

void MaxSegmentTree::add(size_t node, size_t l, size_t r, size_t lo, size_t hi, int64_t delta) {
  if (hi < l || r < lo) return;
  if (lo <= l && r <= hi) {
    max_[node] += delta;
    pending_[node] += delta;
    return;
  }
  size_t mid = (l + r) / 2;
  add(2 * node, l, mid, lo, hi, delta);
  add(2 * node + 1, mid + 1, r, lo, hi, delta);
  max_[node] = std::max(max_[2 * node], max_[2 * node + 1]) + pending_[node];
}

int64_t MaxSegmentTree::max(size_t lo, size_t hi) const {
  if (lo > hi || !n_) return kNone;
  return max(1, 0, n_ - 1, lo, hi);
}

int64_t MaxSegmentTree::max(size_t node, size_t l, size_t r, size_t lo, size_t hi) const {
  if (hi < l || r < lo) return kNone;
  if (lo <= l && r <= hi) return max_[node];
  size_t mid = (l + r) / 2;
  return std::max(max(2 * node, l, mid, lo, hi), max(2 * node + 1, mid + 1, r, lo, hi)) + pending_[node];
}

size_t MaxSegmentTree::last_above(size_t lo, size_t hi, int64_t threshold) const {
  if (lo > hi || !n_) return SIZE_MAX;
  return last_above(1, 0, n_ - 1, lo, hi, threshold, 0);
}

// `above`: the sum of the pending adds of the node's ancestors (its values are max_ + above).
size_t MaxSegmentTree::last_above(size_t node, size_t l, size_t r, size_t lo, size_t hi, int64_t threshold,
                                  int64_t above) const {
  if (hi < l || r < lo || max_[node] == kNone || max_[node] + above <= threshold) return SIZE_MAX;
  if (l == r) return l;
  const size_t mid = (l + r) / 2;
  const int64_t below = above + pending_[node];
  const size_t right = last_above(2 * node + 1, mid + 1, r, lo, hi, threshold, below);
  return right != SIZE_MAX ? right : last_above(2 * node, l, mid, lo, hi, threshold, below);
}

}  // namespace dt::passes
