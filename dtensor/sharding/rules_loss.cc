// Sharding rules of the losses: both are means over every element (mse_loss) or row
// (cross_entropy) of a non-linear function, so every operand dim must be replicated and the scalar
// result is replicated.
#include "dtensor/ir/op_registry.h"
#include "dtensor/sharding/sharding_rule.h"

namespace dt::sharding {
namespace {

OpShardingRule replicated_rule(const ir::Node& n) {
  OpShardingRule r;
  for (const ir::Value* v : n.operands) r.operands.push_back(TensorFactors(v->type.shape.size()));
  for (const ir::Value* v : n.results) r.results.push_back(TensorFactors(v->type.shape.size()));
  return r;
}

}  // namespace

std::vector<RuleEntry> loss_rules() {
  return {{ir::OpKind::cross_entropy, replicated_rule}, {ir::OpKind::mse_loss, replicated_rule}};
}

}  // namespace dt::sharding
