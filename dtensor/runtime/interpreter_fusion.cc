#include "dtensor/runtime/interpreter_fusion.h"

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

}  // namespace

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
