// Sharding rules of the elementwise ops: every dim passes through (broadcast size-1 dims excepted).
// add and sub are linear in both operands together (P + P = P), add also in each with the other
// added once (P + R = P, add_rule); mul is linear in each operand
// (P · R = P), div in its numerator. relu, gelu, silu, cast, the math functions (exp ... clamp),
// maximum/minimum, the comparisons and the logical ops are not linear: a partial operand is reduced first. where
// broadcasts its three operands; masked_fill broadcasts the mask to x and is linear in x when it
// fills with 0 (the zeros of every shard sum to zero).
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/sharding_factors.h"

namespace dt::ir {
namespace {


// Every operand broadcasts to the result: a dim passes through where the operand has it.
OpShardingRule broadcast_rule(const Node& n) {
  OpShardingRule r;
  std::vector<const Shape*> shapes;
  for (const Value* v : n.operands) shapes.push_back(&v->type.shape);
  rule_util::broadcast_factors(r, shapes, n.result()->type.shape);
  return r;
}

OpShardingRule unary_rule(const Node& n) {
  OpShardingRule r;
  rule_util::operand_and_result(r, rule_util::pass_through_dims(r, n.operands[0]->type.shape));
  return r;
}

// `r` for an op linear in its operands together: P + P = P.
OpShardingRule linear_jointly(OpShardingRule r) {
  r.partial_all = true;
  return r;
}

// `r` for an op linear in each operand of `operands` (a bit each) while the others are R.
OpShardingRule linear_in_each(OpShardingRule r, uint32_t operands) {
  r.partial_one_of = operands;
  return r;
}

OpShardingRule additive_rule(const Node& n) { return linear_jointly(broadcast_rule(n)); }

// add is also linear in each operand with the other added once: P(sum) + R = P(sum) where only
// group index 0 adds the R operand (the others' result is their partial operand as it is). A
// residual add after a rowwise projection then needs no all_reduce of its own: the sum's
// reduction moves to the residual stream's next reader (a norm), the same bytes as before, and
// the add becomes the projection's epilogue on index 0 and nothing elsewhere. Only for operands of
// the result's type (a broadcast operand would make the reduced tensor larger).
OpShardingRule add_rule(const Node& n) {
  OpShardingRule r = additive_rule(n);
  const TensorType& out = n.result()->type;
  if (n.operands.size() != 2 || n.operands[0]->type != out || n.operands[1]->type != out) return r;
  for (int once : {0, 1}) {
    OpShardingRule alt = broadcast_rule(n);
    alt.partial_one_of = 1u << (1 - once);
    alt.added_once = once;
    alt.defers_reduction = true;
    r.alternatives.push_back(std::move(alt));
  }
  return r;
}
OpShardingRule mul_rule(const Node& n) { return linear_in_each(broadcast_rule(n), 0b11); }
OpShardingRule div_rule(const Node& n) { return linear_in_each(broadcast_rule(n), 0b01); }
// neg is linear: a partial operand stays partial.
OpShardingRule neg_rule(const Node& n) { return linear_jointly(unary_rule(n)); }

OpShardingRule masked_fill_rule(const Node& n) {
  return linear_in_each(broadcast_rule(n), n.attr_float("value") == 0.0 ? 0b01 : 0);
}

}  // namespace

std::vector<RuleEntry> elementwise_sharding_rules() {
  return {{OpKind::add, add_rule}, {OpKind::cast, unary_rule}, {OpKind::div, div_rule},
          {OpKind::gelu, unary_rule},   {OpKind::mul, mul_rule},    {OpKind::neg, neg_rule},
          {OpKind::relu, unary_rule},
          {OpKind::silu, unary_rule},   {OpKind::leaky_relu, unary_rule}, {OpKind::softplus, unary_rule},   {OpKind::sub, additive_rule},
          {OpKind::exp, unary_rule},    {OpKind::log, unary_rule},  {OpKind::sqrt, unary_rule},
          {OpKind::rsqrt, unary_rule},  {OpKind::tanh, unary_rule}, {OpKind::sigmoid, unary_rule},
          {OpKind::erf, unary_rule},    {OpKind::sin, unary_rule},  {OpKind::cos, unary_rule},
          {OpKind::abs, unary_rule},    {OpKind::pow, unary_rule},  {OpKind::clamp, unary_rule},
          {OpKind::maximum, broadcast_rule},    {OpKind::minimum, broadcast_rule},  {OpKind::eq, broadcast_rule},
          {OpKind::ne, broadcast_rule},         {OpKind::lt, broadcast_rule},       {OpKind::le, broadcast_rule},
          {OpKind::gt, broadcast_rule},         {OpKind::ge, broadcast_rule},       {OpKind::where, broadcast_rule},
          {OpKind::masked_fill, masked_fill_rule}, {OpKind::logical_and, broadcast_rule},
          {OpKind::logical_or, broadcast_rule},         {OpKind::logical_xor, broadcast_rule}};
}

}  // namespace dt::ir
