// Elementwise ops: add, sub, mul, div (numpy broadcasting, equal dtypes), neg, relu, gelu, silu,
// cast, with their gradient rules (a broadcast operand's gradient is summed back to its shape).
#include "dtensor/core/ops.h"
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

}  // namespace

void register_elementwise_ops(OpTable& t) {
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
  t.add({.kind = OpKind::cast,
         .operands = {{"x"}},
         .attrs = {{"dtype", AttrKind::dtype, std::nullopt}},
         .infer = infer_cast,
         .kernel = run_cast,
         .grad = grad_cast});
  // Kernel outputs: a buffer of their own (cast may return its input when the dtype matches).
  for (OpKind k : {OpKind::add, OpKind::sub, OpKind::mul, OpKind::div, OpKind::neg, OpKind::relu, OpKind::gelu, OpKind::silu})
    t.at(k).fresh_result = true;
}

}  // namespace dt::ir
