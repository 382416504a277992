// Sharding rules of the losses: both are means over every element (mse_loss) or row
// (cross_entropy) of a non-linear function. mse_loss needs everything replicated; cross_entropy's
// rows may be sharded (a partial sum of weighted local means, below). cross_entropy's class dim is an `expanded` factor:
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

// cross_entropy(logits [N, C], target [N]) -> []. The rows are a reduction factor: logits and
// targets sharded on them (data parallel) stay sharded and the loss is a partial sum, each rank's
// mean weighted by its share of the rows (the partitioner adds the weight), never gathering the
// logits rows.
OpShardingRule cross_entropy_rule(const Node& n) {
  OpShardingRule r;
  const int rows = r.add_factor(n.operands[0]->type.shape[0], FactorKind::reduction);
  const int c = r.add_factor(n.operands[0]->type.shape[1], FactorKind::expanded);
  r.operands = {{dim_of(rows), dim_of(c)}, {dim_of(rows)}};
  r.results = {{}};
  return r;
}

}  // namespace

std::vector<RuleEntry> loss_sharding_rules() {
  return {{OpKind::cross_entropy, cross_entropy_rule}, {OpKind::mse_loss, replicated_rule}};
}

}  // namespace dt::ir
