// scaled_dot_product_attention(q [..., S, D], k [..., Sk, D], v [..., Sk, Dv]) -> [..., S, Dv]
//
// softmax(q·kᵀ · 1/sqrt(D) + mask) · v, as torch.nn.functional.scaled_dot_product_attention with
// scale=None. With causal=true the mask is torch's top-left aligned lower triangle: query i sees
// keys j <= i (-inf elsewhere). The gpt example uses q, k, v of shape [B, heads, S, head_dim].
#include <algorithm>

#include "dtensor/core/ops.h"
#include "dtensor/ir/grad_rule.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {
namespace {

void infer_sdpa(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::require_same_dtype(node);
  infer_util::require_floating(node, 0);
  const TensorType& q = node.operands[0]->type;
  const TensorType& k = node.operands[1]->type;
  const TensorType& v = node.operands[2]->type;
  auto fail = [&]() {
    DT_THROW(ShapeError) << "scaled_dot_product_attention shapes do not agree: q " << type_str(q) << ", k "
                         << type_str(k) << ", v " << type_str(v);
  };
  if (q.rank() < 2 || k.rank() != q.rank() || v.rank() != q.rank()) fail();
  const size_t r = size_t(q.rank());
  for (size_t i = 0; i + 2 < r; ++i)
    if (k.shape[i] != q.shape[i] || v.shape[i] != q.shape[i]) fail();
  if (k.shape[r - 1] != q.shape[r - 1] || v.shape[r - 2] != k.shape[r - 2]) fail();
  Shape s = q.shape;
  s[r - 1] = v.shape[r - 1];
  out.push_back({q.dtype, std::move(s)});
}

// The kernel is dt::scaled_dot_product_attention (dtensor/core/ops_attention.cc): tiled, with the
// softmax fused into each score block, and causal attention skipping the fully masked blocks.
void run_sdpa(const KernelArgs& a) {
  a.out[0] = dt::scaled_dot_product_attention(a.in[0], a.in[1], a.in[2], a.node.attr_bool("causal"));
}

// The gradient: one backward op recomputing the probabilities (dq, dk, dv).
void grad_sdpa(GradContext& c) {
  std::vector<Value*> g = c.b().record(OpKind::scaled_dot_product_attention_backward,
                                       {c.grad(), c.operand(0), c.operand(1), c.operand(2)},
                                       {{"causal", c.node().attr_bool("causal")}});
  for (int i = 0; i < 3; ++i) c.set(i, g[size_t(i)]);
}

// q·kᵀ and p·v over the unmasked (query, key) pairs: causal attention counts only the pairs its
// kernel computes (query i sees keys 0..i).
double sdpa_flops(const Node& node) {
  const Shape& q = node.operands[0]->type.shape;
  const Shape& k = node.operands[1]->type.shape;
  const Shape& v = node.operands[2]->type.shape;
  const int64_t S = q[q.size() - 2], D = q.back(), Sk = k[k.size() - 2], Dv = v.back();
  const double heads = S * D == 0 ? 0 : double(numel(q)) / double(S * D);
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
         .operands = {{"q"}, {"k"}, {"v"}},
         .attrs = {{"causal", AttrKind::boolean, Attr(false)}},
         .infer = infer_sdpa,
         .kernel = run_sdpa,
         .flops = sdpa_flops,
         .grad = grad_sdpa});
  t.set_sharding_rules(attention_sharding_rules());
}

}  // namespace dt::ir
