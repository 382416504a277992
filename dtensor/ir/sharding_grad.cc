// Sharding rules of the backward ops (ir/ops/grad.cc) and the optimizer updates (ir/ops/optim.cc).
//
// The pointwise backwards (relu/gelu/silu) and softmax_backward are elementwise in (grad, x) like
// their forward, and linear in grad; the norm backwards keep the normalised dims replicated, as
// the forward. Attention's backward shards the batch and head dims (tensor-parallel heads). The
// weight gradient of embedding sums rows over every index: the index dims are reduction factors,
// so batch-sharded indices leave a partial sum (reduce_scatter / all_reduce by the plan). The
// losses' backwards shard their rows, and cross_entropy's its classes too (loss parallel).
// An optimizer update is elementwise over parameter, gradient and state, so state is sharded
// like its parameter and a step never moves it.
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/sharding_factors.h"

namespace dt::ir {
namespace {


// The first `shared` operands (the gradient, x, ...) and the result all have the factors t; the
// rule is linear in the gradient.
OpShardingRule like_x_linear_in_grad(OpShardingRule r, const TensorFactors& t, size_t shared) {
  r.operands.assign(shared, t);
  r.results = {t};
  r.partial_one_of = 0b1;
  return r;
}

// Operand 0 (the gradient) and operand 1 share every dim; other operands have the same shape too.
OpShardingRule pointwise_backward(const Node& n) {
  OpShardingRule r;
  TensorFactors t = rule_util::pass_through_dims(r, n.operands[1]->type.shape);
  return like_x_linear_in_grad(std::move(r), t, n.operands.size());
}

OpShardingRule softmax_backward(const Node& n) {
  OpShardingRule r;
  TensorFactors t = rule_util::pass_through_except(r, n.operands[1]->type.shape, n.attr_int("dim"));
  return like_x_linear_in_grad(std::move(r), t, 2);
}

// (grad, x[, weight]): the weight covers the normalised dims, which stay replicated.
OpShardingRule norm_backward(const Node& n) {
  OpShardingRule r;
  const size_t normalized = n.attr_ints("normalized_shape").size();
  TensorFactors t = rule_util::pass_through_leading(r, n.operands[1]->type.shape, normalized);
  r = like_x_linear_in_grad(std::move(r), t, 2);
  if (n.operands.size() > 2) r.operands.push_back(TensorFactors(normalized));
  return r;
}

// (grad [..., H], indices [...]) -> [V, H]
OpShardingRule embedding_backward(const Node& n) {
  OpShardingRule r;
  const Shape& idx = n.operands[1]->type.shape;
  TensorFactors it;
  for (int64_t s : idx) it.push_back(dim_of(r.add_factor(s, FactorKind::reduction)));
  const int h = r.add_factor(n.operands[0]->type.shape.back());
  TensorFactors gt = it;
  gt.push_back(dim_of(h));
  r.operands = {std::move(gt), std::move(it)};
  r.results = {{dim_of(-1), dim_of(h)}};
  // Not marked linear in grad although it is: a partial grad would make the [V, H] table gradient
  // partial, and reducing the table costs far more than reducing the [..., H] gradient first.
  return r;
}

// (grad [], input, target) -> dinput: elementwise over input and target.
OpShardingRule mse_backward(const Node& n) {
  OpShardingRule r;
  TensorFactors t = rule_util::pass_through_dims(r, n.operands[1]->type.shape);
  r.operands = {TensorFactors{}, t, t};
  r.results = {std::move(t)};
  return r;
}

// (grad [], logits [N, C], target [N]) -> [N, C]: rows and classes pass through. Class-sharded
// logits (loss parallel) give a class-sharded gradient: the partitioner writes it as
// cross_entropy_backward with the forward's row statistics (ir/ops/loss.cc), never
// gathering the logits.
OpShardingRule cross_entropy_backward(const Node& n) {
  OpShardingRule r;
  const int rows = r.add_factor(n.operands[1]->type.shape[0]);
  const int classes = r.add_factor(n.operands[1]->type.shape[1]);
  r.operands = {TensorFactors{}, {dim_of(rows), dim_of(classes)}, {dim_of(rows)}};
  r.results = {{dim_of(rows), dim_of(classes)}};
  return r;
}

// slice_backward(grad) {shape, dim, ...}: every dim but the sliced one passes through.
OpShardingRule slice_backward(const Node& n) {
  OpShardingRule r;
  TensorFactors t = rule_util::pass_through_except(r, n.operands[0]->type.shape, n.attr_int("dim"));
  r.operands = {t};
  r.results = {std::move(t)};
  r.partial_all = true;
  return r;
}

// Every operand and result with the parameter's shape shares its factors; scalars (adamw's step
// and its successor) are replicated, and the successor reads no factor (replicated_results), so
// the update runs on the shards.
OpShardingRule optimizer_update(const Node& n) {
  OpShardingRule r;
  const Shape& p = n.operands[0]->type.shape;
  TensorFactors t = rule_util::pass_through_dims(r, p);
  auto factors = [&](const Value* v) { return v->type.shape == p ? t : TensorFactors(v->type.shape.size()); };
  for (const Value* v : n.operands) r.operands.push_back(factors(v));
  for (size_t k = 0; k < n.results.size(); ++k) {
    r.results.push_back(factors(n.results[k]));
    if (n.results[k]->type.shape != p) r.replicated_results |= 1u << k;
  }
  return r;
}

}  // namespace

std::vector<RuleEntry> grad_sharding_rules() {
  return {{OpKind::relu_backward, pointwise_backward},
          {OpKind::gelu_backward, pointwise_backward},
          {OpKind::silu_backward, pointwise_backward},
          {OpKind::softmax_backward, softmax_backward},
          {OpKind::layer_norm_backward, norm_backward},
          {OpKind::rms_norm_backward, norm_backward},
          {OpKind::scaled_dot_product_attention_backward, attention_backward_rule, expand_grouped_attention_backward},
          {OpKind::embedding_backward, embedding_backward},
          {OpKind::mse_loss_backward, mse_backward},
          {OpKind::cross_entropy_backward, cross_entropy_backward, expand_cross_entropy_backward},
          {OpKind::slice_backward, slice_backward}};
}

std::vector<RuleEntry> optim_sharding_rules() {
  return {{OpKind::sgd_update, optimizer_update}, {OpKind::adamw_update, optimizer_update}};
}

}  // namespace dt::ir
