// layer_norm, rms_norm (over trailing `normalized_shape` dims), softmax and log_softmax (over `dim`).
#include "dtensor/kernels/ops.h"
#include "dtensor/ir/grad_rule.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {
namespace {

// Checks that normalized_shape is a suffix of x's shape and that weight/bias have that shape.
void infer_norm(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::require_same_dtype(node);
  infer_util::require_floating(node, 0);
  const TensorType& x = node.operands[0]->type;
  const auto& ns = node.attr_ints("normalized_shape");
  if (ns.size() > x.shape.size() || !std::equal(ns.begin(), ns.end(), x.shape.end() - ptrdiff_t(ns.size())))
    DT_THROW(ShapeError) << op_name(node.op) << " normalized_shape " << shape_str(ns)
                         << " is not a suffix of x " << type_str(x);
  for (size_t i = 1; i < node.operands.size(); ++i)
    if (node.operands[i]->type.shape != ns)
      DT_THROW(ShapeError) << op_name(node.op) << " " << op_def(node.op).operands[i].name << " "
                           << type_str(node.operands[i]->type) << " does not match normalized_shape "
                           << shape_str(ns);
  out.push_back(x);
}

Tensor operand_or_undefined(const KernelArgs& a, size_t i) { return i < a.in.size() ? a.in[i] : Tensor(); }

void run_layer_norm(const KernelArgs& a) {
  a.out[0] = dt::layer_norm(a.in[0], a.node.attr_ints("normalized_shape"), operand_or_undefined(a, 1),
                            operand_or_undefined(a, 2), a.node.attr_float("eps"));
}

void run_rms_norm(const KernelArgs& a) {
  a.out[0] = dt::rms_norm(a.in[0], a.node.attr_ints("normalized_shape"), operand_or_undefined(a, 1),
                          a.node.attr_float("eps"));
}

void infer_softmax(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::require_floating(node, 0);
  normalize_dim(node.attr_int("dim"), node.operands[0]->type.rank());
  out.push_back(node.operands[0]->type);
}

void run_softmax(const KernelArgs& a) { a.out[0] = dt::softmax(a.in[0], a.node.attr_int("dim")); }
void run_log_softmax(const KernelArgs& a) { a.out[0] = dt::log_softmax(a.in[0], a.node.attr_int("dim")); }

// Gradient rules. dx comes from the backward op; the affine parameters' gradients are ordinary
// ops, dweight = Σ_rows grad · norm(x) (the norm recomputed without weight) and dbias = Σ_rows grad,
// so their sums over the batch are reductions the sharding rules already know (a batch-sharded x
// gives partial sums: fsdp's reduce_scatter, data parallel's all_reduce).
void grad_norm(GradContext& c, OpKind backward) {
  const Node& n = c.node();
  Builder& b = c.b();
  const auto& ns = n.attr_ints("normalized_shape");
  const double eps = n.attr_float("eps");
  std::vector<Value*> operands = {c.grad(), c.operand(0)};
  if (c.num_operands() > 1) operands.push_back(c.operand(1));
  c.set(0, b.record(backward, operands, {{"normalized_shape", ns}, {"eps", eps}})[0]);
  const int64_t batch_dims = c.operand(0)->type.rank() - int64_t(ns.size());
  std::vector<int64_t> rows;
  for (int64_t d = 0; d < batch_dims; ++d) rows.push_back(d);
  auto over_rows = [&](Value* v) { return rows.empty() ? v : b.sum(v, rows); };
  if (c.wants(1)) {
    Value* xhat = n.op == OpKind::layer_norm ? b.layer_norm(c.operand(0), Shape(ns.begin(), ns.end()), nullptr, nullptr, eps)
                                             : b.rms_norm(c.operand(0), Shape(ns.begin(), ns.end()), nullptr, eps);
    c.set(1, over_rows(b.mul(c.grad(), xhat)));
  }
  if (c.num_operands() > 2 && c.wants(2)) c.set(2, over_rows(c.grad()));
}
void grad_layer_norm(GradContext& c) { grad_norm(c, OpKind::layer_norm_backward); }
void grad_rms_norm(GradContext& c) { grad_norm(c, OpKind::rms_norm_backward); }
void grad_softmax(GradContext& c) {
  c.set(0, c.b().record(OpKind::softmax_backward, {c.grad(), c.result()}, {{"dim", c.node().attr_int("dim")}})[0]);
}

// log_softmax: dx = g - exp(y) · Σ_dim g.
void grad_log_softmax(GradContext& c) {
  Builder& b = c.b();
  Value* total = b.sum(c.grad(), {c.node().attr_int("dim")}, /*keepdim=*/true);
  c.set(0, b.sub(c.grad(), b.mul(b.record(OpKind::exp, {c.result()})[0], total)));
}

}  // namespace

void register_norm_ops(OpTable& t) {
  t.add({.kind = OpKind::layer_norm,
         .operands = {{"x"}, {"weight", true}, {"bias", true}},
         .attrs = {{"normalized_shape", AttrKind::ints, std::nullopt}, {"eps", AttrKind::f64, Attr(1e-5)}},
         .infer = infer_norm,
         .kernel = run_layer_norm});
  t.add({.kind = OpKind::rms_norm,
         .operands = {{"x"}, {"weight", true}},
         .attrs = {{"normalized_shape", AttrKind::ints, std::nullopt}, {"eps", AttrKind::f64, Attr(1e-6)}},
         .infer = infer_norm,
         .kernel = run_rms_norm});
  t.add({.kind = OpKind::softmax,
         .operands = {{"x"}},
         .attrs = {{"dim", AttrKind::i64, std::nullopt}},
         .infer = infer_softmax,
         .kernel = run_softmax});
  t.add({.kind = OpKind::log_softmax,
         .operands = {{"x"}},
         .attrs = {{"dim", AttrKind::i64, std::nullopt}},
         .infer = infer_softmax,
         .kernel = run_log_softmax,
         .grad = grad_log_softmax});
  for (OpKind k : {OpKind::layer_norm, OpKind::rms_norm, OpKind::softmax, OpKind::log_softmax}) t.at(k).fresh_result = true;
  t.at(OpKind::layer_norm).grad = grad_layer_norm;
  t.at(OpKind::rms_norm).grad = grad_rms_norm;
  t.at(OpKind::softmax).grad = grad_softmax;
  t.set_sharding_rules(norm_sharding_rules());
}

}  // namespace dt::ir
