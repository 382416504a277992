// linear, matmul, bmm: schema, inference and kernels.
#include "dtensor/comm/process_group.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/ir/gather_join.h"
#include "dtensor/ir/grad_rule.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {
namespace {

using infer_util::require_same_dtype;

// linear(x [..., in], weight [out, in], bias? [out]) -> [..., out]
void infer_linear(const Node& node, const Graph&, std::vector<TensorType>& out) {
  require_same_dtype(node);
  const TensorType& x = node.operands[0]->type;
  const TensorType& w = node.operands[1]->type;
  if (x.rank() < 1) DT_THROW(ShapeError) << "linear expects x of rank >= 1, got " << type_str(x);
  infer_util::require_rank(node, 1, 2);
  if (w.shape[1] != x.shape.back())
    DT_THROW(ShapeError) << "linear weight " << type_str(w) << " does not match input features "
                         << x.shape.back() << " of x " << type_str(x);
  if (node.operands.size() == 3) {
    const TensorType& b = node.operands[2]->type;
    if (b.shape != Shape{w.shape[0]})
      DT_THROW(ShapeError) << "linear bias " << type_str(b) << " does not match weight " << type_str(w);
  }
  Shape s = x.shape;
  s.back() = w.shape[0];
  out.push_back({x.dtype, std::move(s)});
}

void run_linear(const KernelArgs& a) {
  a.out[0] = dt::linear_act(a.in[0], a.in[1], a.in.size() == 3 ? a.in[2] : Tensor(), Activation::none, a.packed);
}

// all_gather_linear_in(x, weight, bias?) {group, dim}: the output buffer of an all_gather along
// dim of linear(x, weight, bias), with only this rank's block filled: the linear writes its result
// straight into [me*b, (me+1)*b) along dim (b = the linear's size there), in place of a block the
// gather would copy (the all_gather_copy_in of a producer; comm_lowering.cc). The other blocks
// are written by all_gather_into_tensor_ {dim}. f32 and f64 (linear_into).
void infer_all_gather_linear_in(const Node& node, const Graph& graph, std::vector<TensorType>& out) {
  infer_util::check_arena_offset(node);
  const int n = infer_util::group_size(node, graph);
  infer_linear(node, graph, out);
  TensorType& t = out.back();
  const int64_t dim = node.attr_int("dim");
  if (t.dtype != DType::f32 && t.dtype != DType::f64)
    DT_THROW(DTypeError) << "all_gather_linear_in supports f32 and f64, got " << dtype_name(t.dtype);
  if (!block_rows_fold(t.shape, dim))
    DT_THROW(ShapeError) << "all_gather_linear_in: the block along dim " << dim << " of the linear's result "
                         << type_str(t) << " is not rows one stride apart (dim must be the last, or follow size-1 dims)";
  if (__builtin_mul_overflow(t.shape[size_t(dim)], int64_t(n), &t.shape[size_t(dim)]))
    DT_THROW(ShapeError) << "all_gather_linear_in: gathered " << type_str(t) << " is too large";
}
void run_all_gather_linear_in(const KernelArgs& a) {
  ProcessGroup& pg = kernel_group(a);
  Tensor out = output_buffer(a);
  const int64_t dim = a.node.attr_int("dim"), block = out.size(dim) / pg.size();
  dt::linear_into(a.in[0], a.in[1], a.in.size() == 3 ? a.in[2] : Tensor(), out.narrow(dim, pg.rank() * block, block),
                  a.packed);
  a.out[0] = out;
}

// torch.matmul shape rules: 1-d operands get a dim prepended/appended and removed again; batch
// dims broadcast.
void infer_matmul(const Node& node, const Graph&, std::vector<TensorType>& out) {
  require_same_dtype(node);
  Shape a = node.operands[0]->type.shape;
  Shape b = node.operands[1]->type.shape;
  if (a.empty() || b.empty())
    DT_THROW(ShapeError) << "matmul expects operands of rank >= 1, got "
                         << type_str(node.operands[0]->type) << " and " << type_str(node.operands[1]->type);
  const bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  if (a.back() != b[b.size() - 2])
    DT_THROW(ShapeError) << "matmul inner dims differ: " << type_str(node.operands[0]->type) << " x "
                         << type_str(node.operands[1]->type);
  Shape batch = broadcast_shapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  Shape s = batch;
  if (!a1) s.push_back(a[a.size() - 2]);
  if (!b1) s.push_back(b.back());
  out.push_back({node.operands[0]->type.dtype, std::move(s)});
}

void run_matmul(const KernelArgs& a) { a.out[0] = dt::matmul(a.in[0], a.in[1]); }

// Gradient rules, as matmuls of the result's gradient g with the other operand:
//   linear  y = x·wᵀ + b:  dx = g·w,  dw = gᵀ·x over all leading dims flattened,  db = Σ g
//   matmul  y = a·b:       da = g·bᵀ, db = aᵀ·g, each summed back over broadcast batch dims
//   bmm:                   da = g·bᵀ, db = aᵀ·g per batch
// The flattened weight gradient contracts over every row of the batch, so a batch-sharded x gives
// a partial weight gradient (the data-parallel all_reduce / reduce_scatter falls out of sharding).
void grad_linear(GradContext& c) {
  Builder& b = c.b();
  Value* g = c.grad();
  Value* x = c.operand(0);
  Value* w = c.operand(1);
  if (c.wants(0)) c.set(0, b.matmul(g, w));
  const int64_t out = w->type.shape[0], in = w->type.shape[1];
  const int64_t rows = out == 0 ? 0 : g->type.numel() / out;
  if (c.wants(1)) {
    Value* g2 = b.reshape(g, {rows, out});
    Value* x2 = b.reshape(x, {rows, in});
    c.set(1, b.matmul(b.transpose(g2, 0, 1), x2));
  }
  if (c.num_operands() == 3 && c.wants(2)) c.set(2, c.sum_to(g, {out}));
}
void grad_matmul(GradContext& c) {
  Value* a = c.operand(0);
  Value* bv = c.operand(1);
  if (a->type.rank() < 2 || bv->type.rank() < 2)
    DT_THROW(ValueError) << "the gradient of matmul with a 1-d operand (" << type_str(a->type) << " x "
                         << type_str(bv->type) << ") is not supported: reshape it to 2-d";
  Builder& b = c.b();
  if (c.wants(0)) c.set(0, c.sum_to(b.matmul(c.grad(), b.transpose(bv, -1, -2)), a->type.shape));
  if (c.wants(1)) c.set(1, c.sum_to(b.matmul(b.transpose(a, -1, -2), c.grad()), bv->type.shape));
}
void grad_bmm(GradContext& c) {
  Builder& b = c.b();
  if (c.wants(0)) c.set(0, b.bmm(c.grad(), b.transpose(c.operand(1), 1, 2)));
  if (c.wants(1)) c.set(1, b.bmm(b.transpose(c.operand(0), 1, 2), c.grad()));
}

// bmm([b, m, k], [b, k, n]) -> [b, m, n]
void infer_bmm(const Node& node, const Graph&, std::vector<TensorType>& out) {
  require_same_dtype(node);
  infer_util::require_rank(node, 0, 3);
  infer_util::require_rank(node, 1, 3);
  const Shape& a = node.operands[0]->type.shape;
  const Shape& b = node.operands[1]->type.shape;
  if (a[0] != b[0] || a[2] != b[1])
    DT_THROW(ShapeError) << "bmm shapes do not agree: " << shape_str(a) << " x " << shape_str(b);
  out.push_back({node.operands[0]->type.dtype, {a[0], a[1], b[2]}});
}

void run_bmm(const KernelArgs& a) { a.out[0] = dt::bmm(a.in[0], a.in[1]); }

// The GEMM a linear/matmul/bmm node performs (dims from its operand and result types).
GemmShape gemm_of(const Node& node) {
  const Shape& a = node.operands[0]->type.shape;
  const Shape& b = node.operands[1]->type.shape;
  const Shape& out = node.result()->type.shape;
  GemmShape g;
  if (node.op == OpKind::linear || node.op == OpKind::all_gather_linear_in) {
    // x [..., in], weight [out, in]: one GEMM over all rows
    g.k = b[1];
    g.n = b[0];
    g.m = g.k == 0 ? 0 : numel(a) / g.k;
    return g;
  }
  g.k = a.back();
  g.n = b.size() == 1 ? 1 : b.back();
  if (b.size() <= 2) {  // matmul against a matrix or vector: the batch folds into m
    g.m = g.n == 0 ? 0 : numel(out) / g.n;
  } else {
    g.m = a.size() >= 2 ? a[a.size() - 2] : 1;
    g.batch = g.m * g.n == 0 ? 0 : numel(out) / (g.m * g.n);
  }
  return g;
}

double gemm_flops(const Node& node) { return gemm_of(node).flops(); }

}  // namespace

void register_linear_ops(OpTable& t) {
  t.add({.kind = OpKind::linear,
         .operands = {{"x"}, {"weight"}, {"bias", /*optional=*/true}},
         .attrs = {},
         .infer = infer_linear,
         .kernel = run_linear});
  t.add({.kind = OpKind::all_gather_linear_in,
         .operands = {{"x"}, {"weight"}, {"bias", /*optional=*/true}},
         .attrs = {group_attr(), {"dim", AttrKind::i64, std::nullopt}, arena_offset_attr()},
         .infer = infer_all_gather_linear_in,
         .kernel = run_all_gather_linear_in,
         .writes_preallocated_out = true});
  t.add({.kind = OpKind::matmul, .operands = {{"a"}, {"b"}}, .attrs = {}, .infer = infer_matmul, .kernel = run_matmul});
  t.add({.kind = OpKind::bmm, .operands = {{"a"}, {"b"}}, .attrs = {}, .infer = infer_bmm, .kernel = run_bmm});
  // Kernel outputs: a buffer of their own.
  for (OpKind k : {OpKind::linear, OpKind::matmul, OpKind::bmm, OpKind::all_gather_linear_in}) {
    t.at(k).fresh_result = true;
    t.at(k).gemm_shape = gemm_of;
    t.at(k).flops = gemm_flops;
  }
  t.at(OpKind::linear).grad = grad_linear;
  for (OpKind k : {OpKind::linear, OpKind::all_gather_linear_in}) t.at(k).packs_weight = true;
  t.at(OpKind::matmul).grad = grad_matmul;
  t.at(OpKind::bmm).grad = grad_bmm;
  t.set_sharding_rules(linear_sharding_rules());
}

}  // namespace dt::ir
