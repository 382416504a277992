#include "dtensor/passes/rank_consistency.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <vector>

#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"

namespace dt::passes {
namespace {

// Point-to-point transfers pair two members, not the whole group: p2p_order.h proves them.
bool is_collective_node(const ir::Node& n) {
  const ir::OpDef& def = ir::op_def(n.op);
  return def.is_collective() && !def.point_to_point;
}

// The collectives of one rank on one group, in program order.
struct RankSequence {
  int rank = -1;
  std::vector<const ir::Node*> nodes;
};

std::string ranks_str(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", ranks[i]);
  return s + "]";
}

}  // namespace

std::string collective_signature(const ir::Node& n, bool with_count) {
  const ir::OpDef& def = ir::op_def(n.op);
  std::string s = fmt::format("{}({}", def.name(), dtype_name(n.operands.empty() ? n.result()->type.dtype
                                                                                 : n.operands[0]->type.dtype));
  // all_to_all_single's split sizes may differ per rank (uneven shards): its count is not compared.
  if (with_count && n.op != ir::OpKind::all_to_all_single) {
    int64_t count = 0;
    for (const ir::Value* v : n.operands) count += v->type.numel();
    s += fmt::format(", {}", count);
  }
  if (def.attr_index("op") >= 0) s += ", " + n.attr_str("op");
  if (def.attr_index("src") >= 0) s += fmt::format(", src {}", n.attr_int("src"));
  return s + ")";
}

namespace {

// Returns the message for the first position at which two members' collectives on one group
// differ, or "" when the sequences agree.
std::string divergence(std::string_view stage, const std::string& group, const std::vector<int>& group_ranks,
                       int rank_a, const std::vector<const ir::Node*>& a_nodes, int rank_b,
                       const std::vector<const ir::Node*>& b_nodes) {
  const size_t common = std::min(a_nodes.size(), b_nodes.size());
  for (size_t pos = 0; pos <= common; ++pos) {
    std::string a, b;
    if (pos == common) {
      if (a_nodes.size() == b_nodes.size()) break;
      a = pos < a_nodes.size() ? collective_signature(*a_nodes[pos]) : "nothing more";
      b = pos < b_nodes.size() ? collective_signature(*b_nodes[pos]) : "nothing more";
    } else {
      a = collective_signature(*a_nodes[pos]);
      b = collective_signature(*b_nodes[pos]);
      if (a == b) continue;
    }
    const ir::Node* na = pos < a_nodes.size() ? a_nodes[pos] : nullptr;
    const ir::Node* nb = pos < b_nodes.size() ? b_nodes[pos] : nullptr;
    return fmt::format("per-rank programs are not rank-consistent {}: group {} {}, collective #{}: rank {} issues {}{} "
                       "but rank {} issues {}{}; this is a dtensor bug (the programs would hang): please report it",
                       stage, group, ranks_str(group_ranks), pos, rank_a, a, na ? " (%" + na->result()->name + ")" : "",
                       rank_b, b, nb ? " (%" + nb->result()->name + ")" : "");
  }
  return {};
}

// The collectives of a program per group name, in program order.
std::map<std::string_view, std::vector<const ir::Node*>> collectives_by_group(const ir::Graph& g) {
  std::map<std::string_view, std::vector<const ir::Node*>> out;
  for (const ir::GroupDecl& decl : g.groups()) out[decl.name];
  for (const ir::Node* n : g.nodes()) {
    if (!is_collective_node(*n)) continue;
    auto it = out.find(n->attr_str("group"));
    DT_CHECK(it != out.end()) << "collective on undeclared group " << n->attr_str("group");
    it->second.push_back(n);
  }
  return out;
}

}  // namespace

void check_rank_consistency(std::span<const ir::Graph* const> programs, std::span<const int> ranks,
                            std::string_view stage) {
  DT_CHECK(programs.size() == ranks.size()) << programs.size() << " programs, " << ranks.size() << " ranks";
  // Group (by its rank list) -> the group's name and each member's sequence.
  struct GroupRun {
    std::string name;
    std::vector<RankSequence> members;
  };
  std::map<std::vector<int>, GroupRun> groups;
  for (size_t i = 0; i < programs.size(); ++i) {
    const ir::Graph& g = *programs[i];
    std::map<std::string_view, RankSequence*> by_name;
    for (const ir::GroupDecl& decl : g.groups()) {
      GroupRun& run = groups[decl.ranks];
      run.name = decl.name;
      run.members.push_back({ranks[i], {}});
    }
    // Pointers only after every push_back of this program (the vectors may grow).
    for (const ir::GroupDecl& decl : g.groups()) by_name[decl.name] = &groups[decl.ranks].members.back();
    for (const ir::Node* n : g.nodes()) {
      if (!is_collective_node(*n)) continue;
      auto it = by_name.find(n->attr_str("group"));
      DT_CHECK(it != by_name.end()) << "collective on undeclared group " << n->attr_str("group");
      it->second->nodes.push_back(n);
    }
  }
  for (const auto& [group_ranks, run] : groups) {
    if (run.members.size() < 2) continue;
    const RankSequence& first = run.members[0];
    for (size_t k = 1; k < run.members.size(); ++k) {
      const RankSequence& other = run.members[k];
      std::string msg = divergence(stage, run.name, group_ranks, first.rank, first.nodes, other.rank, other.nodes);
      if (!msg.empty()) DT_THROW(InternalError) << msg;
    }
  }
}

void check_orbit_consistency(std::span<const ir::Graph* const> representatives, const ir::RankOrbits& orbits,
                             std::string_view stage) {
  DT_CHECK(representatives.size() == orbits.orbits.size())
      << representatives.size() << " programs for " << orbits.orbits.size() << " orbits";
  std::vector<std::map<std::string_view, std::vector<const ir::Node*>>> seqs;
  seqs.reserve(representatives.size());
  for (const ir::Graph* g : representatives) seqs.push_back(collectives_by_group(*g));
  const std::vector<const ir::Node*> none;
  auto seq_of = [&](size_t orbit, std::string_view group) -> const std::vector<const ir::Node*>& {
    auto it = seqs[orbit].find(group);
    return it == seqs[orbit].end() ? none : it->second;
  };
  // The divergent group with the smallest rank list, as the check over every rank reports it.
  std::optional<std::vector<int>> worst_ranks;
  std::string worst;
  for (size_t o = 0; o < orbits.orbits.size(); ++o) {
    const ir::Graph& g = *representatives[o];
    for (const auto& [group, peers] : orbits.orbits[o].peers) {
      const ir::GroupDecl* decl = g.find_group(group);
      // Only groups this orbit's representative declares and leads (its group's first member
      // is in this orbit): every group of the job has such an orbit.
      if (!decl || peers.empty() || peers[0].orbit != o) continue;
      for (size_t k = 1; k < peers.size(); ++k) {
        if (peers[k].orbit == o) continue;
        DT_CHECK(peers[k].orbit < representatives.size()) << "orbit " << peers[k].orbit << " of group " << group;
        if (!representatives[peers[k].orbit]->find_group(group))
          DT_THROW(InternalError) << "per-rank programs are not rank-consistent " << stage << ": rank " << peers[k].rank
                                  << " declares no group " << group << " but rank " << peers[0].rank
                                  << " does; this is a dtensor bug: please report it";
        if (!divergence(stage, group, {}, 0, seq_of(o, group), 0, seq_of(peers[k].orbit, group)).empty()) {
          // The group of this orbit's representative (the program read may be another orbit's).
          std::vector<int> ranks = orbits.group_ranks ? orbits.group_ranks(peers[0].rank, group) : decl->ranks;
          if (ranks.empty()) ranks = decl->ranks;
          if (!worst_ranks || ranks < *worst_ranks) {
            worst = divergence(stage, group, ranks, peers[0].rank, seq_of(o, group), peers[k].rank,
                               seq_of(peers[k].orbit, group));
            worst_ranks = std::move(ranks);
          }
          break;
        }
      }
    }
  }
  if (worst_ranks) DT_THROW(InternalError) << worst;
}

void check_same_orbit(const ir::Graph& program, int rank, const ir::Graph& representative, int representative_rank,
                      std::string_view stage) {
  const auto& a = program.nodes();
  const auto& b = representative.nodes();
  auto fail = [&](size_t pos, const std::string& what) {
    DT_THROW(InternalError) << "rank " << rank << "'s program is not rank " << representative_rank
                            << "'s up to renaming " << stage << " (node #" << pos << ": " << what
                            << "), so rank " << representative_rank
                            << " cannot stand for it; this is a dtensor bug: please report it";
  };
  auto same_types = [](const ir::Node& x, const ir::Node& y) {
    if (x.results.size() != y.results.size()) return false;
    for (size_t k = 0; k < x.results.size(); ++k)
      if (x.results[k]->type.dtype != y.results[k]->type.dtype || x.results[k]->type.shape != y.results[k]->type.shape)
        return false;
    return true;
  };
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const ir::Node& x = *a[i];
    const ir::Node& y = *b[i];
    if (x.op != y.op) fail(i, fmt::format("{} vs {}", ir::op_def(x.op).name(), ir::op_def(y.op).name()));
    if (!same_types(x, y)) fail(i, fmt::format("%{} has another type than %{}", x.result()->name, y.result()->name));
    if (x.operands.size() != y.operands.size()) fail(i, "operand count");
    for (size_t k = 0; k < x.operands.size(); ++k)
      if (x.operands[k]->id != y.operands[k]->id || x.operands[k]->type.shape != y.operands[k]->type.shape)
        fail(i, fmt::format("operand {} of %{}", k, x.result()->name));
    if (ir::op_def(x.op).is_collective() && (x.attr_str("group") != y.attr_str("group") ||
                                  collective_signature(x) != collective_signature(y)))
      fail(i, fmt::format("%{} is {} but %{} is {}", x.result()->name, collective_signature(x), y.result()->name,
                          collective_signature(y)));
    // A transfer's peer is a group index, not renamed: the orbit's members must name the same one.
    if (ir::op_def(x.op).point_to_point &&
        (x.attr_int("peer") != y.attr_int("peer") || x.attr_int("tag") != y.attr_int("tag")))
      fail(i, fmt::format("%{} talks to peer {} (tag {}) but %{} to peer {} (tag {})", x.result()->name,
                          x.attr_int("peer"), x.attr_int("tag"), y.result()->name, y.attr_int("peer"), y.attr_int("tag")));
  }
  if (a.size() != b.size()) fail(std::min(a.size(), b.size()), fmt::format("{} vs {} nodes", a.size(), b.size()));
}

}  // namespace dt::passes
