// Sharding rules of the losses: both are means over every element (mse_loss) or row
// (cross_entropy) of a non-linear function. mse_loss needs everything replicated; cross_entropy's
// rows may be sharded (a partial sum of weighted local means, below). cross_entropy's class dim is an `expanded` factor:
// logits sharded on it stay sharded and the partitioner computes the loss with three small
// all_reduces (loss parallel, ir/ops/loss.cc) instead of gathering them.
#include <limits>

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
// Other attributes (nll_loss, ignore_index, sum / none): the classes replicated; the rows pass
// through for "none" ([N] result) and are a reduction for "sum" (local sums add up); a mean with
// ignored rows (divided by the global count of kept rows) needs them whole.
OpShardingRule nll_rule(const Node& n) {
  OpShardingRule r;
  const std::string& reduction = n.attr_str("reduction");
  if (reduction == "mean") return replicated_rule(n);
  const bool none = reduction == "none";
  const int rows = r.add_factor(n.operands[0]->type.shape[0], none ? FactorKind::pass_through : FactorKind::reduction);
  r.operands = {{dim_of(rows), DimFactors{}}, {dim_of(rows)}};
  r.results = {none ? TensorFactors{dim_of(rows)} : TensorFactors{}};
  return r;
}

OpShardingRule cross_entropy_rule(const Node& n) {
  if (n.attr_str("reduction") != "mean" || n.attr_int("ignore_index") != std::numeric_limits<int64_t>::min())
    return nll_rule(n);
  OpShardingRule r;
  const int rows = r.add_factor(n.operands[0]->type.shape[0], FactorKind::reduction);
  const int c = r.add_factor(n.operands[0]->type.shape[1], FactorKind::expanded);
  r.operands = {{dim_of(rows), dim_of(c)}, {dim_of(rows)}};
  r.results = {{}};
  return r;
}

}  // namespace

std::vector<RuleEntry> loss_sharding_rules() {
  return {{OpKind::cross_entropy, cross_entropy_rule}, {OpKind::mse_loss, replicated_rule}, {OpKind::nll_loss, nll_rule}};
}

}  // namespace dt::ir
