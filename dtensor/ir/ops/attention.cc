// scaled_dot_product_attention(q [..., Hq, S, D], k [..., Hkv, Sk, D], v [..., Hkv, Sk, Dv],
//                              mask?) {causal, scale} -> [..., Hq, S, Dv]
//
// softmax(q·kᵀ · scale + mask) · v, as torch 2.x's F.scaled_dot_product_attention. scale = 0 (the
// default) means torch's scale=None, 1/sqrt(D). Grouped-query k/v: Hkv divides Hq and q head h
// reads kv head h / (Hq / Hkv) (torch's repeat_interleave semantics, no copy). The optional mask is
// bool (true = keep) or q's dtype (added), broadcastable to the scores [..., Hq, S, Sk]. With
// causal=true torch's top-left aligned lower triangle (query i sees keys j <= i) applies as well
// as the mask (torch's reference adds both; its fused kernels refuse the combination). The gpt
// example uses q, k, v of shape [B, heads, S, head_dim].
#include <algorithm>

#include "dtensor/kernels/ops.h"
#include "dtensor/ir/grad_rule.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {
namespace {

dt::AttentionOptions options(const Node& node, const Tensor& mask) {
  return {.causal = node.attr_bool("causal"), .scale = node.attr_float("scale"), .mask = mask};
}

void infer_sdpa(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const TensorType& q = node.operands[0]->type;
  for (int i = 1; i < 3; ++i)
    if (node.operands[size_t(i)]->type.dtype != q.dtype)
      DT_THROW(DTypeError) << "scaled_dot_product_attention: q, k and v must have one dtype, got q " << type_str(q)
                           << ", " << (i == 1 ? "k " : "v ") << type_str(node.operands[size_t(i)]->type);
  infer_util::require_floating(node, 0);
  const TensorType* mask = node.operands.size() > 3 ? &node.operands[3]->type : nullptr;
  if (mask && mask->dtype != DType::boolean && mask->dtype != q.dtype)
    DT_THROW(DTypeError) << "scaled_dot_product_attention: mask must be bool (true = keep) or q's dtype "
                         << dtype_name(q.dtype) << ", got " << type_str(*mask);
  dt::attention_kv_group("scaled_dot_product_attention", q.shape, node.operands[1]->type.shape,
                         node.operands[2]->type.shape, mask ? &mask->shape : nullptr);
  Shape s = q.shape;
  s.back() = node.operands[2]->type.shape.back();
  out.push_back({q.dtype, std::move(s)});
}

// The kernel is dt::scaled_dot_product_attention (dtensor/kernels/ops_attention.cc): tiled, with the
// softmax fused into each score block, and causal attention skipping the fully masked blocks.
void run_sdpa(const KernelArgs& a) {
  a.out[0] = dt::scaled_dot_product_attention(a.in[0], a.in[1], a.in[2],
                                              options(a.node, a.in.size() > 3 ? a.in[3] : Tensor()));
}

// The gradient: one backward op recomputing the probabilities (dq, dk, dv summed over each kv
// head's group, and for a float mask the scores' gradient, summed to the mask's shape here).
void grad_sdpa(GradContext& c) {
  std::vector<Value*> operands = {c.grad(), c.operand(0), c.operand(1), c.operand(2)};
  const bool has_mask = c.num_operands() > 3;
  if (has_mask) operands.push_back(c.operand(3));
  std::vector<Value*> g = c.b().record(OpKind::scaled_dot_product_attention_backward, operands,
                                       {{"causal", c.node().attr_bool("causal")},
                                        {"scale", c.node().attr_float("scale")}});
  for (int i = 0; i < 3; ++i) c.set(i, g[size_t(i)]);
  if (has_mask && g.size() > 3 && c.wants(3)) c.set(3, c.sum_to(g[3], c.operand(3)->type.shape));
}

// q·kᵀ and p·v over the unmasked (query, key) pairs: causal attention counts only the pairs its
// kernel computes (query i sees keys 0..i).
double sdpa_flops(const Node& node) {
  const Shape& q = node.operands[0]->type.shape;
  const Shape& k = node.operands[1]->type.shape;
  const Shape& v = node.operands[2]->type.shape;
  const int64_t S = q[q.size() - 2], D = q.back(), Sk = k[k.size() - 2], Dv = v.back();
  const double heads = S * D == 0 ? 0 : double(numel(q)) / double(S * D);  // q's heads: k/v are read per q head
  double pairs = double(S) * double(Sk);
  if (node.attr_bool("causal")) {
    pairs = 0;
    for (int64_t i = 0; i < S; ++i) pairs += double(std::min(Sk, i + 1));
  }
  return 2.0 * heads * pairs * double(D + Dv);
}

}  // namespace

void register_attention_ops(OpTable& t) {
  t.add({.kind = OpKind::scaled_dot_product_attention,
         .operands = {{"q"}, {"k"}, {"v"}, {"mask", true}},
         .attrs = {{"causal", AttrKind::boolean, Attr(false)}, {"scale", AttrKind::f64, Attr(0.0)}},
         .infer = infer_sdpa,
         .kernel = run_sdpa,
         .flops = sdpa_flops,
         .grad = grad_sdpa});
  t.set_sharding_rules(attention_sharding_rules());
}

}  // namespace dt::ir
