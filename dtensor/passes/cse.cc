// Common-subexpression elimination: a node with the same op, the same (already deduplicated)
// operands and the same attributes as an earlier one is dropped and its results read the earlier
// node's. For collectives this merges identical collectives: the duplicate's wait_tensor is
// dropped too and its readers read the kept collective's wait, which moves up to the earlier of
// the two waits' positions (data dependencies still order it after its collective).
#include <fmt/format.h>

#include <unordered_map>

#include "dtensor/ir/op_registry.h"
#include "dtensor/passes/graph_edit.h"
#include "dtensor/passes/pass.h"

namespace dt::passes {
namespace {

class CsePass : public Pass {
 public:
  std::string_view name() const override { return "cse"; }
  std::string_view summary() const override { return "merge identical nodes, including identical collectives"; }
  bool run(ir::Graph& graph) override {
    UseLists uses(graph);
    GraphEdit edit(graph);
    std::unordered_map<std::string, const ir::Node*> seen;
    std::string sig;
    bool any = false;
    for (const auto& holder : graph.nodes()) {
      const ir::Node* n = holder;
      if (n->op == ir::OpKind::wait_tensor) {
        const ir::Value* coll = n->operands[0];
        ir::Value* kept = edit.resolve(coll);
        if (kept == coll) continue;
        // The collective was merged: read the kept collective's wait instead of this one.
        const ir::Node* kept_wait = nullptr;
        for (const ir::Node* u : uses.users(kept))
          if (u->op == ir::OpKind::wait_tensor) kept_wait = u;
        if (!kept_wait) continue;
        edit.drop(n);
        edit.replace(n->result(), kept_wait->result());
        edit.set_key(kept_wait, std::min(edit.key(kept_wait), edit.key(n)));
        continue;
      }
      // Two sends (or recvs) alike are two messages, not one value.
      if (ir::op_def(n->op).point_to_point) continue;
      // A buffer that an in-place collective writes is not a pure value: never merge it.
      bool mutated = false;
      for (const ir::Value* r : n->results)
        for (const ir::Node* u : uses.users(r)) mutated = mutated || ir::op_def(u->op).in_place;
      if (mutated) continue;
      sig.clear();
      fmt::format_to(std::back_inserter(sig), "{}(", int(n->op));
      for (const ir::Value* v : n->operands) fmt::format_to(std::back_inserter(sig), "{},", edit.resolve(v)->id);
      sig += ')';
      const auto& specs = ir::op_def(n->op).attrs;
      for (size_t i = 0; i < n->attrs.size(); ++i) {
        sig += '|';
        ir::append_attr(sig, n->attrs[i], specs[i].kind);
      }
      auto [it, inserted] = seen.emplace(sig, n);
      if (inserted) continue;
      edit.drop(n);
      for (size_t k = 0; k < n->results.size(); ++k) edit.replace(n->results[k], it->second->results[k]);
      any = true;
    }
    return any && edit.commit();
  }
};

}  // namespace

PassPtr make_cse_pass() { return std::make_unique<CsePass>(); }

}  // namespace dt::passes
