// Sharding rules of the losses: both are means over every element (mse_loss) or row
// (cross_entropy) of a non-linear function, so the scalar result is replicated and the rows are
// too. mse_loss needs everything replicated. cross_entropy's class dim is an `expanded` factor:
// logits sharded on it stay sharded and the partitioner computes the loss with three small
// all_reduces (loss parallel, ir/ops_loss.cc) instead of gathering them.
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/sharding_factors.h"

namespace dt::ir {
namespace {

OpShardingRule replicated_rule(const Node& n) {
  OpShardingRule r;
  for (const Value* v : n.operands) r.operands.push_back(TensorFactors(v->type.shape.size()));
  for (const Value* v : n.results) r.results.push_back(TensorFactors(v->type.shape.size()));
  return r;
}

// cross_entropy(logits [N, C], target [N]) -> []
OpShardingRule cross_entropy_rule(const Node& n) {
  OpShardingRule r;
  const int c = r.add_factor(n.operands[0]->type.shape[1], FactorKind::expanded);
  r.operands = {{dim_of(-1), dim_of(c)}, {dim_of(-1)}};
  r.results = {{}};
  return r;
}

}  // namespace

std::vector<RuleEntry> loss_sharding_rules() {
  return {{OpKind::cross_entropy, cross_entropy_rule}, {OpKind::mse_loss, replicated_rule}};
}

}  // namespace dt::ir
