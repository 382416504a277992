// Elementwise ops: add, sub, mul, div (numpy broadcasting, equal dtypes), neg, relu, gelu, silu,
// cast; the math functions exp, log, sqrt, rsqrt, tanh, sigmoid, erf, sin, cos, abs, pow (a scalar
// exponent), clamp; maximum, minimum; the comparisons eq, ne, lt, le, gt, ge (bool results);
// where(cond, a, b) and masked_fill(x, mask) {value}; leaky_relu {negative_slope} and softplus
// {beta, threshold} (torch's defaults and semantics; ONNX LeakyRelu / Softplus map onto them);
// logical_and, logical_or, logical_xor on
// bool. Each with its gradient rule (a broadcast operand's gradient is summed back to its shape);
// comparisons and the logical ops have none (bool results).
#include <cmath>

#include "dtensor/kernels/ops.h"
#include "dtensor/ir/grad_rule.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {
namespace {

void infer_binary(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::require_same_dtype(node);
  out.push_back({node.operands[0]->type.dtype,
                 broadcast_shapes(node.operands[0]->type.shape, node.operands[1]->type.shape)});
}

void run_add(const KernelArgs& a) { a.out[0] = dt::add(a.in[0], a.in[1]); }
void run_sub(const KernelArgs& a) { a.out[0] = dt::sub(a.in[0], a.in[1]); }
void run_mul(const KernelArgs& a) { a.out[0] = dt::mul(a.in[0], a.in[1]); }
void run_div(const KernelArgs& a) { a.out[0] = dt::div(a.in[0], a.in[1]); }

void infer_float_unary(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::require_floating(node, 0);
  out.push_back(node.operands[0]->type);
}

void infer_gelu(const Node& node, const Graph& g, std::vector<TensorType>& out) {
  const std::string& approx = node.attr_str("approximate");
  if (approx != "none" && approx != "tanh")
    DT_THROW(ValueError) << "gelu approximate must be \"none\" or \"tanh\", got \"" << approx << "\"";
  infer_float_unary(node, g, out);
}

void run_relu(const KernelArgs& a) { a.out[0] = dt::relu(a.in[0]); }
void run_gelu(const KernelArgs& a) { a.out[0] = dt::gelu(a.in[0], a.node.attr_str("approximate")); }
void run_silu(const KernelArgs& a) { a.out[0] = dt::silu(a.in[0]); }

void infer_cast(const Node& node, const Graph&, std::vector<TensorType>& out) {
  out.push_back({node.attr_dtype("dtype"), node.operands[0]->type.shape});
}
void run_cast(const KernelArgs& a) { a.out[0] = dt::cast(a.in[0], a.node.attr_dtype("dtype")); }

void run_neg(const KernelArgs& a) { a.out[0] = dt::neg(a.in[0]); }

// ---- the math functions: one kernel per op, each the dt:: function of the same name ----
void run_exp(const KernelArgs& a) { a.out[0] = dt::exp(a.in[0]); }
void run_log(const KernelArgs& a) { a.out[0] = dt::log(a.in[0]); }
void run_sqrt(const KernelArgs& a) { a.out[0] = dt::sqrt(a.in[0]); }
void run_rsqrt(const KernelArgs& a) { a.out[0] = dt::rsqrt(a.in[0]); }
void run_tanh(const KernelArgs& a) { a.out[0] = dt::tanh(a.in[0]); }
void run_sigmoid(const KernelArgs& a) { a.out[0] = dt::sigmoid(a.in[0]); }
void run_erf(const KernelArgs& a) { a.out[0] = dt::erf(a.in[0]); }
void run_sin(const KernelArgs& a) { a.out[0] = dt::sin(a.in[0]); }
void run_cos(const KernelArgs& a) { a.out[0] = dt::cos(a.in[0]); }
void run_abs(const KernelArgs& a) { a.out[0] = dt::abs(a.in[0]); }
void run_pow(const KernelArgs& a) { a.out[0] = dt::pow(a.in[0], a.node.attr_float("exponent")); }
void run_clamp(const KernelArgs& a) { a.out[0] = dt::clamp(a.in[0], a.node.attr_float("min"), a.node.attr_float("max")); }
void run_maximum(const KernelArgs& a) { a.out[0] = dt::maximum(a.in[0], a.in[1]); }
void run_minimum(const KernelArgs& a) { a.out[0] = dt::minimum(a.in[0], a.in[1]); }
void run_eq(const KernelArgs& a) { a.out[0] = dt::eq(a.in[0], a.in[1]); }
void run_ne(const KernelArgs& a) { a.out[0] = dt::ne(a.in[0], a.in[1]); }
void run_lt(const KernelArgs& a) { a.out[0] = dt::lt(a.in[0], a.in[1]); }
void run_le(const KernelArgs& a) { a.out[0] = dt::le(a.in[0], a.in[1]); }
void run_gt(const KernelArgs& a) { a.out[0] = dt::gt(a.in[0], a.in[1]); }
void run_ge(const KernelArgs& a) { a.out[0] = dt::ge(a.in[0], a.in[1]); }
void run_logical_and(const KernelArgs& a) { a.out[0] = dt::logical_and(a.in[0], a.in[1]); }
void run_logical_or(const KernelArgs& a) { a.out[0] = dt::logical_or(a.in[0], a.in[1]); }
void run_logical_xor(const KernelArgs& a) { a.out[0] = dt::logical_xor(a.in[0], a.in[1]); }
void run_where(const KernelArgs& a) { a.out[0] = dt::where(a.in[0], a.in[1], a.in[2]); }
void run_masked_fill(const KernelArgs& a) {
  const Tensor fill = Tensor::full({}, a.node.attr_float("value"), a.in[0].dtype());
  a.out[0] = dt::where(a.in[1], fill, a.in[0]).expand(a.node.result()->type.shape).contiguous();
}

// abs, clamp, maximum and minimum also take integers (index arithmetic of exported shape code).
void infer_numeric_unary(const Node& node, const Graph&, std::vector<TensorType>& out) {
  if (node.operands[0]->type.dtype == DType::boolean)
    DT_THROW(DTypeError) << op_name(node.op) << " expects a numeric operand, got " << type_str(node.operands[0]->type);
  out.push_back(node.operands[0]->type);
}

void infer_clamp(const Node& node, const Graph& g, std::vector<TensorType>& out) {
  const double lo = node.attr_float("min"), hi = node.attr_float("max");
  if (lo > hi) DT_THROW(ValueError) << "clamp min " << lo << " is above max " << hi;
  infer_numeric_unary(node, g, out);
}

void infer_compare(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::require_same_dtype(node);
  out.push_back({DType::boolean, broadcast_shapes(node.operands[0]->type.shape, node.operands[1]->type.shape)});
}

void require_bool(const Node& node, int i) {
  if (node.operands[size_t(i)]->type.dtype != DType::boolean)
    DT_THROW(DTypeError) << op_name(node.op) << " expects a bool " << op_def(node.op).operands[size_t(i)].name
                         << ", got " << type_str(node.operands[size_t(i)]->type);
}

void infer_logical(const Node& node, const Graph&, std::vector<TensorType>& out) {
  require_bool(node, 0);
  require_bool(node, 1);
  out.push_back({DType::boolean, broadcast_shapes(node.operands[0]->type.shape, node.operands[1]->type.shape)});
}

// where(cond bool, a, b): the three broadcast; a and b have one dtype.
void infer_where(const Node& node, const Graph&, std::vector<TensorType>& out) {
  require_bool(node, 0);
  const TensorType& a = node.operands[1]->type;
  const TensorType& b = node.operands[2]->type;
  if (a.dtype != b.dtype)
    DT_THROW(DTypeError) << "where expects a and b of one dtype, got " << type_str(a) << " and " << type_str(b);
  out.push_back({a.dtype, broadcast_shapes(broadcast_shapes(node.operands[0]->type.shape, a.shape), b.shape)});
}

// masked_fill(x, mask bool) {value}: as torch, the mask broadcasts to x and the result has x's shape.
void infer_masked_fill(const Node& node, const Graph&, std::vector<TensorType>& out) {
  require_bool(node, 1);
  const TensorType& x = node.operands[0]->type;
  const Shape s = broadcast_shapes(x.shape, node.operands[1]->type.shape);
  if (s != x.shape)
    DT_THROW(ShapeError) << "masked_fill mask " << type_str(node.operands[1]->type) << " does not broadcast to x "
                         << type_str(x);
  out.push_back(x);
}

OpDef binary(OpKind kind, KernelFn kernel, GradFn grad) {
  return {.kind = kind, .operands = {{"a"}, {"b"}}, .attrs = {}, .infer = infer_binary, .kernel = kernel,
          .grad = grad};
}

// Gradient rules. a and b may broadcast: sum_to() reduces each operand's gradient to its shape.
void grad_add(GradContext& c) {
  c.set(0, c.sum_to(c.grad(), c.operand(0)->type.shape));
  c.set(1, c.sum_to(c.grad(), c.operand(1)->type.shape));
}
void grad_sub(GradContext& c) {
  c.set(0, c.sum_to(c.grad(), c.operand(0)->type.shape));
  if (c.wants(1)) c.set(1, c.sum_to(c.b().record(OpKind::neg, {c.grad()})[0], c.operand(1)->type.shape));
}
void grad_mul(GradContext& c) {
  if (c.wants(0)) c.set(0, c.sum_to(c.b().mul(c.grad(), c.operand(1)), c.operand(0)->type.shape));
  if (c.wants(1)) c.set(1, c.sum_to(c.b().mul(c.grad(), c.operand(0)), c.operand(1)->type.shape));
}
// d(a/b) = g/b da - g·a/b² db
void grad_div(GradContext& c) {
  Value* g_over_b = c.b().div(c.grad(), c.operand(1));
  c.set(0, c.sum_to(g_over_b, c.operand(0)->type.shape));
  if (c.wants(1)) {
    Value* t = c.b().mul(g_over_b, c.result());  // g·a/b² = (g/b)·(a/b)
    c.set(1, c.sum_to(c.b().record(OpKind::neg, {t})[0], c.operand(1)->type.shape));
  }
}
void grad_neg(GradContext& c) { c.set(0, c.b().record(OpKind::neg, {c.grad()})[0]); }
void grad_relu(GradContext& c) { c.set(0, c.b().record(OpKind::relu_backward, {c.grad(), c.operand(0)})[0]); }
void grad_gelu(GradContext& c) {
  c.set(0, c.b().record(OpKind::gelu_backward, {c.grad(), c.operand(0)},
                        {{"approximate", c.node().attr_str("approximate")}})[0]);
}
void grad_silu(GradContext& c) { c.set(0, c.b().record(OpKind::silu_backward, {c.grad(), c.operand(0)})[0]); }
void grad_cast(GradContext& c) { c.set(0, c.b().cast(c.grad(), c.operand(0)->type.dtype)); }

Value* unary_op(Builder& b, OpKind op, Value* x) { return b.record(op, {x})[0]; }
Value* neg(Builder& b, Value* x) { return unary_op(b, OpKind::neg, x); }
// Returns `mask` (bool) as 0/1 of x's dtype.
Value* as_mask(GradContext& c, Value* mask, DType dtype) { return c.b().cast(mask, dtype); }
Value* compare(Builder& b, OpKind op, Value* x, Value* y) { return b.record(op, {x, y})[0]; }

// Derivatives written with the result r where it is cheaper: exp' = r, sqrt' = 1/(2r),
// rsqrt' = -r³/2, tanh' = 1 - r², sigmoid' = r - r².
void grad_exp(GradContext& c) { c.set(0, c.b().mul(c.grad(), c.result())); }
void grad_log(GradContext& c) { c.set(0, c.b().div(c.grad(), c.operand(0))); }
void grad_sqrt(GradContext& c) { c.set(0, c.scale(c.b().div(c.grad(), c.result()), 0.5)); }
void grad_rsqrt(GradContext& c) {
  Builder& b = c.b();
  Value* r3 = b.mul(c.result(), b.mul(c.result(), c.result()));
  c.set(0, c.scale(b.mul(c.grad(), r3), -0.5));
}
void grad_tanh(GradContext& c) {
  Builder& b = c.b();
  c.set(0, b.sub(c.grad(), b.mul(c.grad(), b.mul(c.result(), c.result()))));
}
void grad_sigmoid(GradContext& c) {
  Builder& b = c.b();
  c.set(0, b.mul(c.grad(), b.sub(c.result(), b.mul(c.result(), c.result()))));
}
// erf'(x) = 2/√π · exp(-x²)
void grad_erf(GradContext& c) {
  Builder& b = c.b();
  Value* x = c.operand(0);
  c.set(0, c.scale(b.mul(c.grad(), unary_op(b, OpKind::exp, neg(b, b.mul(x, x)))), M_2_SQRTPI));
}
void grad_sin(GradContext& c) { c.set(0, c.b().mul(c.grad(), unary_op(c.b(), OpKind::cos, c.operand(0)))); }
void grad_cos(GradContext& c) { c.set(0, neg(c.b(), c.b().mul(c.grad(), unary_op(c.b(), OpKind::sin, c.operand(0))))); }
// abs'(x) = sign(x) (0 at 0, as torch).
void grad_abs(GradContext& c) {
  Builder& b = c.b();
  Value* x = c.operand(0);
  Value* zero = c.full({x->type.dtype, {}}, 0.0);
  Value* sign = b.sub(as_mask(c, compare(b, OpKind::gt, x, zero), x->type.dtype),
                      as_mask(c, compare(b, OpKind::lt, x, zero), x->type.dtype));
  c.set(0, b.mul(c.grad(), sign));
}
// d xᵉ = e·xᵉ⁻¹
void grad_pow(GradContext& c) {
  const double e = c.node().attr_float("exponent");
  Value* d = e == 1.0 ? c.grad()
                      : c.b().mul(c.grad(), c.b().record(OpKind::pow, {c.operand(0)}, {{"exponent", e - 1.0}})[0]);
  c.set(0, c.scale(d, e));
}
// The gradient passes where min <= x <= max (torch's convention at the bounds).
void grad_clamp(GradContext& c) {
  Builder& b = c.b();
  Value* x = c.operand(0);
  const DType t = x->type.dtype;
  Value* in_lo = as_mask(c, compare(b, OpKind::ge, x, c.full({t, {}}, c.node().attr_float("min"))), t);
  Value* in_hi = as_mask(c, compare(b, OpKind::le, x, c.full({t, {}}, c.node().attr_float("max"))), t);
  c.set(0, b.mul(c.grad(), b.mul(in_lo, in_hi)));
}
// maximum: a gets the gradient where a >= b, b where a < b (minimum: a where a <= b).
void grad_extremum(GradContext& c, OpKind a_wins) {
  Builder& b = c.b();
  Value* x = c.operand(0);
  Value* y = c.operand(1);
  const DType t = c.result()->type.dtype;
  Value* ga = b.mul(c.grad(), as_mask(c, compare(b, a_wins, x, y), t));
  c.set(0, c.sum_to(ga, x->type.shape));
  if (c.wants(1)) c.set(1, c.sum_to(b.sub(c.grad(), ga), y->type.shape));
}
void grad_maximum(GradContext& c) { grad_extremum(c, OpKind::ge); }
void grad_minimum(GradContext& c) { grad_extremum(c, OpKind::le); }
// where: the gradient goes to the branch each element came from.
void grad_where(GradContext& c) {
  Builder& b = c.b();
  Value* cond = c.operand(0);
  if (c.wants(1))
    c.set(1, c.sum_to(b.record(OpKind::masked_fill, {c.grad(), b.record(OpKind::eq, {cond, c.full({DType::boolean, {}}, 0.0)})[0]},
                               {{"value", 0.0}})[0],
                      c.operand(1)->type.shape));
  if (c.wants(2))
    c.set(2, c.sum_to(b.record(OpKind::masked_fill, {c.grad(), cond}, {{"value", 0.0}})[0], c.operand(2)->type.shape));
}
// masked_fill: filled elements do not depend on x.
void grad_masked_fill(GradContext& c) {
  c.set(0, c.b().record(OpKind::masked_fill, {c.grad(), c.operand(1)}, {{"value", 0.0}})[0]);
}

void run_leaky_relu(const KernelArgs& a) { a.out[0] = dt::leaky_relu(a.in[0], a.node.attr_float("negative_slope")); }
void run_softplus(const KernelArgs& a) {
  a.out[0] = dt::softplus(a.in[0], a.node.attr_float("beta"), a.node.attr_float("threshold"));
}
// leaky_relu' = 1 where x > 0, else the slope (torch's convention at 0).
void grad_leaky_relu(GradContext& c) {
  Builder& b = c.b();
  Value* x = c.operand(0);
  Value* pos = compare(b, OpKind::gt, x, c.full({x->type.dtype, {}}, 0.0));
  c.set(0, b.record(OpKind::where, {pos, c.grad(), c.scale(c.grad(), c.node().attr_float("negative_slope"))})[0]);
}
// softplus' = sigmoid(beta x), 1 in the linear region beta x > threshold.
void grad_softplus(GradContext& c) {
  Builder& b = c.b();
  Value* bx = c.scale(c.operand(0), c.node().attr_float("beta"));
  Value* linear = compare(b, OpKind::gt, bx, c.full({bx->type.dtype, {}}, c.node().attr_float("threshold")));
  Value* d = b.mul(c.grad(), unary_op(b, OpKind::sigmoid, bx));
  c.set(0, b.record(OpKind::where, {linear, c.grad(), d})[0]);
}

}  // namespace

void register_elementwise_ops(OpTable& t) {
  t.add({.kind = OpKind::leaky_relu, .operands = {{"x"}}, .attrs = {{"negative_slope", AttrKind::f64, Attr(0.01)}},
         .infer = infer_float_unary, .kernel = run_leaky_relu, .grad = grad_leaky_relu});
  t.add({.kind = OpKind::softplus, .operands = {{"x"}},
         .attrs = {{"beta", AttrKind::f64, Attr(1.0)}, {"threshold", AttrKind::f64, Attr(20.0)}},
         .infer = infer_float_unary, .kernel = run_softplus, .grad = grad_softplus});
  t.add(binary(OpKind::add, run_add, grad_add));
  t.add(binary(OpKind::sub, run_sub, grad_sub));
  t.add(binary(OpKind::mul, run_mul, grad_mul));
  t.add(binary(OpKind::div, run_div, grad_div));
  t.add({.kind = OpKind::neg, .operands = {{"x"}}, .attrs = {}, .infer = infer_float_unary, .kernel = run_neg,
         .grad = grad_neg});
  // relu keeps integer dtypes working too (it is max(x, 0)).
  t.add({.kind = OpKind::relu,
         .operands = {{"x"}},
         .attrs = {},
         .infer = [](const Node& n, const Graph&, std::vector<TensorType>& out) { out.push_back(n.operands[0]->type); },
         .kernel = run_relu,
         .grad = grad_relu});
  t.add({.kind = OpKind::gelu,
         .operands = {{"x"}},
         .attrs = {{"approximate", AttrKind::str, Attr(std::string("none"))}},
         .infer = infer_gelu,
         .kernel = run_gelu,
         .grad = grad_gelu});
  t.add({.kind = OpKind::silu, .operands = {{"x"}}, .attrs = {}, .infer = infer_float_unary, .kernel = run_silu,
         .grad = grad_silu});
  // What a linear's fused epilogue can apply in place of these nodes (runtime/interpreter_fusion.cc).
  t.at(OpKind::relu).fusable_activation = [](const Node&) { return Activation::relu; };
  t.at(OpKind::silu).fusable_activation = [](const Node&) { return Activation::silu; };
  t.at(OpKind::gelu).fusable_activation = [](const Node& n) {
    const std::string& a = n.attr_str("approximate");
    return a == "none" ? Activation::gelu : a == "tanh" ? Activation::gelu_tanh : Activation::none;
  };
  t.add({.kind = OpKind::cast,
         .operands = {{"x"}},
         .attrs = {{"dtype", AttrKind::dtype, std::nullopt}},
         .infer = infer_cast,
         .kernel = run_cast,
         .grad = grad_cast});
  struct Math {
    OpKind kind;
    KernelFn kernel;
    GradFn grad;
  };
  for (const Math& m : {Math{OpKind::exp, run_exp, grad_exp}, Math{OpKind::log, run_log, grad_log},
                        Math{OpKind::sqrt, run_sqrt, grad_sqrt}, Math{OpKind::rsqrt, run_rsqrt, grad_rsqrt},
                        Math{OpKind::tanh, run_tanh, grad_tanh}, Math{OpKind::sigmoid, run_sigmoid, grad_sigmoid},
                        Math{OpKind::erf, run_erf, grad_erf}, Math{OpKind::sin, run_sin, grad_sin},
                        Math{OpKind::cos, run_cos, grad_cos}})
    t.add({.kind = m.kind, .operands = {{"x"}}, .attrs = {}, .infer = infer_float_unary, .kernel = m.kernel, .grad = m.grad});
  t.add({.kind = OpKind::abs, .operands = {{"x"}}, .attrs = {}, .infer = infer_numeric_unary, .kernel = run_abs,
         .grad = grad_abs});
  t.add({.kind = OpKind::pow, .operands = {{"x"}}, .attrs = {{"exponent", AttrKind::f64, std::nullopt}},
         .infer = infer_float_unary, .kernel = run_pow, .grad = grad_pow});
  t.add({.kind = OpKind::clamp, .operands = {{"x"}},
         .attrs = {{"min", AttrKind::f64, Attr(-HUGE_VAL)}, {"max", AttrKind::f64, Attr(HUGE_VAL)}},
         .infer = infer_clamp, .kernel = run_clamp, .grad = grad_clamp});
  t.add(binary(OpKind::maximum, run_maximum, grad_maximum));
  t.add(binary(OpKind::minimum, run_minimum, grad_minimum));
  for (auto [k, kernel] : {std::pair<OpKind, KernelFn>{OpKind::eq, run_eq}, {OpKind::ne, run_ne}, {OpKind::lt, run_lt},
                           {OpKind::le, run_le}, {OpKind::gt, run_gt}, {OpKind::ge, run_ge}})
    t.add({.kind = k, .operands = {{"a"}, {"b"}}, .attrs = {}, .infer = infer_compare, .kernel = kernel});
  for (auto [k, kernel] : {std::pair<OpKind, KernelFn>{OpKind::logical_and, run_logical_and},
                           {OpKind::logical_or, run_logical_or}, {OpKind::logical_xor, run_logical_xor}})
    t.add({.kind = k, .operands = {{"a"}, {"b"}}, .attrs = {}, .infer = infer_logical, .kernel = kernel});
  t.add({.kind = OpKind::where, .operands = {{"cond"}, {"a"}, {"b"}}, .attrs = {}, .infer = infer_where,
         .kernel = run_where, .grad = grad_where});
  t.add({.kind = OpKind::masked_fill, .operands = {{"x"}, {"mask"}}, .attrs = {{"value", AttrKind::f64, std::nullopt}},
         .infer = infer_masked_fill, .kernel = run_masked_fill, .grad = grad_masked_fill});
  // Kernel outputs: a buffer of their own (cast may return its input when the dtype matches).
  for (OpKind k : {OpKind::add, OpKind::sub, OpKind::mul, OpKind::div, OpKind::neg, OpKind::relu, OpKind::gelu, OpKind::silu,
                   OpKind::exp, OpKind::log, OpKind::sqrt, OpKind::rsqrt, OpKind::tanh, OpKind::sigmoid, OpKind::erf,
                   OpKind::sin, OpKind::cos, OpKind::abs, OpKind::pow, OpKind::clamp, OpKind::maximum, OpKind::minimum,
                   OpKind::eq, OpKind::ne, OpKind::lt, OpKind::le, OpKind::gt, OpKind::ge, OpKind::where,
                   OpKind::masked_fill, OpKind::logical_and, OpKind::logical_or, OpKind::logical_xor,
                   OpKind::leaky_relu, OpKind::softplus})
    t.at(k).fresh_result = true;
  t.set_sharding_rules(elementwise_sharding_rules());
}

}  // namespace dt::ir
