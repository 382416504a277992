#include "dtensor/runtime/packed_weights.h"

#include <unordered_map>
#include <unordered_set>

#include "dtensor/ir/op_registry.h"

namespace dt::runtime {

PackedWeights::PackedWeights(const ir::Graph& graph) {
  const auto& nodes = graph.nodes();
  std::unordered_set<const ir::Value*> written;  // parameters an in-place op writes
  for (const auto& n : nodes) {
    const ir::OpDef& def = ir::op_def(n->op);
    for (size_t k = 0; def.in_place && k < n->results.size(); ++k)
      if (const int j = def.written_operand(k); j >= 0) written.insert(n->operands[size_t(j)]);
  }
  std::unordered_map<const ir::Value*, int> entry_of_value;
  entry_of_node_.assign(nodes.size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& n = *nodes[i];
    if (!ir::op_def(n.op).packs_weight) continue;
    const ir::Value* w = n.operands[1];
    if (w->kind != ir::ValueKind::param || w->type.dtype != DType::f32 || written.count(w)) continue;
    auto [it, added] = entry_of_value.emplace(w, int(entries_.size()));
    if (added) entries_.emplace_back();
    entry_of_node_[i] = it->second;
  }
}

size_t PackedWeights::packable_nodes() const {
  size_t count = 0;
  for (int e : entry_of_node_) count += e >= 0;
  return count;
}

const PackedWeight* PackedWeights::get(size_t node, const Tensor& weight) {
  const int e = entry_of_node_[node];
  // A writable weight may have changed since any earlier run: its linear packs it during the call.
  if (e < 0 || !f32_packed_linears() || weight.dtype() != DType::f32 || weight.dim() != 2 ||
      weight.numel() == 0 || !weight.storage()->read_only())
    return nullptr;
  Entry& entry = entries_[size_t(e)];
  const bool same = entry.packed && entry.storage.lock() == weight.storage() && entry.offset == weight.offset() &&
                    entry.strides == weight.strides() && entry.packed->n() == weight.shape()[0] &&
                    entry.packed->k() == weight.shape()[1];
  if (!same) {
    // The bytes the weight's elements span (any strides; a parameter is normally contiguous).
    const Tensor dense = weight.is_contiguous() ? weight : weight.contiguous();
    entry.packed = std::make_unique<PackedWeight>(dense.data<float>(), dense.shape()[0], dense.shape()[1],
                                                  dense.shape()[1], /*w_cs=*/1);
    entry.storage = weight.storage();
    entry.offset = weight.offset();
    entry.strides = weight.strides();
    ++packs_;
  }
  return entry.packed.get();
}

}  // namespace dt::runtime
