// Sharding rule of scaled_dot_product_attention(q [..., S, D], k [..., Sk, D], v [..., Sk, Dv]):
// the batch dims (batch, heads) and Dv pass through, which is what tensor-parallel attention
// needs (heads split across ranks). D and Sk feed a softmax, so they must be replicated; S passes
// through only without the causal mask (the kernel builds the mask from local indices). The
// output is linear in v alone.
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/sharding_factors.h"

namespace dt::ir {
namespace {


OpShardingRule sdpa_rule(const Node& n) {
  OpShardingRule r;
  const Shape& q = n.operands[0]->type.shape;
  const Shape& v = n.operands[2]->type.shape;
  const size_t rank = q.size();
  const TensorFactors kf = rule_util::pass_through_leading(r, q, 2);  // batch dims; S and D replicated
  const int s = n.attr_bool("causal") ? -1 : r.add_factor(q[rank - 2]);
  const int dv = r.add_factor(v[rank - 1]);
  TensorFactors qf = kf, vf = kf, of = kf;
  qf[rank - 2] = of[rank - 2] = dim_of(s);
  vf[rank - 1] = of[rank - 1] = dim_of(dv);
  r.operands = {std::move(qf), std::move(kf), std::move(vf)};
  r.results = {std::move(of)};
  r.partial_one_of = 0b100;
  return r;
}

}  // namespace

std::vector<RuleEntry> attention_sharding_rules() { return {{OpKind::scaled_dot_product_attention, sdpa_rule}}; }

}  // namespace dt::ir
