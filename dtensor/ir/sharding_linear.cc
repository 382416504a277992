// Sharding rules of linear, matmul and bmm: batch and output dims pass through, the contracted
// dim is a reduction factor (sharding it leaves a P(sum) result); each op is linear in each of its
// operands, so one P(sum) operand with the others replicated gives a P(sum) result.
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/sharding_factors.h"

namespace dt::ir {
namespace {


// linear(x [..., k], w [o, k], b? [o]) -> [..., o]
OpShardingRule linear_rule(const Node& n) {
  OpShardingRule r;
  const Shape& x = n.operands[0]->type.shape;
  const Shape& w = n.operands[1]->type.shape;
  TensorFactors xf = rule_util::pass_through_leading(r, x, 1);
  const int k = r.add_factor(w[1], FactorKind::reduction);
  const int o = r.add_factor(w[0]);
  xf.back() = dim_of(k);
  TensorFactors yf = xf;
  yf.back() = dim_of(o);
  r.operands.push_back(std::move(xf));
  r.operands.push_back({dim_of(o), dim_of(k)});
  if (n.operands.size() == 3) {
    r.operands.push_back({dim_of(o)});
    r.added_once = 2;
  }
  r.results.push_back(std::move(yf));
  r.partial_one_of = 0b11;
  return r;
}

// torch.matmul: 1-d operands get a dim prepended/appended and removed again; batch dims broadcast.
OpShardingRule matmul_rule(const Node& n) {
  OpShardingRule r;
  const Shape& a = n.operands[0]->type.shape;
  const Shape& b = n.operands[1]->type.shape;
  const Shape& y = n.result()->type.shape;
  const bool a1 = a.size() == 1, b1 = b.size() == 1;
  const size_t batch = y.size() - (a1 ? 0 : 1) - (b1 ? 0 : 1);
  std::vector<int> bf(batch);
  for (size_t d = 0; d < batch; ++d) bf[d] = y[d] > 1 ? r.add_factor(y[d]) : -1;
  const int m = a1 ? -1 : r.add_factor(a[a.size() - 2]);
  const int k = r.add_factor(a.back(), FactorKind::reduction);
  const int nn = b1 ? -1 : r.add_factor(b.back());
  auto batch_dims = [&](const Shape& s, size_t own_batch) {
    TensorFactors t;
    for (size_t i = 0; i < own_batch; ++i) {
      size_t d = batch - own_batch + i;
      t.push_back(dim_of(s[i] == y[d] ? bf[d] : -1));
    }
    return t;
  };
  TensorFactors af = batch_dims(a, a1 ? 0 : a.size() - 2);
  if (!a1) af.push_back(dim_of(m));
  af.push_back(dim_of(k));
  TensorFactors bfac = batch_dims(b, b1 ? 0 : b.size() - 2);
  bfac.push_back(dim_of(k));
  if (!b1) bfac.push_back(dim_of(nn));
  TensorFactors yf;
  for (size_t d = 0; d < batch; ++d) yf.push_back(dim_of(bf[d]));
  if (!a1) yf.push_back(dim_of(m));
  if (!b1) yf.push_back(dim_of(nn));
  r.operands = {std::move(af), std::move(bfac)};
  r.results = {std::move(yf)};
  r.partial_one_of = 0b11;
  return r;
}

// bmm([b, m, k], [b, k, n]) -> [b, m, n]
OpShardingRule bmm_rule(const Node& n) {
  OpShardingRule r;
  const Shape& a = n.operands[0]->type.shape;
  const Shape& b = n.operands[1]->type.shape;
  const int bb = r.add_factor(a[0]), m = r.add_factor(a[1]);
  const int k = r.add_factor(a[2], FactorKind::reduction), nn = r.add_factor(b[2]);
  r.operands = {{dim_of(bb), dim_of(m), dim_of(k)}, {dim_of(bb), dim_of(k), dim_of(nn)}};
  r.results = {{dim_of(bb), dim_of(m), dim_of(nn)}};
  r.partial_one_of = 0b11;
  return r;
}

}  // namespace

std::vector<RuleEntry> linear_sharding_rules() {
  return {{OpKind::bmm, bmm_rule}, {OpKind::linear, linear_rule}, {OpKind::matmul, matmul_rule}};
}

}  // namespace dt::ir
