// Overlap scheduling: issue each collective as early as its inputs allow and wait for it as late
// as its readers allow, so communication runs behind the compute in between, without letting the
// live memory of the schedule pass a budget.
//
// Memory model: a node result is live from its node to its last reader (outputs to the end);
// live[p] is the sum over values live at position p. Moving a collective issued at position c to
// just before position q (q < c) keeps its output — and the output of a copy-in / chunk-cat that
// only feeds it and moves with it — live over [q, c) as well. Collectives are taken in graph order;
// each moves to the smallest q after its inputs' producers such that max(live[q..c)) + extra stays
// within the budget (default: the original peak, so peak memory never grows), and the profile (a
// segment tree: each move costs O(log n)) is updated before the next one. A collective never moves
// above the previous collective of its group (as placed): a group's collectives keep their order
// (GraphEdit would pull the earlier one up with it, outside this memory model). Nor does an
// all_gather move above the first use of the group's previous all_gather: as FSDP's prefetch, one
// gather is in flight while the previous one is used. Without that bound a training step's
// parameter gathers, which are ready at the start, all climb there while the budget (the peak,
// reached later in the step) allows: every layer's gathered parameters live at once through the
// forward (on the example gpt with fsdp on 4 ranks, 65 MiB of live results at the first node
// instead of 37 at the step's real peak). Waits then sink to just before their first reader.
#include <algorithm>
#include <map>
#include <string_view>

#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/graph_edit.h"
#include "dtensor/passes/memory_estimate.h"
#include "dtensor/passes/pass.h"

namespace dt::passes {

using ir::GraphEdit;
using ir::UseLists;

namespace {

bool schedule_overlap(ir::Graph& graph, size_t budget_bytes) {
  const auto& nodes = graph.nodes();
  const size_t n = nodes.size();
  if (n == 0) return false;
  UseLists uses(graph);
  GraphEdit edit(graph);

  // Live-bytes profile of the current order (difference array, then prefix sums).
  std::vector<int64_t> delta(n + 1, 0);
  for (size_t i = 0; i < n; ++i)
    for (const ir::Value* r : nodes[i]->results) {
      size_t last = i;
      for (const ir::Node* u : uses.users(r)) last = std::max(last, edit.index(u));
      if (uses.is_output(r)) last = n - 1;
      delta[i] += int64_t(r->type.nbytes());
      delta[last + 1] -= int64_t(r->type.nbytes());
    }
  std::vector<int64_t> live(n);
  int64_t acc = 0, peak = 0;
  for (size_t i = 0; i < n; ++i) {
    acc += delta[i];
    live[i] = acc;
    peak = std::max(peak, acc);
  }
  const int64_t budget = budget_bytes ? int64_t(budget_bytes) : peak;
  MaxSegmentTree profile(live);

  // Per group: the position the group's previous collective was placed at, and the first use of
  // its previous all_gather (the gathered data read through the wait and bucket split-outs).
  std::map<std::string_view, size_t> group_floor, gather_floor;
  auto first_use = [&](const ir::Node* coll) {
    size_t first = n;
    for (const ir::Node* w : uses.users(coll->result())) {
      if (w->op != ir::OpKind::wait_tensor) continue;
      for (const ir::Node* u : uses.users(w->result())) {
        if (u->op != ir::OpKind::bucket_split_out) {
          first = std::min(first, edit.index(u));
          continue;
        }
        for (const ir::Node* x : uses.users(u->result())) first = std::min(first, edit.index(x));
      }
    }
    return first;
  };
  for (size_t c = 0; c < n; ++c) {
    const ir::Node* coll = nodes[c];
    if (!ir::op_def(coll->op).is_collective()) continue;
    size_t& floor = group_floor[coll->attr_str("group")];
    if (!ir::op_def(coll->op).needs_wait) {  // blocking (one-shot): it stays, and bounds the next
      floor = c;
      continue;
    }
    // The collective moves together with a prep node that only feeds it.
    const ir::Node* prep = nullptr;
    const ir::Value* x = coll->operands.empty() ? nullptr : coll->operands[0];  // a recv has none
    if (x && x->producer && ir::op_def(x->producer->op).comm_prep && uses.users(x).size() == 1 && !uses.is_output(x))
      prep = x->producer;
    const ir::Node* head = prep ? prep : coll;
    size_t earliest = 0;
    for (const ir::Value* v : head->operands)
      if (v->producer) earliest = std::max(earliest, edit.index(v->producer) + 1);
    earliest = std::max(earliest, floor);
    const bool gather = coll->op == ir::OpKind::all_gather_into_tensor;
    if (gather) {
      auto [it, fresh] = gather_floor.try_emplace(coll->attr_str("group"), 0);
      earliest = std::max(earliest, it->second);
      it->second = std::max(it->second, std::min(first_use(coll), n - 1));
    }
    size_t start = prep ? edit.index(prep) : c;
    floor = start;
    if (earliest >= start) continue;
    int64_t extra = int64_t(coll->result()->type.nbytes()) + (prep ? int64_t(prep->result()->type.nbytes()) : 0);
    // q: just after the last position in [earliest, start) whose live bytes plus `extra` would
    // pass the budget (found in O(log n), so the pass stays linear in the collectives).
    const size_t over = profile.last_above(earliest, start - 1, budget - extra);
    const size_t q = over == SIZE_MAX ? earliest : over + 1;
    if (q == start) continue;
    floor = q;
    profile.add(q, start - 1, extra);
    const double key = double(q) - 0.5;
    if (prep) edit.set_key(prep, key);
    edit.set_key(coll, key + 0.25);
  }
  // Waits as late as their readers allow.
  for (const auto& node : nodes) {
    if (node->op != ir::OpKind::wait_tensor) continue;
    double first = double(n);
    for (const ir::Node* u : uses.users(node->result())) first = std::min(first, edit.key(u));
    const ir::Node* coll = node->operands[0]->producer;
    if (coll && ir::op_def(coll->op).in_place)
      for (const ir::Node* u : uses.users(coll->operands[0]))
        if (u != coll && edit.index(u) > edit.index(coll)) first = std::min(first, edit.key(u));
    edit.set_key(node, first - 0.5);
  }
  return edit.commit();
}

}  // namespace

PassPtr make_overlap_scheduling_pass(const PassOptions& o) {
  return make_pass("overlap-scheduling",
                   "issue collectives as early as inputs and the memory budget allow, wait as late as readers allow",
                   [budget = o.memory_budget_bytes](ir::Graph& g) { return schedule_overlap(g, budget); });
}

}  // namespace dt::passes
