// Backward ops: the gradients autodiff records for ops whose gradient is not a few forward ops
// (kernels in kernels/ops_grad.h). They appear only in graphs autodiff builds; no gradient flows
// through them (no second derivatives).
//
//   relu_backward(grad, x), silu_backward(grad, x), gelu_backward(grad, x) {approximate} -> dx
//   layer_norm_backward(grad, x, weight?) {normalized_shape, eps} -> dx
//   rms_norm_backward(grad, x, weight?) {normalized_shape, eps}   -> dx
//       (the affine parameters' gradients are ordinary ops: ops_norm.cc)
//   softmax_backward(grad, y) {dim}            -> dx, from softmax's result y
//   scaled_dot_product_attention_backward(grad, q, k, v, mask?) {causal, scale} -> (dq, dk, dv[, dscores])
//       (dscores, of the scores' shape [..., Hq, S, Sk], only for a float mask: its gradient
//       before the sum to the mask's shape)
//   embedding_backward(grad, indices) {num_weights} -> dweight [num_weights, H]
//   mse_loss_backward(grad, input, target) {count}, cross_entropy_backward(grad, logits, target) {count}
//       -> dinput; `count` is the number of elements (mse) or rows (cross_entropy) of the whole
//       forward operand that the mean divides by, so that a sharded operand scales by the global
//       count (0: the operand's own)
//   cross_entropy_backward(grad, logits, target, max, sum_exp) {count, class_start} -> this rank's
//       class shard of dlogits from the forward's all-reduced row statistics (loss parallel,
//       ops_loss.cc; written by the partitioner)
//   slice_backward(grad) {shape, dim, start, end, step} -> zeros of `shape` with grad at the slice
#include "dtensor/kernels/ops_grad.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "dtensor/kernels/ops.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {
namespace {

// Checks that operand 0 (the gradient) has the type of operand `like` and returns that type.
const TensorType& grad_like(const Node& node, int like) {
  const TensorType& g = node.operands[0]->type;
  const TensorType& t = node.operands[size_t(like)]->type;
  if (g != t)
    DT_THROW(ShapeError) << op_name(node.op) << " grad " << type_str(g) << " does not match "
                         << op_def(node.op).operands[size_t(like)].name << " " << type_str(t);
  return t;
}

void infer_pointwise(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::require_floating(node, 1);
  out.push_back(grad_like(node, 1));
}

// A scalar gradient of a loss, and the loss's first operand's type.
void infer_loss_backward(const Node& node, const Graph&, std::vector<TensorType>& out) {
  if (node.operands[0]->type.rank() != 0)
    DT_THROW(ShapeError) << op_name(node.op) << " expects a scalar grad, got " << type_str(node.operands[0]->type);
  infer_util::require_floating(node, 1);
  out.push_back(node.operands[1]->type);
}

// cross_entropy_backward: with max and sum_exp (both [N], or neither) it is the loss-parallel
// form on a class shard starting at class_start.
void infer_ce_backward(const Node& node, const Graph& g, std::vector<TensorType>& out) {
  infer_loss_backward(node, g, out);
  if (node.operands.size() == 4)
    DT_THROW(ShapeError) << "cross_entropy_backward takes max and sum_exp together, got only max";
  infer_util::require_rank(node, 1, 2);
  for (size_t i = 3; i < node.operands.size(); ++i) {
    const TensorType& v = node.operands[i]->type;
    if (v.rank() != 1 || v.shape[0] != node.operands[1]->type.shape[0])
      DT_THROW(ShapeError) << "cross_entropy_backward row statistic " << type_str(v) << " does not match logits "
                           << type_str(node.operands[1]->type);
  }
}

void infer_norm_backward(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const TensorType& x = grad_like(node, 1);
  infer_util::require_floating(node, 1);
  const auto& ns = node.attr_ints("normalized_shape");
  const size_t k = ns.size();
  bool ok = k >= 1 && k <= x.shape.size();
  for (size_t i = 0; ok && i < k; ++i) ok = x.shape[x.shape.size() - k + i] == ns[i];
  if (!ok)
    DT_THROW(ShapeError) << op_name(node.op) << " normalized_shape " << shape_str(ns)
                         << " does not match the trailing dims of " << type_str(x);
  out.push_back(x);
}

void infer_sdpa_backward(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const char* op = "scaled_dot_product_attention_backward";
  const TensorType& q = node.operands[1]->type;
  for (int i = 0; i < 4; ++i)
    if (node.operands[size_t(i)]->type.dtype != q.dtype)
      DT_THROW(DTypeError) << op << ": grad, q, k and v must have one dtype, got " << type_str(node.operands[size_t(i)]->type)
                           << " beside q " << type_str(q);
  infer_util::require_floating(node, 1);
  const TensorType* mask = node.operands.size() > 4 ? &node.operands[4]->type : nullptr;
  if (mask && mask->dtype != DType::boolean && mask->dtype != q.dtype)
    DT_THROW(DTypeError) << op << ": mask must be bool or q's dtype " << dtype_name(q.dtype) << ", got "
                         << type_str(*mask);
  const Shape& k = node.operands[2]->type.shape;
  dt::attention_kv_group(op, q.shape, k, node.operands[3]->type.shape, mask ? &mask->shape : nullptr);
  Shape o = q.shape;
  o.back() = node.operands[3]->type.shape.back();
  if (node.operands[0]->type.shape != o)
    DT_THROW(ShapeError) << op << " grad " << type_str(node.operands[0]->type) << " does not match the attention output "
                         << shape_str(o);
  for (int i = 1; i <= 3; ++i) out.push_back(node.operands[size_t(i)]->type);
  if (mask && mask->dtype != DType::boolean) out.push_back({q.dtype, dt::attention_scores_shape(q.shape, k)});
}

void infer_embedding_backward(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const TensorType& g = node.operands[0]->type;
  const TensorType& idx = node.operands[1]->type;
  if (idx.dtype != DType::i64 && idx.dtype != DType::i32)
    DT_THROW(DTypeError) << "embedding_backward expects integer indices, got " << type_str(idx);
  Shape expect = idx.shape;
  expect.push_back(g.shape.empty() ? 0 : g.shape.back());
  if (g.shape != expect)
    DT_THROW(ShapeError) << "embedding_backward grad " << type_str(g) << " does not match indices " << type_str(idx);
  const int64_t v = node.attr_int("num_weights");
  if (v < 0) DT_THROW(ValueError) << "embedding_backward num_weights must be >= 0, got " << v;
  out.push_back({g.dtype, {v, expect.back()}});
}

void infer_slice_backward(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const auto& shape = node.attr_ints("shape");
  int64_t product = 1;  // the parser's bounds for types: dims <= 2^40, <= 2^50 elements (0 as 1)
  for (int64_t d : shape)
    if (d < 0 || d > (int64_t(1) << 40) || __builtin_mul_overflow(product, std::max<int64_t>(d, 1), &product) ||
        product > (int64_t(1) << 50))
      DT_THROW(ShapeError) << "slice_backward shape " << shape_str(shape) << " is out of range";
  if (shape.empty()) DT_THROW(ShapeError) << "slice_backward needs a shape of rank >= 1";
  TensorType full{node.operands[0]->type.dtype, Shape(shape.begin(), shape.end())};
  // The slice of `full` must have grad's shape (computed as infer_slice does).
  const int64_t rank = full.rank();
  const int64_t d = normalize_dim(node.attr_int("dim"), rank);
  const int64_t size = full.shape[size_t(d)], step = node.attr_int("step");
  if (step < 1) DT_THROW(ValueError) << "slice_backward step must be positive, got " << step;
  auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + size : v, 0, size); };
  const int64_t start = clamp(node.attr_int("start")), end = clamp(node.attr_int("end"));
  Shape sliced = full.shape;
  sliced[size_t(d)] = end > start ? (end - start - 1) / step + 1 : 0;
  if (node.operands[0]->type.shape != sliced)
    DT_THROW(ShapeError) << "slice_backward grad " << type_str(node.operands[0]->type) << " is not the slice "
                         << shape_str(sliced) << " of " << shape_str(full.shape);
  out.push_back(std::move(full));
}

void run_relu_backward(const KernelArgs& a) { a.out[0] = dt::relu_backward(a.in[0], a.in[1]); }
void run_silu_backward(const KernelArgs& a) { a.out[0] = dt::silu_backward(a.in[0], a.in[1]); }
void run_gelu_backward(const KernelArgs& a) {
  a.out[0] = dt::gelu_backward(a.in[0], a.in[1], a.node.attr_str("approximate"));
}
void run_norm_backward(const KernelArgs& a) {
  const Tensor w = a.in.size() > 2 ? a.in[2] : Tensor();
  const bool layer = a.node.op == OpKind::layer_norm_backward;
  // dx only: the affine parameters' gradients are ops of their own (ir/ops/norm.cc).
  NormGrads g = layer ? dt::layer_norm_backward(a.in[0], a.in[1], a.node.attr_ints("normalized_shape"), w,
                                                a.node.attr_float("eps"), /*param_grads=*/false)
                      : dt::rms_norm_backward(a.in[0], a.in[1], a.node.attr_ints("normalized_shape"), w,
                                              a.node.attr_float("eps"), /*param_grads=*/false);
  a.out[0] = g.dx;
}
void run_softmax_backward(const KernelArgs& a) {
  a.out[0] = dt::softmax_backward(a.in[0], a.in[1], a.node.attr_int("dim"));
}
void run_sdpa_backward(const KernelArgs& a) {
  const dt::AttentionOptions opts{.causal = a.node.attr_bool("causal"),
                                  .scale = a.node.attr_float("scale"),
                                  .mask = a.in.size() > 4 ? a.in[4] : Tensor()};
  AttentionGrads g = dt::scaled_dot_product_attention_backward(a.in[0], a.in[1], a.in[2], a.in[3], opts);
  a.out[0] = g.dq;
  a.out[1] = g.dk;
  a.out[2] = g.dv;
  if (a.out.size() > 3) a.out[3] = g.dscores;
}
void run_embedding_backward(const KernelArgs& a) {
  a.out[0] = dt::embedding_backward(a.in[0], a.in[1], a.node.attr_int("num_weights"));
}
void run_mse_backward(const KernelArgs& a) {
  a.out[0] = dt::mse_loss_backward(a.in[0], a.in[1], a.in[2], a.node.attr_int("count"));
}
// With the row statistics (loss parallel, ir/ops/loss.cc) it is this rank's columns, from
// class_start, of (exp(x - max) / sum_exp - onehot(target)) · grad / count.
void run_ce_backward(const KernelArgs& a) {
  const Tensor none{};
  const bool shard = a.in.size() == 5;
  a.out[0] = dt::cross_entropy_backward(a.in[0], a.in[1], a.in[2], a.node.attr_int("count"), shard ? a.in[3] : none,
                                        shard ? a.in[4] : none, a.node.attr_int("class_start"));
}
void run_slice_backward(const KernelArgs& a) {
  const Node& n = a.node;
  Tensor out = Tensor::zeros(n.result()->type.shape, a.in[0].dtype());
  out.slice(n.attr_int("dim"), n.attr_int("start"), n.attr_int("end"), n.attr_int("step")).copy_(a.in[0]);
  a.out[0] = out;
}

AttrSpec norm_shape_attr() { return {"normalized_shape", AttrKind::ints, std::nullopt}; }

}  // namespace

void register_grad_ops(OpTable& t) {
  t.add({.kind = OpKind::relu_backward, .operands = {{"grad"}, {"x"}}, .attrs = {}, .infer = infer_pointwise,
         .kernel = run_relu_backward});
  t.add({.kind = OpKind::silu_backward, .operands = {{"grad"}, {"x"}}, .attrs = {}, .infer = infer_pointwise,
         .kernel = run_silu_backward});
  t.add({.kind = OpKind::gelu_backward, .operands = {{"grad"}, {"x"}},
         .attrs = {{"approximate", AttrKind::str, Attr(std::string("none"))}}, .infer = infer_pointwise,
         .kernel = run_gelu_backward});
  t.add({.kind = OpKind::layer_norm_backward, .operands = {{"grad"}, {"x"}, {"weight", true}},
         .attrs = {norm_shape_attr(), {"eps", AttrKind::f64, Attr(1e-5)}}, .infer = infer_norm_backward,
         .kernel = run_norm_backward});
  t.add({.kind = OpKind::rms_norm_backward, .operands = {{"grad"}, {"x"}, {"weight", true}},
         .attrs = {norm_shape_attr(), {"eps", AttrKind::f64, Attr(1e-6)}}, .infer = infer_norm_backward,
         .kernel = run_norm_backward});
  t.add({.kind = OpKind::softmax_backward, .operands = {{"grad"}, {"y"}}, .attrs = {{"dim", AttrKind::i64, std::nullopt}},
         .infer = infer_pointwise, .kernel = run_softmax_backward});
  t.add({.kind = OpKind::scaled_dot_product_attention_backward,
         .operands = {{"grad"}, {"q"}, {"k"}, {"v"}, {"mask", true}},
         .attrs = {{"causal", AttrKind::boolean, Attr(false)}, {"scale", AttrKind::f64, Attr(0.0)}},
         .infer = infer_sdpa_backward,
         .kernel = run_sdpa_backward});
  t.add({.kind = OpKind::embedding_backward, .operands = {{"grad"}, {"indices"}},
         .attrs = {{"num_weights", AttrKind::i64, std::nullopt}}, .infer = infer_embedding_backward,
         .kernel = run_embedding_backward});
  t.add({.kind = OpKind::mse_loss_backward, .operands = {{"grad"}, {"input"}, {"target"}},
         .attrs = {{"count", AttrKind::i64, Attr(int64_t(0))}}, .infer = infer_loss_backward,
         .kernel = run_mse_backward});
  t.add({.kind = OpKind::cross_entropy_backward,
         .operands = {{"grad"}, {"logits"}, {"target"}, {"max", true}, {"sum_exp", true}},
         .attrs = {{"count", AttrKind::i64, Attr(int64_t(0))}, {"class_start", AttrKind::i64, Attr(int64_t(0))}},
         .infer = infer_ce_backward,
         .kernel = run_ce_backward});
  t.add({.kind = OpKind::slice_backward, .operands = {{"grad"}},
         .attrs = {{"shape", AttrKind::ints, std::nullopt},
                   {"dim", AttrKind::i64, std::nullopt},
                   {"start", AttrKind::i64, Attr(int64_t(0))},
                   {"end", AttrKind::i64, Attr(std::numeric_limits<int64_t>::max())},
                   {"step", AttrKind::i64, Attr(int64_t(1))}},
         .infer = infer_slice_backward, .kernel = run_slice_backward});
  // Every kernel here returns a buffer of its own.
  for (OpKind k : {OpKind::relu_backward, OpKind::silu_backward, OpKind::gelu_backward, OpKind::layer_norm_backward,
                   OpKind::rms_norm_backward, OpKind::softmax_backward, OpKind::scaled_dot_product_attention_backward,
                   OpKind::embedding_backward, OpKind::mse_loss_backward, OpKind::cross_entropy_backward,
                   OpKind::slice_backward})
    t.at(k).fresh_result = true;
  // Its sliced dim is replicated: only other dims shrink, and `shape` is the local result's.
  t.at(OpKind::slice_backward).localize_attrs = localize_util::shape_attr;
  t.set_sharding_rules(grad_sharding_rules());
}

}  // namespace dt::ir
