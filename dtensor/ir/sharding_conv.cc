// Sharding rules of conv and its gradient ops. The batch dim passes through; with one group, the
// output channels pass through like a colwise linear's features (weight dim 0, bias, result dim
// 1) and the input channels are contracted (sharding them leaves a P(sum) result, as a rowwise
// linear's input features). The spatial dims are replicated: a window reads its neighbours (halo
// exchange is not modelled). With several groups the channels stay replicated: a channel shard
// would have to hold whole groups.
// As einsum rules (rule_util::einsum; '_' a dim without a factor):
//   conv(x [N, C, H, W], w [O, C, KH, KW], b [O]) -> [N, O, OH, OW]: "nc__,oc__,o->no__" (c reduced)
//   conv_backward_input(g [N, O, OH, OW], w [O, C, KH, KW]) -> dx [N, C, H, W]: "no__,oc__->nc__"
//       (o reduced)
//   conv_backward_weight(g [N, O, OH, OW], x [N, C, H, W]) -> dw [O, C, KH, KW]: "no__,nc__->oc__"
//       (n reduced: a batch-sharded step leaves a partial weight gradient, data parallelism's
//       all_reduce)
#include <algorithm>
#include <string>
#include <vector>

#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/sharding_factors.h"

namespace dt::ir {
namespace {

// The einsum rule of a conv-family node: `operands` and `result` name the factors of each tensor's
// leading dims (batch, channels); its spatial dims get none ('_'). With several groups the channel
// factors are dropped too: only the batch remains.
OpShardingRule conv_family_rule(const Node& n, const std::vector<std::string>& operands, const std::string& result) {
  auto term = [&](std::string letters, int64_t rank) {
    if (n.attr_int("groups") != 1)
      std::replace_if(letters.begin(), letters.end(), [](char ch) { return ch != 'n'; }, '_');
    return letters + std::string(size_t(rank) - letters.size(), '_');
  };
  std::string spec;
  for (size_t i = 0; i < operands.size(); ++i) {
    if (i > 0) spec += ',';
    spec += term(operands[i], n.operands[i]->type.rank());
  }
  OpShardingRule r = rule_util::einsum(n, spec + "->" + term(result, n.result()->type.rank()));
  r.partial_one_of = 0b11;
  return r;
}

OpShardingRule conv_rule(const Node& n) {
  const bool bias = n.operands.size() == 3;
  OpShardingRule r = conv_family_rule(n, bias ? std::vector<std::string>{"nc", "oc", "o"} : std::vector<std::string>{"nc", "oc"},
                                      "no");
  if (bias) r.added_once = 2;  // a P(sum) result adds the bias on group index 0 only
  return r;
}

OpShardingRule conv_backward_input_rule(const Node& n) { return conv_family_rule(n, {"no", "oc"}, "nc"); }

OpShardingRule conv_backward_weight_rule(const Node& n) { return conv_family_rule(n, {"no", "nc"}, "oc"); }

}  // namespace

std::vector<RuleEntry> conv_sharding_rules() {
  return {{OpKind::conv, conv_rule},
          {OpKind::conv_backward_input, conv_backward_input_rule},
          {OpKind::conv_backward_weight, conv_backward_weight_rule}};
}

}  // namespace dt::ir
