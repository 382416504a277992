#include "dtensor/runtime/interpreter_fusion.h"

#include <algorithm>
#include <optional>

#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/use_lists.h"

namespace dt::runtime {
namespace {

// The activation a linear's epilogue can apply instead of node `n` (OpDef::fusable_activation).
std::optional<Activation> activation_of(const ir::Node& n) {
  const auto fusable = ir::op_def(n.op).fusable_activation;
  if (!fusable) return std::nullopt;
  const Activation a = fusable(n);
  if (a == Activation::none) return std::nullopt;
  return a;
}

// Returns the node reading `v` when it is v's only reader, of kind `op`, with one result outside
// the comm arena; else nullptr.
const ir::Node* sole_user_of_kind(const ir::UseLists& uses, const ir::NodePositions& position,
                                  const std::vector<int64_t>& arena_offset, const ir::Value* v, ir::OpKind op) {
  const ir::Node* u = uses.sole_user(v);
  if (!u || u->op != op || u->results.size() != 1 || arena_offset[position(u)] >= 0) return nullptr;
  return u;
}

}  // namespace

std::vector<GatherJoin> find_gather_joins(const ir::Graph& graph, const std::vector<int64_t>& arena_offset) {
  const auto& nodes = graph.nodes();
  const ir::UseLists uses(graph);
  const ir::NodePositions position(graph);
  std::vector<GatherJoin> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& g = *nodes[i];
    if (g.op != ir::OpKind::all_gather_into_tensor || arena_offset[i] >= 0) continue;
    auto next = [&](const ir::Node* n, ir::OpKind op) {
      return n ? sole_user_of_kind(uses, position, arena_offset, n->result(), op) : nullptr;
    };
    const ir::Node* w = next(&g, ir::OpKind::wait_tensor);
    const ir::Node* v = next(w, ir::OpKind::view);
    const ir::Node* p = next(v, ir::OpKind::permute);
    const ir::Node* j = next(p, ir::OpKind::reshape);
    if (!j) continue;
    // The exact shapes stacked_to_dim makes: block p, members [n, p...], members' axis to d.
    const Shape& block = g.operands[0]->type.shape;
    const Shape& members = v->result()->type.shape;
    // (An empty block says nothing about the group size: left alone.)
    const int64_t n = block.empty() || block[0] == 0 ? 0 : g.result()->type.shape[0] / block[0];
    if (n < 1 || members.size() != block.size() + 1 || members[0] != n ||
        !std::equal(block.begin(), block.end(), members.begin() + 1))
      continue;
    const std::vector<int64_t>& dims = p->attr_ints("dims");
    int64_t d = 0;
    while (d < int64_t(dims.size()) && dims[size_t(d)] != 0) ++d;
    std::vector<int64_t> want;
    for (int64_t k = 1; k <= d; ++k) want.push_back(k);
    want.push_back(0);
    for (int64_t k = d + 1; k < int64_t(members.size()); ++k) want.push_back(k);
    Shape joined = block;
    if (d < 1 || d >= int64_t(block.size()) || dims != want) continue;
    joined[size_t(d)] *= n;
    if (j->result()->type.shape != joined) continue;
    out.push_back({int(i), int(position(w)), int(position(v)), int(position(p)), int(position(j)), d});
  }
  return out;
}

std::vector<EpilogueFusion> find_epilogue_fusions(const ir::Graph& graph, const std::vector<int64_t>& arena_offset) {
  const auto& nodes = graph.nodes();
  const ir::UseLists uses(graph);
  const ir::NodePositions position(graph);
  std::vector<EpilogueFusion> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& n = *nodes[i];
    if (n.op != ir::OpKind::linear || n.results.size() != 1 || arena_offset[i] >= 0) continue;
    const ir::Value& r = *n.result();
    const ir::Node* only = uses.sole_user(&r);
    // bf16 too: its epilogue rounds before and after the activation, as the two ops would.
    if ((r.type.dtype != DType::f32 && r.type.dtype != DType::bf16) || !only) continue;
    const int j = int(position(only));
    const ir::Node& t = *only;
    const std::optional<Activation> act = activation_of(t);
    if (!act || t.operands.size() != 1 || t.results.size() != 1 || arena_offset[size_t(j)] >= 0) continue;
    out.push_back({int(i), j, *act});
  }
  return out;
}

std::vector<EpilogueFusion> find_epilogue_fusions(const ir::Graph& graph) {
  std::vector<int64_t> offsets;
  for (const ir::Node* n : graph.nodes()) offsets.push_back(ir::arena_offset(*n));
  return find_epilogue_fusions(graph, offsets);
}

}  // namespace dt::runtime
