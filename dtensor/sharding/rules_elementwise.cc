// Sharding rules of the elementwise ops: every dim passes through (broadcast size-1 dims excepted).
// add and sub are linear in both operands together (P + P = P); mul is linear in each operand
// (P · R = P), div in its numerator. relu, gelu, silu and cast are not linear: a partial operand is
// reduced first.
#include "dtensor/ir/op_registry.h"
#include "dtensor/sharding/sharding_rule.h"

namespace dt::sharding {
namespace {

using ir::Node;

OpShardingRule binary(const Node& n) {
  OpShardingRule r;
  rule_util::broadcast_factors(r, {&n.operands[0]->type.shape, &n.operands[1]->type.shape}, n.result()->type.shape);
  return r;
}

OpShardingRule additive_rule(const Node& n) {
  OpShardingRule r = binary(n);
  r.partial_all = true;
  return r;
}

OpShardingRule mul_rule(const Node& n) {
  OpShardingRule r = binary(n);
  r.partial_one_of = 0b11;
  return r;
}

OpShardingRule div_rule(const Node& n) {
  OpShardingRule r = binary(n);
  r.partial_one_of = 0b01;
  return r;
}

OpShardingRule unary_rule(const Node& n) {
  OpShardingRule r;
  TensorFactors t = rule_util::pass_through_dims(r, n.operands[0]->type.shape);
  r.operands.push_back(t);
  r.results.push_back(std::move(t));
  return r;
}

// neg is linear: a partial operand stays partial.
OpShardingRule neg_rule(const Node& n) {
  OpShardingRule r = unary_rule(n);
  r.partial_all = true;
  return r;
}

}  // namespace

std::vector<RuleEntry> elementwise_rules() {
  using ir::OpKind;
  return {{OpKind::add, additive_rule}, {OpKind::cast, unary_rule}, {OpKind::div, div_rule},
          {OpKind::gelu, unary_rule},   {OpKind::mul, mul_rule},    {OpKind::neg, neg_rule},
          {OpKind::relu, unary_rule},
          {OpKind::silu, unary_rule},   {OpKind::sub, additive_rule}};
}

}  // namespace dt::sharding
