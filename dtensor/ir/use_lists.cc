#include "dtensor/ir/use_lists.h"

#include <algorithm>
#include <utility>

#include "dtensor/core/error.h"

namespace dt::ir {

UseLists::UseLists(const Graph& graph) : begin_(graph.num_values() + 1, 0), is_output_(graph.num_values(), false) {
  // One sweep over the nodes collects (value, reader) pairs (a node reading a value twice counts
  // once: its operands are few, so compare with the earlier ones); a counting sort by value then
  // places them. The graph is walked once because on large graphs each node visit is a cache miss.
  std::vector<std::pair<uint32_t, const Node*>> reads;
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
  for (const Value* v : graph.outputs()) is_output_[size_t(v->id)] = true;
}

NodePositions::NodePositions(const Graph& graph) : by_result_(graph.num_values(), kNone) {
  const auto& nodes = graph.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) record(nodes[i], i);
}

void NodePositions::record(const Node* node, size_t position) {
  if (node->results.empty()) {
    no_result_.emplace(node, position);
    return;
  }
  const size_t id = size_t(node->results[0]->id);
  if (id >= by_result_.size()) by_result_.resize(std::max(id + 1, by_result_.size() * 2), kNone);
  by_result_[id] = position;
}

size_t NodePositions::slow(const Node* node) const {
  auto it = no_result_.find(node);
  DT_CHECK(it != no_result_.end()) << "node not in the graph";
  return it->second;
}

}  // namespace dt::ir
