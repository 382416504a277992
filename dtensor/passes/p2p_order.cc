#include "dtensor/passes/p2p_order.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/passes/rank_consistency.h"

namespace dt::passes {
namespace {

// Who the simulation runs: one participant per rank (check_p2p_order), or one per orbit standing
// for all its ranks (check_p2p_order_by_orbit).
struct World {
  struct Participant {
    const ir::Graph* program = nullptr;
    int rank = -1;  // the rank messages name (an orbit's representative)
  };
  std::vector<Participant> participants;
  std::function<int(int rank)> participant_of;  // -1: the rank is not simulated
  // The rank list of a group participant p declares, and the key its queue has: groups are one
  // queue when their keys are equal (per rank: by rank list; per orbit: by name).
  std::function<std::vector<int>(size_t p, const ir::GroupDecl&)> group_ranks;
  std::function<std::string(size_t p, const ir::GroupDecl&)> group_key;
  bool by_orbit = false;
};

// One participant's view of one of its groups.
struct GroupUse {
  int group = -1;  // queue key (index into Simulation::keys_)
  std::string name;
  std::vector<int> ranks;
  std::vector<size_t> members;  // participants found among the ranks (for collectives)
  int64_t own = 0;              // ranks of the group this participant stands for
};

// One issued comm op of one participant.
struct CommOp {
  size_t program = 0;
  const ir::Node* node = nullptr;
  int use = -1;  // index into Simulation::uses_
  bool p2p = false;
  bool send = false;
  int peer = -1;          // global rank of a transfer's other side (the first found, by orbit)
  size_t peer_part = 0;   // its participant
};

// A participant's program reduced to what the proof needs: issue op k, or block until op k completes.
struct Event {
  bool issue = false;
  int op = -1;
};

class Simulation {
 public:
  Simulation(World world, std::string_view stage)
      : world_(std::move(world)), stage_(stage), events_(world_.participants.size()),
        queues_(world_.participants.size()), pc_(world_.participants.size(), 0) {
    for (size_t i = 0; i < world_.participants.size(); ++i) read_program(i);
    done_.assign(ops_.size(), false);
  }

  void run() {
    const size_t n = world_.participants.size();
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t i = 0; i < n; ++i) progress = advance(i) || progress;
      for (size_t i = 0; i < n; ++i)
        for (auto& [group, queue] : queues_[i])
          while (!queue.empty() && try_complete(i, group)) progress = true;
    }
    std::string blocked;
    int shown = 0;
    for (size_t i = 0; i < n; ++i) {
      std::string why = blocked_at(i);
      if (why.empty()) continue;
      if (shown++ < 4) blocked += (blocked.empty() ? "" : "; ") + why;
    }
    if (shown > 0)
      DT_THROW(InternalError) << "per-rank programs can deadlock " << stage_ << ": " << blocked
                              << (shown > 4 ? fmt::format(" (and {} more {})", shown - 4,
                                                          world_.by_orbit ? "orbits" : "ranks")
                                            : "")
                              << "; this is a dtensor bug (the programs would hang): please report it";
  }

 private:
  int rank(size_t i) const { return world_.participants[i].rank; }

  int use_of(size_t i, const ir::GroupDecl& decl) {
    const std::string key = world_.group_key(i, decl);
    auto [kit, fresh] = keys_.emplace(key, int(keys_.size()));
    auto [it, inserted] = use_of_.emplace(std::pair{i, kit->second}, int(uses_.size()));
    if (!inserted) return it->second;
    GroupUse use{.group = kit->second, .name = decl.name, .ranks = world_.group_ranks(i, decl), .members = {}, .own = 0};
    for (int r : use.ranks) {
      const int p = world_.participant_of(r);
      if (p < 0) continue;  // not checked (as rank_consistency.h)
      use.own += size_t(p) == i;
      if (std::find(use.members.begin(), use.members.end(), size_t(p)) == use.members.end())
        use.members.push_back(size_t(p));
    }
    uses_.push_back(std::move(use));
    return it->second;
  }

  void read_program(size_t i) {
    const ir::Graph& g = *world_.participants[i].program;
    std::unordered_map<const ir::Node*, int> op_of;
    for (const ir::Node* n : g.nodes()) {
      const ir::OpDef& def = ir::op_def(n->op);
      if (def.is_collective()) {
        const ir::GroupDecl* decl = g.find_group(n->attr_str("group"));
        DT_CHECK(decl) << "collective on undeclared group " << n->attr_str("group");
        CommOp op{.program = i, .node = n, .use = use_of(i, *decl), .p2p = def.point_to_point};
        if (op.p2p) read_transfer(op);
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

  void read_transfer(CommOp& op) {
    const GroupUse& use = uses_[size_t(op.use)];
    const ir::Node& n = *op.node;
    op.send = n.op == ir::OpKind::send;
    const int64_t peer = n.attr_int("peer");
    DT_CHECK(peer >= 0 && peer < int64_t(use.ranks.size())) << "peer " << peer << " of %" << n.result()->name;
    op.peer = use.ranks[size_t(peer)];
    const int p = world_.participant_of(op.peer);
    DT_CHECK(p >= 0) << "rank " << rank(op.program) << "'s %" << n.result()->name << " talks to rank " << op.peer
                     << ", which has no program in the check";
    op.peer_part = size_t(p);
    // By orbit, the ranks of one orbit move in lockstep only when each pairs with its own peer:
    // one rank of the orbit per group the orbit transfers on (the group index, which the peer
    // names, is then the same for all of them, and so is the peer's orbit).
    if (world_.by_orbit && (use.own != 1 || op.peer_part == op.program))
      DT_THROW(InternalError) << "the transfers " << stage_ << " cannot be proved by orbit: rank " << rank(op.program)
                              << "'s orbit holds " << use.own << " ranks of group " << group_str(use)
                              << ", on which %" << n.result()->name << " "
                              << (op.send ? "sends to" : "receives from") << " rank " << op.peer
                              << "; this is a dtensor bug: please report it";
  }

  // Moves participant i's program counter past every issue and every wait whose op is done.
  bool advance(size_t i) {
    bool moved = false;
    for (; pc_[i] < events_[i].size(); ++pc_[i], moved = true) {
      const Event& e = events_[i][pc_[i]];
      if (e.issue)
        queues_[i][uses_[size_t(ops_[size_t(e.op)].use)].group].push_back(e.op);
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

  // Completes the op at the head of participant i's queue on `group` when every participant is there.
  bool try_complete(size_t i, int group) {
    const CommOp& op = *head(i, group);
    if (!op.p2p) {
      const std::vector<size_t>& members = uses_[size_t(op.use)].members;
      for (size_t m : members) {
        const CommOp* h = head(m, group);
        if (!h || h->p2p) return false;
      }
      for (size_t m : members) pop(m, group);
      return true;
    }
    const size_t j = op.peer_part;
    const CommOp* other = head(j, group);
    if (!other || !other->p2p || other->peer_part != i || other->send == op.send) return false;
    const CommOp& s = op.send ? op : *other;
    const CommOp& r = op.send ? *other : op;
    const ir::TensorType& st = s.node->operands[0]->type;
    const ir::TensorType& rt = r.node->result()->type;
    if (s.node->attr_int("tag") != r.node->attr_int("tag") || st.dtype != rt.dtype || st.numel() != rt.numel())
      DT_THROW(InternalError) << "per-rank programs are not rank-consistent " << stage_ << ": rank "
                              << r.peer << " " << describe(s) << " (%" << s.node->result()->name
                              << ") but rank " << s.peer << " " << describe(r) << " (%"
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

  // Returns "tp [0, 1, 2]" (long lists cut: a group of a large mesh may hold thousands of ranks).
  static std::string group_str(const GroupUse& use) {
    constexpr size_t kShown = 8;
    std::string s = use.name + " [";
    for (size_t k = 0; k < std::min(use.ranks.size(), kShown); ++k) s += fmt::format("{}{}", k ? ", " : "", use.ranks[k]);
    if (use.ranks.size() > kShown) s += fmt::format(", ... ({} ranks)", use.ranks.size());
    return s + "]";
  }

  // Returns "" when participant i finished, else what it is blocked on.
  std::string blocked_at(size_t i) const {
    if (pc_[i] < events_[i].size()) {
      const CommOp& op = ops_[size_t(events_[i][pc_[i]].op)];
      const CommOp& h = *head(i, uses_[size_t(op.use)].group);
      std::string s = fmt::format("rank {} waits for %{} ({}) on group {}", rank(i), op.node->result()->name,
                                  describe(op), group_str(uses_[size_t(op.use)]));
      if (&h != &op) s += fmt::format(" behind %{} ({})", h.node->result()->name, describe(h));
      return s;
    }
    for (const auto& [group, queue] : queues_[i])
      if (!queue.empty()) {
        const CommOp& h = ops_[size_t(queue.front())];
        return fmt::format("rank {} ends with %{} ({}) pending on group {}", rank(i), h.node->result()->name,
                           describe(h), group_str(uses_[size_t(h.use)]));
      }
    return {};
  }

  World world_;
  std::string_view stage_;
  std::map<std::string, int> keys_;
  std::map<std::pair<size_t, int>, int> use_of_;
  std::vector<GroupUse> uses_;
  std::vector<CommOp> ops_;
  std::vector<std::vector<Event>> events_;
  std::vector<std::map<int, std::deque<int>>> queues_;
  std::vector<size_t> pc_;
  std::vector<bool> done_;
};

std::string ranks_key(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += std::to_string(r) + ",";
  return s;
}

}  // namespace

bool has_point_to_point(std::span<const ir::Graph* const> programs) {
  for (const ir::Graph* g : programs)
    for (const ir::Node* n : g->nodes())
      if (ir::op_def(n->op).point_to_point) return true;
  return false;
}

void check_p2p_order(std::span<const ir::Graph* const> programs, std::span<const int> ranks, std::string_view stage) {
  DT_CHECK(programs.size() == ranks.size()) << programs.size() << " programs, " << ranks.size() << " ranks";
  auto index = std::make_shared<std::map<int, int>>();
  World w;
  for (size_t i = 0; i < programs.size(); ++i) {
    w.participants.push_back({programs[i], ranks[i]});
    (*index)[ranks[i]] = int(i);
  }
  w.participant_of = [index](int rank) {
    auto it = index->find(rank);
    return it == index->end() ? -1 : it->second;
  };
  w.group_ranks = [](size_t, const ir::GroupDecl& decl) { return decl.ranks; };
  w.group_key = [](size_t, const ir::GroupDecl& decl) { return ranks_key(decl.ranks); };
  Simulation(std::move(w), stage).run();
}

size_t check_p2p_order_by_orbit(std::span<const ir::Graph* const> representatives, const ir::RankOrbits& orbits,
                                std::string_view stage) {
  DT_CHECK(representatives.size() == orbits.orbits.size())
      << representatives.size() << " programs for " << orbits.orbits.size() << " orbits";
  World w;
  w.by_orbit = true;
  for (size_t o = 0; o < orbits.orbits.size(); ++o)
    w.participants.push_back({representatives[o], orbits.orbits[o].representative});
  w.participant_of = orbits.orbit_of;
  // The program read may be another orbit's (RankOrbit::same_as): its rank lists are not this
  // orbit's representative's.
  w.group_ranks = [&orbits](size_t o, const ir::GroupDecl& decl) {
    std::vector<int> ranks;
    if (orbits.group_ranks) ranks = orbits.group_ranks(orbits.orbits[o].representative, decl.name);
    return ranks.empty() ? decl.ranks : ranks;
  };
  // Every orbit among a group's members is in lockstep with the others (one rank of each per
  // group it transfers on), so each orbit's queue on a group is keyed by the group's name.
  w.group_key = [](size_t, const ir::GroupDecl& decl) { return decl.name; };
  Simulation(std::move(w), stage).run();
  return representatives.size();
}

}  // namespace dt::passes
