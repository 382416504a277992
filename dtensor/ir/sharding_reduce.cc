// Sharding rules of sum, mean, amax and amin. The kept dims pass through. A summed dim is a
// reduction factor (sharding it leaves P(sum)); a dim averaged by mean must be replicated, because
// with uneven shards the mean of local means is not the mean, and so must a dim amax/amin search
// (kept simple: a P(max) result would need its own reduce). sum alone is linear, so P(sum) passes
// through it and only it.
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/sharding_factors.h"

namespace dt::ir {
namespace {


OpShardingRule reduce_rule(const Node& n) {
  OpShardingRule r;
  const Shape& x = n.operands[0]->type.shape;
  const auto& dims = n.attr_ints("dims");
  const bool keepdim = n.attr_bool("keepdim");
  std::vector<bool> reduced(x.size(), dims.empty());
  for (int64_t d : dims) reduced[size_t(normalize_dim(d, int64_t(x.size())))] = true;
  TensorFactors xf(x.size()), yf;
  for (size_t d = 0; d < x.size(); ++d) {
    if (!reduced[d]) {
      int f = r.add_factor(x[d]);
      xf[d] = dim_of(f);
      yf.push_back(dim_of(f));
      continue;
    }
    if (n.op == OpKind::sum) xf[d] = dim_of(r.add_factor(x[d], FactorKind::reduction));
    if (keepdim) yf.push_back(dim_of(-1));
  }
  r.operands.push_back(std::move(xf));
  r.results.push_back(std::move(yf));
  r.partial_all = n.op == OpKind::sum;
  return r;
}

}  // namespace

std::vector<RuleEntry> reduce_sharding_rules() {
  return {{OpKind::mean, reduce_rule}, {OpKind::sum, reduce_rule}, {OpKind::amax, reduce_rule},
          {OpKind::amin, reduce_rule}};
}

}  // namespace dt::ir
