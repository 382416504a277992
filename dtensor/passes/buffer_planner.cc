#include "dtensor/passes/buffer_planner.h"

#include <algorithm>

#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/use_lists.h"
#include "dtensor/passes/memory_estimate.h"
#include "dtensor/passes/pass.h"

namespace dt::passes {

using ir::UseLists;

namespace {

constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Live ranges of node results, following aliases (the part shared by planning and checking).
class LiveRanges {
 public:
  explicit LiveRanges(const ir::Graph& graph)
      : num_nodes_(graph.nodes().size()), uses_(graph), pos_(graph.num_values(), 0) {
    for (size_t i = 0; i < num_nodes_; ++i)
      for (const ir::Value* r : graph.nodes()[i]->results) pos_[size_t(r->id)] = i;
  }

  size_t position(const ir::Value* v) const { return pos_[size_t(v->id)]; }
  const UseLists& uses() const { return uses_; }

  // Returns the last position at which v or a value aliasing it is read, or nodes().size() when
  // one of them is a graph output. A collective reading the buffer keeps it until its wait.
  size_t last_use(const ir::Value* v) {
    size_t last = position(v);
    stack_.assign(1, v);
    while (!stack_.empty()) {
      const ir::Value* x = stack_.back();
      stack_.pop_back();
      if (uses_.is_output(x)) return num_nodes_;
      for (const ir::Node* u : uses_.users(x)) {
        last = std::max(last, position(u->result()));
        const ir::OpDef& def = ir::op_def(u->op);
        if (def.result_aliases_operand) {
          for (const ir::Value* r : u->results) stack_.push_back(r);
        } else if (def.in_place) {
          // An optimizer update writes x in place: its result is x's buffer, read on after it.
          if (const ir::Value* r = result_in_buffer_of(*u, x)) stack_.push_back(r);
        } else if (def.needs_wait) {
          for (const ir::Value* r : u->results)
            for (const ir::Node* w : uses_.users(r))
              if (w->op == ir::OpKind::wait_tensor) last = std::max(last, position(w->result()));
        }
      }
    }
    return last;
  }

 private:
  size_t num_nodes_;
  UseLists uses_;
  std::vector<size_t> pos_;
  std::vector<const ir::Value*> stack_;
};

bool overlaps(const CommBuffer& a, const CommBuffer& b) {
  return a.first <= b.last && b.first <= a.last && a.offset < b.offset + align_up(b.bytes) &&
         b.offset < a.offset + align_up(a.bytes);
}

}  // namespace

const CommBuffer* CommBufferPlan::find(const ir::Value* v) const {
  for (const CommBuffer& b : buffers)
    if (b.value == v) return &b;
  return nullptr;
}

namespace {

// The comm buffers of a program with their live ranges (offsets not yet placed).
std::vector<CommBuffer> collect_buffers(const ir::Graph& graph) {
  const auto& nodes = graph.nodes();
  LiveRanges live(graph);
  std::vector<CommBuffer> buffers;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& n = *nodes[i];
    const ir::OpDef& def = ir::op_def(n.op);
    if (!def.writes_preallocated_out) continue;
    bool read_by_collective = false;
    for (const ir::Node* u : live.uses().users(n.result())) read_by_collective |= ir::op_def(u->op).needs_wait;
    if (!def.needs_wait && !read_by_collective) continue;
    const size_t last = live.last_use(n.result());
    if (last >= nodes.size()) continue;  // aliases a graph output
    buffers.push_back({n.result(), 0, n.result()->type.nbytes(), i, last});
  }
  return buffers;
}

// Places buffers largest first at the lowest aligned offset clear of every placed buffer they
// conflict with (conflict(i, j): live at the same time); returns the arena bytes used.
template <typename Conflict>
size_t place_buffers(std::vector<CommBuffer>& buffers, Conflict conflict) {
  std::vector<size_t> order(buffers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return buffers[a].bytes > buffers[b].bytes; });
  std::vector<size_t> placed;
  std::vector<std::pair<size_t, size_t>> taken;
  size_t total = 0;
  for (size_t k : order) {
    CommBuffer& b = buffers[k];
    taken.clear();
    for (size_t p : placed)
      if (conflict(p, k)) taken.push_back({buffers[p].offset, buffers[p].offset + align_up(buffers[p].bytes)});
    std::sort(taken.begin(), taken.end());
    size_t offset = 0;
    for (const auto& [lo, hi] : taken) {
      if (offset + align_up(b.bytes) <= lo) break;
      offset = std::max(offset, hi);
    }
    b.offset = offset;
    total = std::max(total, offset + align_up(b.bytes));
    placed.push_back(k);
  }
  return total;
}

bool live_together(const CommBuffer& a, const CommBuffer& b) { return a.first <= b.last && b.first <= a.last; }

}  // namespace

CommBufferPlan plan_comm_buffers(const ir::Graph& graph) {
  CommBufferPlan plan;
  plan.buffers = collect_buffers(graph);
  plan.total_bytes =
      place_buffers(plan.buffers, [&](size_t a, size_t b) { return live_together(plan.buffers[a], plan.buffers[b]); });
  return plan;
}

std::optional<size_t> plan_symmetric_comm_buffers(const std::vector<ir::Graph*>& programs) {
  if (programs.empty()) return 0;
  std::vector<std::vector<CommBuffer>> per(programs.size());
  for (size_t r = 0; r < programs.size(); ++r) per[r] = collect_buffers(*programs[r]);
  // Buffer k of every program must be the same comm buffer: same producing op, in the same order.
  for (size_t r = 1; r < programs.size(); ++r) {
    if (per[r].size() != per[0].size()) return std::nullopt;
    for (size_t k = 0; k < per[0].size(); ++k)
      if (per[r][k].value->producer->op != per[0][k].value->producer->op) return std::nullopt;
  }
  // One slot per buffer index: the largest size, in conflict with another slot when the two
  // buffers are live together in any program.
  std::vector<CommBuffer> slots = per[0];
  for (size_t k = 0; k < slots.size(); ++k)
    for (const auto& p : per) slots[k].bytes = std::max(slots[k].bytes, p[k].bytes);
  const size_t total = place_buffers(slots, [&](size_t a, size_t b) {
    for (const auto& p : per)
      if (live_together(p[a], p[b])) return true;
    return false;
  });
  for (size_t r = 0; r < programs.size(); ++r) {
    CommBufferPlan plan;
    plan.buffers = per[r];
    for (size_t k = 0; k < slots.size(); ++k) plan.buffers[k].offset = slots[k].offset;
    apply_comm_buffer_plan(*programs[r], plan);
  }
  return total;
}

void apply_comm_buffer_plan(ir::Graph& graph, const CommBufferPlan& plan) {
  for (const auto& n : graph.nodes())
    if (ir::op_def(n->op).writes_preallocated_out) n->attrs.back() = int64_t(-1);
  for (const CommBuffer& b : plan.buffers) b.value->producer->attrs.back() = int64_t(b.offset);
}

namespace {
std::vector<int64_t> arena_layout(const ir::Graph& graph) {
  std::vector<int64_t> offsets;
  for (const ir::Node* n : graph.nodes())
    if (ir::arena_offset(*n) >= 0) offsets.push_back(ir::arena_offset(*n));
  return offsets;
}
}  // namespace

bool same_arena_layout(const std::vector<const ir::Graph*>& programs) {
  if (programs.empty()) return true;
  const std::vector<int64_t> first = arena_layout(*programs[0]);
  for (size_t r = 1; r < programs.size(); ++r)
    if (arena_layout(*programs[r]) != first) return false;
  return true;
}

size_t check_comm_buffer_plan(const ir::Graph& graph) {
  const auto& nodes = graph.nodes();
  std::vector<CommBuffer> placed;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int64_t offset = ir::arena_offset(*nodes[i]);
    if (offset >= 0) placed.push_back({nodes[i]->result(), size_t(offset), nodes[i]->result()->type.nbytes(), i, 0});
  }
  if (placed.empty()) return 0;
  LiveRanges live(graph);
  size_t total = 0;
  for (CommBuffer& b : placed) {
    b.last = live.last_use(b.value);
    if (b.last >= nodes.size())
      DT_THROW(ValueError) << "%" << b.value->name << " has arena_offset " << b.offset
                           << " but aliases a graph output (the arena is reused by the next run)";
    total = std::max(total, b.offset + align_up(b.bytes));
  }
  // Sorted by offset, a buffer can only collide with the ones starting before its end.
  std::sort(placed.begin(), placed.end(), [](const CommBuffer& a, const CommBuffer& b) { return a.offset < b.offset; });
  for (size_t i = 0; i < placed.size(); ++i)
    for (size_t j = i + 1; j < placed.size() && placed[j].offset < placed[i].offset + align_up(placed[i].bytes); ++j)
      if (overlaps(placed[i], placed[j]))
        DT_THROW(ValueError) << "arena buffers %" << placed[i].value->name << " (" << placed[i].bytes
                             << " bytes at offset " << placed[i].offset << ") and %" << placed[j].value->name << " ("
                             << placed[j].bytes << " bytes at offset " << placed[j].offset
                             << ") share bytes while both are live";
  return total;
}

PassPtr make_plan_comm_buffers_pass() {
  return make_pass("plan-comm-buffers",
                   "place comm buffers at fixed offsets of the symmetric arena (arena_offset), sharing bytes "
                   "across lifetimes",
                   [](ir::Graph& graph) {
                     CommBufferPlan plan = plan_comm_buffers(graph);
                     apply_comm_buffer_plan(graph, plan);
                     return !plan.buffers.empty();
                   });
}

}  // namespace dt::passes
