#include "dtensor/passes/p2p_order.h"

#include <fmt/format.h>

#include <deque>
#include <map>
#include <unordered_map>
#include <vector>

#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/passes/rank_consistency.h"

namespace dt::passes {
namespace {

// One issued comm op of one rank.
struct CommOp {
  size_t program = 0;
  const ir::Node* node = nullptr;
  int group = -1;         // index into Simulation::group_ranks_
  bool p2p = false;
  bool send = false;
  int peer = -1;          // global rank of a transfer's other side
};

// A rank's program reduced to what the proof needs: issue op k, or block until op k completes.
struct Event {
  bool issue = false;
  int op = -1;
};

class Simulation {
 public:
  Simulation(std::span<const ir::Graph* const> programs, std::span<const int> ranks, std::string_view stage)
      : programs_(programs), ranks_(ranks), stage_(stage), events_(programs.size()), queues_(programs.size()),
        pc_(programs.size(), 0) {
    for (size_t i = 0; i < ranks.size(); ++i) program_of_[ranks[i]] = i;
    for (size_t i = 0; i < programs.size(); ++i) read_program(i);
    done_.assign(ops_.size(), false);
  }

  void run() {
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t i = 0; i < programs_.size(); ++i) progress = advance(i) || progress;
      for (size_t i = 0; i < programs_.size(); ++i)
        for (auto& [group, queue] : queues_[i])
          while (!queue.empty() && try_complete(i, group)) progress = true;
    }
    std::string blocked;
    int shown = 0;
    for (size_t i = 0; i < programs_.size(); ++i) {
      std::string why = blocked_at(i);
      if (why.empty()) continue;
      if (shown++ < 4) blocked += (blocked.empty() ? "" : "; ") + why;
    }
    if (shown > 0)
      DT_THROW(InternalError) << "per-rank programs can deadlock " << stage_ << ": " << blocked
                              << (shown > 4 ? fmt::format(" (and {} more ranks)", shown - 4) : "")
                              << "; this is a dtensor bug (the programs would hang): please report it";
  }

 private:
  int group_index(const std::vector<int>& ranks, const std::string& name) {
    auto [it, inserted] = group_of_.emplace(ranks, int(group_ranks_.size()));
    if (inserted) {
      group_ranks_.push_back(ranks);
      group_names_.push_back(name);
    }
    return it->second;
  }

  void read_program(size_t i) {
    const ir::Graph& g = *programs_[i];
    std::unordered_map<const ir::Node*, int> op_of;
    for (const ir::Node* n : g.nodes()) {
      const ir::OpDef& def = ir::op_def(n->op);
      if (def.is_collective()) {
        const ir::GroupDecl* decl = g.find_group(n->attr_str("group"));
        DT_CHECK(decl) << "collective on undeclared group " << n->attr_str("group");
        CommOp op{.program = i, .node = n, .group = group_index(decl->ranks, decl->name), .p2p = def.point_to_point};
        if (op.p2p) {
          op.send = n->op == ir::OpKind::send;
          const int64_t peer = n->attr_int("peer");
          DT_CHECK(peer >= 0 && peer < int64_t(decl->ranks.size())) << "peer " << peer << " of %" << n->result()->name;
          op.peer = decl->ranks[size_t(peer)];
          DT_CHECK(program_of_.count(op.peer))
              << "rank " << ranks_[i] << "'s %" << n->result()->name << " talks to rank " << op.peer
              << ", which has no program in the check";
        }
        const int k = int(ops_.size());
        ops_.push_back(op);
        op_of[n] = k;
        events_[i].push_back({.issue = true, .op = k});
        if (!def.needs_wait) events_[i].push_back({.issue = false, .op = k});  // blocking (one-shot)
      } else if (n->op == ir::OpKind::wait_tensor) {
        auto it = op_of.find(n->operands[0]->producer);
        if (it != op_of.end()) events_[i].push_back({.issue = false, .op = it->second});
      }
    }
  }

  // Moves rank i's program counter past every issue and every wait whose op is done.
  bool advance(size_t i) {
    bool moved = false;
    for (; pc_[i] < events_[i].size(); ++pc_[i], moved = true) {
      const Event& e = events_[i][pc_[i]];
      if (e.issue)
        queues_[i][ops_[size_t(e.op)].group].push_back(e.op);
      else if (!done_[size_t(e.op)])
        break;
    }
    return moved;
  }

  const CommOp* head(size_t program, int group) const {
    auto it = queues_[program].find(group);
    return it == queues_[program].end() || it->second.empty() ? nullptr : &ops_[size_t(it->second.front())];
  }

  void pop(size_t program, int group) {
    std::deque<int>& q = queues_[program].at(group);
    done_[size_t(q.front())] = true;
    q.pop_front();
  }

  // Completes the op at the head of rank i's queue on `group` when every participant is there.
  bool try_complete(size_t i, int group) {
    const CommOp& op = *head(i, group);
    if (!op.p2p) {
      std::vector<size_t> members;
      for (int r : group_ranks_[size_t(group)]) {
        auto it = program_of_.find(r);
        if (it == program_of_.end()) continue;  // not checked (as rank_consistency.h)
        const CommOp* h = head(it->second, group);
        if (!h || h->p2p) return false;
        members.push_back(it->second);
      }
      for (size_t m : members) pop(m, group);
      return true;
    }
    const size_t j = program_of_.at(op.peer);
    const CommOp* other = head(j, group);
    if (!other || !other->p2p || other->peer != ranks_[i] || other->send == op.send) return false;
    const CommOp& s = op.send ? op : *other;
    const CommOp& r = op.send ? *other : op;
    const ir::TensorType& st = s.node->operands[0]->type;
    const ir::TensorType& rt = r.node->result()->type;
    if (s.node->attr_int("tag") != r.node->attr_int("tag") || st.dtype != rt.dtype || st.numel() != rt.numel())
      DT_THROW(InternalError) << "per-rank programs are not rank-consistent " << stage_ << ": rank "
                              << ranks_[s.program] << " " << describe(s) << " (%" << s.node->result()->name
                              << ") but rank " << ranks_[r.program] << " " << describe(r) << " (%"
                              << r.node->result()->name << "); this is a dtensor bug: please report it";
    pop(i, group);
    pop(j, group);
    return true;
  }

  std::string describe(const CommOp& op) const {
    if (!op.p2p) return collective_signature(*op.node);
    const ir::TensorType& t = op.send ? op.node->operands[0]->type : op.node->result()->type;
    return fmt::format("{} rank {} (tag {}, {})", op.send ? "sends to" : "receives from", op.peer,
                       op.node->attr_int("tag"), ir::type_str(t));
  }

  std::string group_str(int group) const {
    std::string s = group_names_[size_t(group)] + " [";
    const auto& rs = group_ranks_[size_t(group)];
    for (size_t k = 0; k < rs.size(); ++k) s += fmt::format("{}{}", k ? ", " : "", rs[k]);
    return s + "]";
  }

  // Returns "" when rank i finished, else what it is blocked on.
  std::string blocked_at(size_t i) const {
    const int rank = ranks_[i];
    if (pc_[i] < events_[i].size()) {
      const CommOp& op = ops_[size_t(events_[i][pc_[i]].op)];
      const CommOp& h = *head(i, op.group);
      std::string s = fmt::format("rank {} waits for %{} ({}) on group {}", rank, op.node->result()->name,
                                  describe(op), group_str(op.group));
      if (&h != &op) s += fmt::format(" behind %{} ({})", h.node->result()->name, describe(h));
      return s;
    }
    for (const auto& [group, queue] : queues_[i])
      if (!queue.empty()) {
        const CommOp& h = ops_[size_t(queue.front())];
        return fmt::format("rank {} ends with %{} ({}) pending on group {}", rank, h.node->result()->name,
                           describe(h), group_str(group));
      }
    return {};
  }

  std::span<const ir::Graph* const> programs_;
  std::span<const int> ranks_;
  std::string_view stage_;
  std::map<int, size_t> program_of_;
  std::map<std::vector<int>, int> group_of_;
  std::vector<std::vector<int>> group_ranks_;
  std::vector<std::string> group_names_;
  std::vector<CommOp> ops_;
  std::vector<std::vector<Event>> events_;
  std::vector<std::map<int, std::deque<int>>> queues_;
  std::vector<size_t> pc_;
  std::vector<bool> done_;
};

}  // namespace

bool has_point_to_point(std::span<const ir::Graph* const> programs) {
  for (const ir::Graph* g : programs)
    for (const ir::Node* n : g->nodes())
      if (ir::op_def(n->op).point_to_point) return true;
  return false;
}

void check_p2p_order(std::span<const ir::Graph* const> programs, std::span<const int> ranks, std::string_view stage) {
  DT_CHECK(programs.size() == ranks.size()) << programs.size() << " programs, " << ranks.size() << " ranks";
  Simulation(programs, ranks, stage).run();
}

}  // namespace dt::passes
