// Sharding rules of linear, matmul and bmm: batch and output dims pass through, the contracted
// dim is a reduction factor (sharding it leaves a P(sum) result); each op is linear in each of its
// operands, so one P(sum) operand with the others replicated gives a P(sum) result.
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/sharding_factors.h"

namespace dt::ir {
namespace {

// linear(x [..., k], w [o, k], b? [o]) -> [..., o]; only group index 0 adds the bias to a P(sum)
// result.
OpShardingRule linear_rule(const Node& n) {
  OpShardingRule r = rule_util::einsum(n, n.operands.size() == 3 ? "...k,ok,o->...o" : "...k,ok->...o");
  if (n.operands.size() == 3) r.added_once = 2;
  r.partial_one_of = 0b11;
  return r;
}

// torch.matmul: a 1-d operand is a vector (its dim prepended or appended and removed again);
// batch dims broadcast.
OpShardingRule matmul_rule(const Node& n) {
  const bool a1 = n.operands[0]->type.rank() == 1, b1 = n.operands[1]->type.rank() == 1;
  OpShardingRule r = rule_util::einsum(n, a1 && b1 ? "k,k->" : a1 ? "k,...kn->...n" : b1 ? "...mk,k->...m"
                                                                                     : "...mk,...kn->...mn");
  r.partial_one_of = 0b11;
  return r;
}

// bmm([b, m, k], [b, k, n]) -> [b, m, n]
OpShardingRule bmm_rule(const Node& n) {
  OpShardingRule r = rule_util::einsum(n, "bmk,bkn->bmn");
  r.partial_one_of = 0b11;
  return r;
}

}  // namespace

std::vector<RuleEntry> linear_sharding_rules() {
  return {{OpKind::bmm, bmm_rule}, {OpKind::linear, linear_rule}, {OpKind::matmul, matmul_rule}};
}

}  // namespace dt::ir
