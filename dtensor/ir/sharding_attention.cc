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
  TensorFactors batch;
  for (size_t d = 0; d + 2 < rank; ++d) batch.push_back(dim_of(r.add_factor(q[d])));
  const int s = n.attr_bool("causal") ? -1 : r.add_factor(q[rank - 2]);
  const int dv = r.add_factor(v[rank - 1]);
  TensorFactors qf = batch, kf = batch, vf = batch, of = batch;
  qf.push_back(dim_of(s));
  qf.push_back(dim_of(-1));
  kf.push_back(dim_of(-1));
  kf.push_back(dim_of(-1));
  vf.push_back(dim_of(-1));
  vf.push_back(dim_of(dv));
  of.push_back(dim_of(s));
  of.push_back(dim_of(dv));
  r.operands = {std::move(qf), std::move(kf), std::move(vf)};
  r.results = {std::move(of)};
  r.partial_one_of = 0b100;
  return r;
}

}  // namespace

std::vector<RuleEntry> attention_sharding_rules() { return {{OpKind::scaled_dot_product_attention, sdpa_rule}}; }

}  // namespace dt::ir
