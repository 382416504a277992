// Sharding rules of the elementwise ops: every dim passes through (broadcast size-1 dims excepted).
// add and sub are linear in both operands together (P + P = P); mul is linear in each operand
// (P · R = P), div in its numerator. relu, gelu, silu, cast, the math functions (exp ... clamp),
// maximum/minimum, the comparisons and the logical ops are not linear: a partial operand is reduced first. where
// broadcasts its three operands; masked_fill broadcasts the mask to x and is linear in x when it
// fills with 0 (the zeros of every shard sum to zero).
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/sharding_factors.h"

namespace dt::ir {
namespace {


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

OpShardingRule where_rule(const Node& n) {
  OpShardingRule r;
  rule_util::broadcast_factors(r, {&n.operands[0]->type.shape, &n.operands[1]->type.shape, &n.operands[2]->type.shape},
                               n.result()->type.shape);
  return r;
}

OpShardingRule masked_fill_rule(const Node& n) {
  OpShardingRule r = binary(n);
  if (n.attr_float("value") == 0.0) r.partial_one_of = 0b01;
  return r;
}

}  // namespace

std::vector<RuleEntry> elementwise_sharding_rules() {
  return {{OpKind::add, additive_rule}, {OpKind::cast, unary_rule}, {OpKind::div, div_rule},
          {OpKind::gelu, unary_rule},   {OpKind::mul, mul_rule},    {OpKind::neg, neg_rule},
          {OpKind::relu, unary_rule},
          {OpKind::silu, unary_rule},   {OpKind::leaky_relu, unary_rule}, {OpKind::softplus, unary_rule},   {OpKind::sub, additive_rule},
          {OpKind::exp, unary_rule},    {OpKind::log, unary_rule},  {OpKind::sqrt, unary_rule},
          {OpKind::rsqrt, unary_rule},  {OpKind::tanh, unary_rule}, {OpKind::sigmoid, unary_rule},
          {OpKind::erf, unary_rule},    {OpKind::sin, unary_rule},  {OpKind::cos, unary_rule},
          {OpKind::abs, unary_rule},    {OpKind::pow, unary_rule},  {OpKind::clamp, unary_rule},
          {OpKind::maximum, binary},    {OpKind::minimum, binary},  {OpKind::eq, binary},
          {OpKind::ne, binary},         {OpKind::lt, binary},       {OpKind::le, binary},
          {OpKind::gt, binary},         {OpKind::ge, binary},       {OpKind::where, where_rule},
          {OpKind::masked_fill, masked_fill_rule}, {OpKind::logical_and, binary},
          {OpKind::logical_or, binary},         {OpKind::logical_xor, binary}};
}

}  // namespace dt::ir
