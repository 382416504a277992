// conv and its gradient ops: schema, inference, kernels, FLOPs and the gradient rule.
//   conv(x [N, C, *in], weight [O, C/groups, *kernel], bias? [O]) {stride, padding, dilation,
//       groups = 1} -> [N, O, *out]: 1 or 2 spatial dims (torch conv1d / conv2d, ONNX Conv);
//       `padding` holds the begin pads then the end pads of the spatial dims (ONNX's pads).
//   conv_backward_input(grad, weight) {stride, padding, dilation, groups, shape} -> dx of `shape`
//   conv_backward_weight(grad, x) {stride, padding, dilation, groups, shape} -> dweight of `shape`
// The gradient ops carry the shape they produce: the forward's output size rounds down with a
// stride, so it does not determine the input's. The sharding rules are in sharding_conv.cc.
#include "dtensor/ir/grad_rule.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/kernels/ops.h"

namespace dt::ir {
namespace {

ConvParams params_of(const Node& n) {
  return {n.attr_ints("stride"), n.attr_ints("padding"), n.attr_ints("dilation"), n.attr_int("groups")};
}

Shape shape_attr(const Node& n) {
  const std::vector<int64_t>& s = n.attr_ints("shape");
  return Shape(s.begin(), s.end());
}

void require_floating(const Node& n) {
  infer_util::require_same_dtype(n);
  const TensorType& x = n.operands[0]->type;
  if (!is_floating(x.dtype)) DT_THROW(DTypeError) << op_name(n.op) << " needs floating tensors, got " << type_str(x);
}

void infer_conv(const Node& n, const Graph&, std::vector<TensorType>& out) {
  require_floating(n);
  const TensorType& x = n.operands[0]->type;
  const TensorType& w = n.operands[1]->type;
  Shape y = conv_output_shape(x.shape, w.shape, params_of(n));
  if (n.operands.size() == 3 && n.operands[2]->type.shape != Shape{w.shape[0]})
    DT_THROW(ShapeError) << "conv bias " << type_str(n.operands[2]->type) << " does not match weight " << type_str(w);
  out.push_back({x.dtype, std::move(y)});
}

// The gradient ops: `shape` and the other operand must give the grad's shape back.
void infer_conv_backward(const Node& n, const Graph&, std::vector<TensorType>& out) {
  require_floating(n);
  const Shape s = shape_attr(n);
  const Shape& grad = n.operands[0]->type.shape;
  const Shape& other = n.operands[1]->type.shape;
  const bool input = n.op == OpKind::conv_backward_input;
  const Shape y = input ? conv_output_shape(s, other, params_of(n)) : conv_output_shape(other, s, params_of(n));
  if (y != grad)
    DT_THROW(ShapeError) << op_name(n.op) << " grad " << shape_str(grad) << " is not the conv output " << shape_str(y)
                         << " of " << (input ? "x " : "weight ") << shape_str(s);
  out.push_back({n.operands[0]->type.dtype, s});
}

void run_conv(const KernelArgs& a) {
  a.out[0] = dt::conv(a.in[0], a.in[1], a.in.size() == 3 ? a.in[2] : Tensor(), params_of(a.node));
}
void run_conv_backward_input(const KernelArgs& a) {
  a.out[0] = dt::conv_backward_input(a.in[0], a.in[1], shape_attr(a.node), params_of(a.node));
}
void run_conv_backward_weight(const KernelArgs& a) {
  a.out[0] = dt::conv_backward_weight(a.in[0], a.in[1], shape_attr(a.node), params_of(a.node));
}

// Multiply and add per tap and output element: 2 · N · O · out positions · C/groups · kernel taps.
// The gradient ops do the same products (each transposes one GEMM of the forward).
double conv_flops(const Node& n) {
  const bool fwd = n.op == OpKind::conv;
  const Shape& w = fwd ? n.operands[1]->type.shape : n.op == OpKind::conv_backward_input ? n.operands[1]->type.shape
                                                                                       : n.result()->type.shape;
  const Shape& y = fwd ? n.result()->type.shape : n.operands[0]->type.shape;
  return 2.0 * double(numel(y)) * double(w.empty() ? 0 : numel(w) / w[0]);
}

// y = conv(x, w) + b:  dx = conv_backward_input(g, w),  dw = conv_backward_weight(g, x),
// db = Σ g over every dim but the channels.
void grad_conv(GradContext& c) {
  const Node& n = c.node();
  Builder& b = c.b();
  auto attrs = [&](const Shape& s) {
    return NamedAttrs{{"stride", n.attr_ints("stride")}, {"padding", n.attr_ints("padding")},
                      {"dilation", n.attr_ints("dilation")}, {"groups", n.attr_int("groups")},
                      {"shape", std::vector<int64_t>(s.begin(), s.end())}};
  };
  Value* g = c.grad();
  if (c.wants(0))
    c.set(0, b.record(OpKind::conv_backward_input, {g, c.operand(1)}, attrs(c.operand(0)->type.shape))[0]);
  if (c.wants(1))
    c.set(1, b.record(OpKind::conv_backward_weight, {g, c.operand(0)}, attrs(c.operand(1)->type.shape))[0]);
  if (c.num_operands() == 3 && c.wants(2)) {
    std::vector<int64_t> dims = {0};  // all but the channels (dim 1)
    for (int64_t d = 2; d < g->type.rank(); ++d) dims.push_back(d);
    c.set(2, b.sum(g, dims));
  }
}

}  // namespace

void register_conv_ops(OpTable& t) {
  const std::vector<AttrSpec> geometry = {{"stride", AttrKind::ints, std::nullopt},
                                          {"padding", AttrKind::ints, std::nullopt},
                                          {"dilation", AttrKind::ints, std::nullopt},
                                          {"groups", AttrKind::i64, Attr(int64_t(1))}};
  std::vector<AttrSpec> with_shape = geometry;
  with_shape.push_back({"shape", AttrKind::ints, std::nullopt});
  t.add({.kind = OpKind::conv,
         .operands = {{"x"}, {"weight"}, {"bias", /*optional=*/true}},
         .attrs = geometry,
         .infer = infer_conv,
         .kernel = run_conv,
         .grad = grad_conv});
  t.add({.kind = OpKind::conv_backward_input, .operands = {{"grad"}, {"weight"}}, .attrs = with_shape,
         .infer = infer_conv_backward, .kernel = run_conv_backward_input,
         .localize_attrs = localize_util::shape_attr});
  t.add({.kind = OpKind::conv_backward_weight, .operands = {{"grad"}, {"x"}}, .attrs = with_shape,
         .infer = infer_conv_backward, .kernel = run_conv_backward_weight,
         .localize_attrs = localize_util::shape_attr});
  for (OpKind k : {OpKind::conv, OpKind::conv_backward_input, OpKind::conv_backward_weight}) {
    t.at(k).fresh_result = true;
    t.at(k).flops = conv_flops;
  }
  t.at(OpKind::conv).weight_rank = -1;  // colwise shards the output channels, rowwise the input ones
  t.set_sharding_rules(conv_sharding_rules());
}

}  // namespace dt::ir
