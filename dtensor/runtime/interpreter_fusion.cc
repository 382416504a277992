#include "dtensor/runtime/interpreter_fusion.h"

#include <algorithm>
#include <optional>

#include "dtensor/core/error.h"
#include "dtensor/ir/gather_join.h"
#include "dtensor/ir/op_registry.h"

namespace dt::runtime {

FusionAnalysis::FusionAnalysis(const ir::Graph& g, const std::vector<int64_t>& offsets)
    : graph(g), uses(g), position(g), arena_offset(offsets) {
  DT_CHECK(offsets.size() == g.nodes().size()) << offsets.size() << " arena offsets for " << g.nodes().size() << " nodes";
}

const ir::Node* FusionAnalysis::absorbable(const ir::Node* n, const ir::Value* v, const ir::Node* reader) const {
  if (!n || n->results.size() != 1 || uses.sole_user(v) != reader || arena_offset[position(n)] >= 0) return nullptr;
  return n;
}

const ir::Node* FusionAnalysis::sole_user_of_kind(const ir::Value* v, ir::OpKind op) const {
  const ir::Node* u = uses.sole_user(v);
  return u && u->op == op ? absorbable(u, v, u) : nullptr;
}

namespace {

// The activation a linear's epilogue can apply instead of node `n` (OpDef::fusable_activation).
std::optional<Activation> activation_of(const ir::Node& n) {
  const auto fusable = ir::op_def(n.op).fusable_activation;
  if (!fusable) return std::nullopt;
  const Activation a = fusable(n);
  if (a == Activation::none) return std::nullopt;
  return a;
}

// Matches the rotary chain ending in the add node `tail` (RotaryFusion); nullopt when it is not one.
class RotaryMatcher {
 public:
  explicit RotaryMatcher(const FusionAnalysis& analysis) : analysis_(analysis) {}

  std::optional<RotaryFusion> match(const ir::Node& tail) {
    if (tail.op != ir::OpKind::add || tail.operands.size() != 2 || !f32(tail.result())) return std::nullopt;
    for (int order = 0; order < 2; ++order) {
      members_.clear();
      const ir::Node* direct = chain_node(tail.operands[size_t(order)], ir::OpKind::mul, &tail);
      const ir::Node* rotated = chain_node(tail.operands[size_t(1 - order)], ir::OpKind::mul, &tail);
      if (!direct || !rotated) continue;
      for (int k = 0; k < 2; ++k) {
        const ir::Value* x = direct->operands[size_t(k)];
        const ir::Value* cos = direct->operands[size_t(1 - k)];
        if (x->type != tail.result()->type) continue;
        for (int j = 0; j < 2; ++j) {
          const size_t kept = members_.size();
          if (rotates(rotated->operands[size_t(j)], x, rotated))
            return RotaryFusion{int(analysis_.position(&tail)), members_, x, cos, rotated->operands[size_t(1 - j)]};
          members_.resize(kept);
        }
      }
    }
    return std::nullopt;
  }

 private:
  static bool f32(const ir::Value* v) { return v->type.dtype == DType::f32; }

  // The node of op `op` that produced v when its only reader is `reader` (recorded as a member).
  const ir::Node* chain_node(const ir::Value* v, ir::OpKind op, const ir::Node* reader) {
    const ir::Node* n = v->producer;
    if (!n || n->op != op || !f32(v) || !analysis_.absorbable(n, v, reader)) return nullptr;
    members_.push_back(int(analysis_.position(n)));
    return n;
  }

  // True when v = cat(neg(slice(x, h:2h)), slice(x, 0:h)) over x's last dim, read only by `reader`.
  bool rotates(const ir::Value* v, const ir::Value* x, const ir::Node* reader) {
    const int64_t rank = x->type.rank(), d = rank > 0 ? x->type.shape.back() : 0;
    const ir::Node* cat = chain_node(v, ir::OpKind::cat, reader);
    if (!cat || d % 2 != 0 || cat->operands.size() != 2 || normalize_dim(cat->attr_int("dim"), rank) != rank - 1)
      return false;
    const ir::Node* neg = chain_node(cat->operands[0], ir::OpKind::neg, cat);
    return neg && half_of(neg->operands[0], x, d / 2, neg) && half_of(cat->operands[1], x, 0, cat);
  }

  // True when v = slice(x, start:start + d/2) over x's last dim 2·(d/2), read only by `reader`.
  bool half_of(const ir::Value* v, const ir::Value* x, int64_t start, const ir::Node* reader) {
    const ir::Node* s = chain_node(v, ir::OpKind::slice, reader);
    if (!s || s->operands[0] != x || s->attr_int("step") != 1) return false;
    const int64_t rank = x->type.rank(), d = x->type.shape.back();
    if (normalize_dim(s->attr_int("dim"), rank) != rank - 1 || v->type.shape.back() != d / 2) return false;
    int64_t begin = s->attr_int("start");
    if (begin < 0) begin += d;
    return std::clamp<int64_t>(begin, 0, d) == start;
  }

  const FusionAnalysis& analysis_;
  std::vector<int> members_;
};

// The other operand of a mul or add `tail` reading the result of the f32 linear `head` (at
// position `at`) when it is a tensor of the same type computed before the head, else null.
const ir::Value* epilogue_operand(const ir::Node& head, const ir::Node& tail, const ir::NodePositions& position,
                                  int at) {
  if ((tail.op != ir::OpKind::mul && tail.op != ir::OpKind::add) || tail.operands.size() != 2) return nullptr;
  const ir::Value* r = head.result();
  const ir::Value* other = tail.operands[0] == r ? tail.operands[1] : tail.operands[0];
  if (r->type.dtype != DType::f32 || other == r || other->type != r->type) return nullptr;
  return !other->producer || int(position(other->producer)) < at ? other : nullptr;
}

}  // namespace

std::vector<RotaryFusion> find_rotary_fusions(const FusionAnalysis& analysis) {
  RotaryMatcher matcher(analysis);
  std::vector<RotaryFusion> out;
  const auto& nodes = analysis.graph.nodes();
  for (size_t i = 0; i < nodes.size(); ++i)
    if (analysis.arena_offset[i] < 0)
      if (auto f = matcher.match(*nodes[i])) out.push_back(std::move(*f));
  return out;
}

std::vector<GatherJoin> find_gather_joins(const FusionAnalysis& analysis) {
  const auto& nodes = analysis.graph.nodes();
  const ir::NodePositions& position = analysis.position;
  std::vector<GatherJoin> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& g = *nodes[i];
    if (g.op != ir::OpKind::all_gather_into_tensor || analysis.arena_offset[i] >= 0) continue;
    const auto c = ir::match_gather_join(g, analysis.uses);
    if (!c) continue;
    bool placed = false;
    for (const ir::Node* n : {c->wait, c->view, c->permute, c->join}) placed |= analysis.arena_offset[position(n)] >= 0;
    if (placed) continue;
    out.push_back({int(i), int(position(c->wait)), int(position(c->view)), int(position(c->permute)),
                   int(position(c->join)), c->dim});
  }
  return out;
}

std::vector<EpilogueFusion> find_epilogue_fusions(const FusionAnalysis& analysis) {
  const auto& nodes = analysis.graph.nodes();
  std::vector<EpilogueFusion> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& n = *nodes[i];
    if (n.op != ir::OpKind::linear || n.results.size() != 1 || analysis.arena_offset[i] >= 0) continue;
    const ir::Value& r = *n.result();
    const ir::Node* only = analysis.uses.sole_user(&r);
    // bf16 too: its epilogue rounds before and after the activation, as the two ops would.
    if ((r.type.dtype != DType::f32 && r.type.dtype != DType::bf16) || !analysis.absorbable(only, &r, only)) continue;
    const int j = int(analysis.position(only));
    const ir::Node& t = *only;
    if (const ir::Value* other = epilogue_operand(n, t, analysis.position, int(i))) {
      out.push_back({int(i), j, Activation::none, other, t.op == ir::OpKind::add ? EpilogueOp::add : EpilogueOp::mul});
      continue;
    }
    const std::optional<Activation> act = activation_of(t);
    if (!act || t.operands.size() != 1) continue;
    out.push_back({int(i), j, *act});
  }
  return out;
}

std::vector<ActivationGradFusion> find_activation_grad_fusions(const FusionAnalysis& analysis) {
  const auto& nodes = analysis.graph.nodes();
  std::vector<ActivationGradFusion> out;
  auto f32_node = [](const ir::Node& n, ir::OpKind op) {
    return n.op == op && n.results.size() == 1 && n.result()->type.dtype == DType::f32;
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& b = *nodes[i];
    if (!f32_node(b, ir::OpKind::gelu_backward) || b.operands.size() != 2 || analysis.arena_offset[i] >= 0) continue;
    const ir::Value* x = b.operands[1];
    if (!x->producer || analysis.uses.is_output(x) || b.operands[0]->type != x->type) continue;
    const auto readers = analysis.uses.users(x);
    if (readers.size() != 2) continue;
    const ir::Node* f = readers[0] == &b ? readers[1] : readers[0];
    if (f == &b || !f32_node(*f, ir::OpKind::gelu) || f->operands.size() != 1 ||
        f->attr_str("approximate") != b.attr_str("approximate"))
      continue;
    const size_t at = analysis.position(f);
    if (at >= i || analysis.arena_offset[at] >= 0) continue;
    out.push_back({int(at), int(i), x});
  }
  return out;
}

std::vector<EpilogueFusion> find_epilogue_fusions(const ir::Graph& graph) {
  std::vector<int64_t> offsets;
  for (const ir::Node* n : graph.nodes()) offsets.push_back(ir::arena_offset(*n));
  return find_epilogue_fusions(FusionAnalysis(graph, offsets));
}

}  // namespace dt::runtime
