// Sharding rules of conv and its gradient ops. The batch dim passes through; with one group, the
// output channels pass through like a colwise linear's features (weight dim 0, bias, result dim
// 1) and the input channels are contracted (sharding them leaves a P(sum) result, as a rowwise
// linear's input features). The spatial dims are replicated: a window reads its neighbours (halo
// exchange is not modelled). With several groups the channels stay replicated: a channel shard
// would have to hold whole groups.
//   conv(x [N, C, H, W], w [O, C, KH, KW], b [O]) -> [N, O, OH, OW]: factors N, O, C (reduction)
//   conv_backward_input(g [N, O, OH, OW], w [O, C, KH, KW]) -> dx [N, C, H, W]: N, C, O (reduction)
//   conv_backward_weight(g [N, O, OH, OW], x [N, C, H, W]) -> dw [O, C, KH, KW]: O, C, N (reduction:
//       a batch-sharded step leaves a partial weight gradient, data parallelism's all_reduce)
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/sharding_factors.h"

namespace dt::ir {
namespace {

// Factors on dims 0 and 1 of a tensor of `rank` dims, none on the rest (-1: none).
TensorFactors two_dims(size_t rank, int f0, int f1) {
  TensorFactors t(rank);
  t[0] = dim_of(f0);
  t[1] = dim_of(f1);
  return t;
}

OpShardingRule conv_rule(const Node& n) {
  const Shape& x = n.operands[0]->type.shape;
  const Shape& w = n.operands[1]->type.shape;
  const bool channels = n.attr_int("groups") == 1;
  OpShardingRule r;
  const int fn = r.add_factor(x[0]);
  const int fo = channels ? r.add_factor(w[0]) : -1;
  const int fc = channels ? r.add_factor(x[1], FactorKind::reduction) : -1;
  r.operands.push_back(two_dims(x.size(), fn, fc));
  r.operands.push_back(two_dims(w.size(), fo, fc));
  if (n.operands.size() == 3) {
    r.operands.push_back({dim_of(fo)});
    r.added_once = 2;
  }
  r.results.push_back(two_dims(x.size(), fn, fo));
  r.partial_one_of = 0b11;
  return r;
}

OpShardingRule conv_backward_input_rule(const Node& n) {
  const Shape& g = n.operands[0]->type.shape;
  const Shape& w = n.operands[1]->type.shape;
  const bool channels = n.attr_int("groups") == 1;
  OpShardingRule r;
  const int fn = r.add_factor(g[0]);
  const int fc = channels ? r.add_factor(w[1]) : -1;
  const int fo = channels ? r.add_factor(w[0], FactorKind::reduction) : -1;
  r.operands.push_back(two_dims(g.size(), fn, fo));
  r.operands.push_back(two_dims(w.size(), fo, fc));
  r.results.push_back(two_dims(g.size(), fn, fc));
  r.partial_one_of = 0b11;
  return r;
}

OpShardingRule conv_backward_weight_rule(const Node& n) {
  const Shape& g = n.operands[0]->type.shape;
  const Shape& x = n.operands[1]->type.shape;
  const bool channels = n.attr_int("groups") == 1;
  OpShardingRule r;
  const int fo = channels ? r.add_factor(g[1]) : -1;
  const int fc = channels ? r.add_factor(x[1]) : -1;
  const int fn = r.add_factor(g[0], FactorKind::reduction);
  r.operands.push_back(two_dims(g.size(), fn, fo));
  r.operands.push_back(two_dims(x.size(), fn, fc));
  r.results.push_back(two_dims(g.size(), fo, fc));
  r.partial_one_of = 0b11;
  return r;
}

}  // namespace

std::vector<RuleEntry> conv_sharding_rules() {
  return {{OpKind::conv, conv_rule},
          {OpKind::conv_backward_input, conv_backward_input_rule},
          {OpKind::conv_backward_weight, conv_backward_weight_rule}};
}

}  // namespace dt::ir
