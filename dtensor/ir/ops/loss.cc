// Losses, reduced to a scalar mean as PyTorch's default reduction="mean":
//   mse_loss(input, target)        = mean((input - target)^2)
//   cross_entropy(logits [N, C], target [N] int) {reduction, ignore_index}
//                                  = -mean_i log_softmax(logits)[i, target[i]]
//   nll_loss(logp [N, C], target [N] int) {reduction, ignore_index} = -mean_i logp[i, target[i]]
// as F.cross_entropy / F.nll_loss (ONNX SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss
// without weights, scores flattened to [N, C]): reduction "mean" (default) averages over the rows
// whose target is not ignore_index (NaN when every row is ignored, as torch), "sum" adds them,
// "none" returns the [N] row losses (0 at ignored rows). ignore_index defaults to none (the
// smallest int64); an ignored row's target may be out of range. Only the default attributes take
// the loss-parallel and row-weighted forms below; the others run with the classes replicated.
//
// Loss parallel (logits sharded on the class dim, PyTorch's loss_parallel): the partitioner
// expands cross_entropy into per-rank pieces joined by three all_reduces of [N] values, never
// gathering the logits, using -log_softmax(x)[t] = log(sum_c exp(x_c - m)) + m - x_t for any m:
//   m  = all_reduce(max)(cross_entropy_max(x_local))                 global row max
//   s  = all_reduce(sum)(cross_entropy_sum_exp(x_local, m))          sum of exp(x - m)
//   xt = all_reduce(sum)(cross_entropy_target_logit(x_local, t) {class_start})  the target logit:
//        this rank's column t - class_start when it holds it, else 0
//   loss = cross_entropy_combine(m, s, xt) = mean(log(s) + m - xt)
// Its backward on the same shards needs only m and s (the partitioner reuses the forward's):
//   dx_local = cross_entropy_backward(g, x_local, t, m, s) {count, class_start}   (ir/ops/grad.cc)
//            = (exp(x_local - m) / s - onehot(t - class_start)) · g / count
#include <algorithm>
#include <cmath>
#include <limits>

#include "dtensor/kernels/ops.h"
#include "dtensor/ir/grad_rule.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {
namespace {

void infer_mse(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::require_same_dtype(node);
  infer_util::require_floating(node, 0);
  if (node.operands[0]->type.shape != node.operands[1]->type.shape)
    DT_THROW(ShapeError) << "mse_loss input " << type_str(node.operands[0]->type) << " and target "
                         << type_str(node.operands[1]->type) << " differ";
  out.push_back({node.operands[0]->type.dtype, {}});
}

void run_mse(const KernelArgs& a) {
  Tensor d = dt::sub(a.in[0], a.in[1]);
  a.out[0] = dt::mean(dt::mul(d, d));
}

constexpr int64_t kNoIgnore = std::numeric_limits<int64_t>::min();

void check_reduction(const Node& node) {
  const std::string& r = node.attr_str("reduction");
  if (r != "mean" && r != "sum" && r != "none")
    DT_THROW(ValueError) << op_name(node.op) << " reduction must be \"mean\", \"sum\" or \"none\", got \"" << r << "\"";
}

void infer_cross_entropy(const Node& node, const Graph&, std::vector<TensorType>& out) {
  check_reduction(node);
  infer_util::require_floating(node, 0);
  infer_util::require_rank(node, 0, 2);
  infer_util::require_rank(node, 1, 1);
  const TensorType& logits = node.operands[0]->type;
  const TensorType& target = node.operands[1]->type;
  if (target.dtype != DType::i64 && target.dtype != DType::i32)
    DT_THROW(DTypeError) << op_name(node.op) << " expects integer targets, got " << type_str(target);
  if (target.shape[0] != logits.shape[0])
    DT_THROW(ShapeError) << op_name(node.op) << " target " << type_str(target) << " does not match logits "
                         << type_str(logits);
  if (node.attr_str("reduction") == "none") out.push_back({logits.dtype, {logits.shape[0]}});
  else out.push_back({logits.dtype, {}});
}

// -logp[i, target[i]] per row, reduced as the node's reduction says; rows whose target is
// ignore_index give 0 and are not counted. `picked(safe)` returns logp[i, safe[i]] as an [N]
// tensor of logp's dtype, for targets with the ignored rows replaced by class 0.
template <typename Picked>
Tensor nll_rows_reduced(const Node& node, const Tensor& target_in, int64_t c, Picked picked) {
  const int64_t n = target_in.size(0), ignore = node.attr_int("ignore_index");
  Tensor target = target_in.to(DType::i64).contiguous();
  std::vector<int64_t> safe(static_cast<size_t>(n), 0);
  std::vector<double> keep(static_cast<size_t>(n), 0.0);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = target.data<int64_t>()[i];
    keep[size_t(i)] = t != ignore;
    kept += t != ignore;
    if (t == ignore) continue;
    if (t < 0 || t >= c)
      DT_THROW(ValueError) << op_name(node.op) << " target " << t << " out of range for " << c << " classes";
    safe[size_t(i)] = t;
  }
  const Tensor logp_t = picked(Tensor::from_vector(safe, {n}));
  Tensor rows = dt::mul(dt::neg(logp_t), Tensor::from_doubles(keep, {n}, logp_t.dtype()));
  const std::string& reduction = node.attr_str("reduction");
  if (reduction == "none") return rows;
  if (reduction == "sum" || ignore == kNoIgnore) return reduction == "sum" ? dt::sum(rows) : dt::mean(rows);
  return dt::div(dt::sum(rows), Tensor::full({}, double(kept), logp_t.dtype()));  // 0/0: NaN, as torch
}

// cross_entropy's log_softmax is read at the targets only (dt::log_softmax_at: the same bits as
// log_softmax, without writing and re-reading the [N, C] result: 7 % of the anchor gpt's forward).
void run_cross_entropy(const KernelArgs& a) {
  a.out[0] = nll_rows_reduced(a.node, a.in[1], a.in[0].size(1),
                              [&](const Tensor& safe) { return dt::log_softmax_at(a.in[0], safe); });
}
// nll_loss picks with a one-hot mask (no gather kernel needed).
void run_nll_loss(const KernelArgs& a) {
  const Tensor& logp = a.in[0];
  const int64_t n = logp.size(0), c = logp.size(1);
  a.out[0] = nll_rows_reduced(a.node, a.in[1], c, [&](const Tensor& safe) {
    const Tensor onehot = dt::eq(Tensor::arange(c).view({1, c}), safe.view({n, 1}));
    return dt::sum(dt::where(onehot, logp, Tensor::zeros({}, logp.dtype())), {1});
  });
}

// [N, C] -> [N] row statistics of the loss-parallel pieces.
void infer_row_stat(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::require_floating(node, 0);
  infer_util::require_rank(node, 0, 2);
  const TensorType& x = node.operands[0]->type;
  for (size_t i = 1; i < node.operands.size(); ++i) {
    const TensorType& v = node.operands[i]->type;
    if (v.rank() != 1 || v.shape[0] != x.shape[0])
      DT_THROW(ShapeError) << op_name(node.op) << " operand " << type_str(v) << " does not match logits " << type_str(x);
  }
  out.push_back({x.dtype, {x.shape[0]}});
}

void infer_combine(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::require_same_dtype(node);
  infer_util::require_floating(node, 0);
  for (const Value* v : node.operands)
    if (v->type.rank() != 1 || v->type.shape != node.operands[0]->type.shape)
      DT_THROW(ShapeError) << "cross_entropy_combine expects three [N] operands, got " << type_str(v->type);
  out.push_back({node.operands[0]->type.dtype, {}});
}

// The loss-parallel pieces: dt::cross_entropy_max and the others (kernels/ops_nn.cc).
void run_ce_max(const KernelArgs& a) { a.out[0] = dt::cross_entropy_max(a.in[0]); }
void run_ce_sum_exp(const KernelArgs& a) { a.out[0] = dt::cross_entropy_sum_exp(a.in[0], a.in[1]); }
void run_ce_target_logit(const KernelArgs& a) {
  a.out[0] = dt::cross_entropy_target_logit(a.in[0], a.in[1], a.node.attr_int("class_start"));
}

void run_ce_combine(const KernelArgs& a) {
  const Tensor m = a.in[0].to(DType::f64).contiguous(), s = a.in[1].to(DType::f64).contiguous();
  const Tensor xt = a.in[2].to(DType::f64).contiguous();
  const int64_t n = m.numel();
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += std::log(s.data<double>()[i]) + m.data<double>()[i] - xt.data<double>()[i];
  a.out[0] = Tensor::full({}, n > 0 ? total / double(n) : std::numeric_limits<double>::quiet_NaN(), DType::f64)
                 .to(a.in[0].dtype());
}

// Gradient rules: the losses' backward ops give the gradient of the first operand; mse_loss's
// target gradient is its negation; integer targets take none.
void grad_mse(GradContext& c) {
  Value* d = c.b().record(OpKind::mse_loss_backward, {c.grad(), c.operand(0), c.operand(1)},
                          {{"count", c.operand(0)->type.numel()}})[0];
  c.set(0, d);
  if (c.wants(1)) c.set(1, c.b().record(OpKind::neg, {d})[0]);
}
// d/dx of nll_loss: -onehot(target) scaled per row; of cross_entropy: (softmax(x) - onehot)
// scaled per row. The scale is the incoming gradient ([N] for "none", a scalar otherwise), times
// 0 at ignored rows, over the count of kept rows for "mean".
Value* nll_grad(GradContext& c, Value* softmax_or_null) {
  Builder& b = c.b();
  const Node& n = c.node();
  Value* x = c.operand(0);
  const DType dt = x->type.dtype;
  const int64_t rows = x->type.shape[0], classes = x->type.shape[1], ignore = n.attr_int("ignore_index");
  Value* t = b.view(c.b().cast(c.operand(1), DType::i64), {rows, 1});
  Value* onehot = b.cast(b.record(OpKind::eq, {b.view(b.arange(classes), {1, classes}), t})[0], dt);
  Value* coef = c.grad();
  const std::string& reduction = n.attr_str("reduction");
  if (ignore != kNoIgnore) {
    Value* keep = b.cast(b.record(OpKind::ne, {c.operand(1), c.full({c.operand(1)->type.dtype, {}}, double(ignore))})[0], dt);
    if (reduction == "mean") coef = b.div(coef, b.sum(keep));
    coef = b.mul(coef, keep);
  } else if (reduction == "mean") {
    coef = c.scale(coef, 1.0 / double(rows));
  }
  if (coef->type.rank() == 1) coef = b.view(coef, {rows, 1});
  Value* d = softmax_or_null ? b.sub(softmax_or_null, onehot) : b.record(OpKind::neg, {onehot})[0];
  return b.mul(d, coef);
}
bool default_attrs(const Node& n) { return n.attr_str("reduction") == "mean" && n.attr_int("ignore_index") == kNoIgnore; }
void grad_cross_entropy(GradContext& c) {
  if (!default_attrs(c.node())) {
    c.set(0, nll_grad(c, c.b().softmax(c.operand(0), 1)));
    return;
  }
  c.set(0, c.b().record(OpKind::cross_entropy_backward, {c.grad(), c.operand(0), c.operand(1)},
                        {{"count", c.operand(0)->type.shape[0]}})[0]);
}
void grad_nll_loss(GradContext& c) { c.set(0, nll_grad(c, nullptr)); }

}  // namespace

void register_loss_ops(OpTable& t) {
  t.add({.kind = OpKind::mse_loss, .operands = {{"input"}, {"target"}}, .attrs = {},
         .infer = infer_mse, .kernel = run_mse});
  const std::vector<AttrSpec> nll_attrs = {{"reduction", AttrKind::str, Attr(std::string("mean"))},
                                           {"ignore_index", AttrKind::i64, Attr(kNoIgnore)}};
  t.add({.kind = OpKind::cross_entropy, .operands = {{"logits"}, {"target"}}, .attrs = nll_attrs,
         .infer = infer_cross_entropy, .kernel = run_cross_entropy});
  t.add({.kind = OpKind::nll_loss, .operands = {{"logp"}, {"target"}}, .attrs = nll_attrs,
         .infer = infer_cross_entropy, .kernel = run_nll_loss, .grad = grad_nll_loss});
  t.add({.kind = OpKind::cross_entropy_max, .operands = {{"logits"}}, .attrs = {}, .infer = infer_row_stat,
         .kernel = run_ce_max});
  t.add({.kind = OpKind::cross_entropy_sum_exp, .operands = {{"logits"}, {"max"}}, .attrs = {},
         .infer = infer_row_stat, .kernel = run_ce_sum_exp});
  t.add({.kind = OpKind::cross_entropy_target_logit, .operands = {{"logits"}, {"target"}},
         .attrs = {{"class_start", AttrKind::i64, Attr(int64_t(0))}}, .infer = infer_row_stat,
         .kernel = run_ce_target_logit});
  t.add({.kind = OpKind::cross_entropy_combine, .operands = {{"max"}, {"sum_exp"}, {"target_logit"}}, .attrs = {},
         .infer = infer_combine, .kernel = run_ce_combine});
  t.at(OpKind::mse_loss).grad = grad_mse;
  t.at(OpKind::cross_entropy).grad = grad_cross_entropy;
  t.set_sharding_rules(loss_sharding_rules());
}

}  // namespace dt::ir
