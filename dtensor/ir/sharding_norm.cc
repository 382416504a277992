// Sharding rules of layer_norm, rms_norm, softmax and log_softmax: the normalised dims need every element, so
// they must be replicated; the other dims pass through. None is linear.
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/sharding_factors.h"

namespace dt::ir {
namespace {


OpShardingRule norm_rule(const Node& n) {
  OpShardingRule r;
  const Shape& x = n.operands[0]->type.shape;
  const size_t normalized = n.attr_ints("normalized_shape").size();
  rule_util::operand_and_result(r, rule_util::pass_through_leading(r, x, normalized));
  for (size_t i = 1; i < n.operands.size(); ++i) r.operands.push_back(TensorFactors(normalized));
  return r;
}

OpShardingRule softmax_rule(const Node& n) {
  OpShardingRule r;
  rule_util::operand_and_result(r, rule_util::pass_through_except(r, n.operands[0]->type.shape, n.attr_int("dim")));
  return r;
}

}  // namespace

std::vector<RuleEntry> norm_sharding_rules() {
  return {{OpKind::layer_norm, norm_rule}, {OpKind::rms_norm, norm_rule}, {OpKind::softmax, softmax_rule},
          {OpKind::log_softmax, softmax_rule}};
}

}  // namespace dt::ir
