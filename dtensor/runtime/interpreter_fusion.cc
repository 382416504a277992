#include "dtensor/runtime/interpreter_fusion.h"

#include <optional>

#include "dtensor/ir/op_registry.h"

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
  // Readers of each value: how many operand slots name it, and the last node that does.
  std::vector<int> readers(graph.num_values(), 0), reader(graph.num_values(), -1);
  std::vector<bool> is_output(graph.num_values(), false);
  for (const ir::Value* v : graph.outputs()) is_output[size_t(v->id)] = true;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const ir::Value* v : nodes[i]->operands) {
      ++readers[size_t(v->id)];
      reader[size_t(v->id)] = int(i);
    }
  std::vector<EpilogueFusion> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& n = *nodes[i];
    if (n.op != ir::OpKind::linear || n.results.size() != 1 || arena_offset[i] >= 0) continue;
    const ir::Value& r = *n.result();
    const size_t id = size_t(r.id);
    if (r.type.dtype != DType::f32 || is_output[id] || readers[id] != 1) continue;
    const int j = reader[id];
    const ir::Node& t = *nodes[size_t(j)];
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
