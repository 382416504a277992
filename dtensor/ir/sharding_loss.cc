// Sharding rules of the losses: both are means over every element (mse_loss) or row
// (cross_entropy) of a non-linear function. mse_loss needs everything replicated; cross_entropy's
// rows may be sharded (a partial sum of weighted local means, below). cross_entropy's class dim is an `expanded` factor:
// logits sharded on it stay sharded and the loss is computed with three small all_reduces (loss
// parallel, ir/ops/loss.cc) instead of gathering them: the op's `expand` (below) writes that form
// when the partitioner copies the node into a rank's program.
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
// mean weighted by its share of the rows (OpDef::row_mean: the partitioner adds the weight), never
// gathering the logits rows.
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

// The [N] row statistics of the local logits (operand `logits`, sharded on their classes), reduced
// over the mesh dims sharding the classes: the row max, the sum of exp(x - max) and, when `target`
// is given, the target logit (ir/ops/loss.cc). Rows sharded on a mesh dim (data parallel) stay
// sharded: the statistics are per row.
std::vector<Value*> row_stats(ExpandContext& ctx, int logits, Value* target) {
  Value* x = ctx.operands[size_t(logits)];
  const TensorType local_stat{x->type.dtype, {x->type.shape[0]}};
  auto stat = [&](OpKind op, std::vector<Value*> in, const NamedAttrs& attrs, const std::string& suffix, ReduceOp r) {
    return ctx.reduce_over(ctx.append(op, std::move(in), attrs, local_stat, suffix), r, logits, 1);
  };
  Value* max = stat(OpKind::cross_entropy_max, {x}, {}, ".max", ReduceOp::max);
  Value* sum_exp = stat(OpKind::cross_entropy_sum_exp, {x, max}, {}, ".sumexp", ReduceOp::sum);
  if (!target) return {max, sum_exp};
  const NamedAttrs start{{"class_start", *ctx.shard_start(logits, 1)}};
  return {max, sum_exp, stat(OpKind::cross_entropy_target_logit, {x, target}, start, ".target", ReduceOp::sum)};
}

// cross_entropy on class-sharded logits: its loss-parallel pieces, three all_reduces of [N] row
// statistics over the mesh dims sharding the classes. Keeps the row max and sum for the backward
// of the same logits.
Value* expand_cross_entropy(ExpandContext& ctx) {
  if (!ctx.shard_start(0, 1)) return nullptr;  // classes whole: the op runs as it is
  std::vector<Value*> st = row_stats(ctx, 0, ctx.operands[1]);
  ctx.kept[ctx.operands[0]] = st;
  return ctx.append(OpKind::cross_entropy_combine, st, {}, ctx.local_result, "");
}

// Only the default mean is a mean of the rows (a sum's local sums add up as they are).
bool mean_reduction(const Node& n) { return n.attr_str("reduction") == "mean"; }

}  // namespace

// cross_entropy_backward(grad, logits, target) on class-sharded logits: this rank's columns of the
// gradient, cross_entropy_backward with the row statistics (ir/ops/grad.cc). Those are the
// forward's when it expanded the same local logits (no collective at all), else two all_reduces
// of [N] here.
Value* expand_cross_entropy_backward(ExpandContext& ctx) {
  const std::optional<int64_t> class_start = ctx.shard_start(1, 1);
  if (!class_start) return nullptr;
  auto it = ctx.kept.find(ctx.operands[1]);
  const std::vector<Value*> st = it != ctx.kept.end() ? it->second : row_stats(ctx, 1, nullptr);
  return ctx.append(OpKind::cross_entropy_backward,
                    {ctx.operands[0], ctx.operands[1], ctx.operands[2], st[0], st[1]},
                    {{"count", ctx.node.attr_int("count")}, {"class_start", *class_start}}, ctx.local_result, "");
}

std::vector<RuleEntry> loss_sharding_rules() {
  return {{OpKind::cross_entropy, cross_entropy_rule, expand_cross_entropy, mean_reduction},
          {OpKind::mse_loss, replicated_rule},
          {OpKind::nll_loss, nll_rule}};
}

}  // namespace dt::ir
