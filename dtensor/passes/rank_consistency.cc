#include "dtensor/passes/rank_consistency.h"

#include <fmt/format.h>

#include <map>
#include <vector>

#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"

namespace dt::passes {
namespace {

bool is_collective_node(const ir::Node& n) { return ir::op_def(n.op).is_collective(); }

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
      const size_t common = std::min(first.nodes.size(), other.nodes.size());
      for (size_t pos = 0; pos <= common; ++pos) {
        std::string a, b;
        if (pos == common) {
          if (first.nodes.size() == other.nodes.size()) break;
          a = pos < first.nodes.size() ? collective_signature(*first.nodes[pos]) : "nothing more";
          b = pos < other.nodes.size() ? collective_signature(*other.nodes[pos]) : "nothing more";
        } else {
          a = collective_signature(*first.nodes[pos]);
          b = collective_signature(*other.nodes[pos]);
          if (a == b) continue;
        }
        const ir::Node* na = pos < first.nodes.size() ? first.nodes[pos] : nullptr;
        const ir::Node* nb = pos < other.nodes.size() ? other.nodes[pos] : nullptr;
        DT_THROW(InternalError) << "per-rank programs are not rank-consistent " << stage << ": group " << run.name
                                << " " << ranks_str(group_ranks) << ", collective #" << pos << ": rank "
                                << first.rank << " issues " << a << (na ? " (%" + na->result()->name + ")" : "")
                                << " but rank " << other.rank << " issues " << b
                                << (nb ? " (%" + nb->result()->name + ")" : "")
                                << "; this is a dtensor bug (the programs would hang): please report it";
      }
    }
  }
}

}  // namespace dt::passes
