// Ops indexed by position along one dim (kernels in kernels/ops_index.cc):
//   gather(x, indices) {dim}           -> x.shape[:dim] + indices.shape + x.shape[dim+1:]
//       ONNX Gather / index_select with runtime indices (i64 or i32, negative counted from the end)
//   gather_backward(grad, indices) {dim, shape} -> zeros of `shape` with grad added at the indices
//   gather_elements(x, indices) {dim}  -> indices' shape: ONNX GatherElements / torch.gather
//   gather_elements_backward(grad, indices) {dim, shape} -> its gradient (scatter-add)
//   argmax(x) / argmin(x) {dim, keepdim, select_last_index} -> i64 indices (no gradient)
//   topk(x) {k, dim = -1, largest = true} -> values, i64 indices: sorted, NaN the largest, ties the
//       lower index first (torch.topk; ONNX TopK with sorted=1); the values' gradient scatters
//       into x's shape (gather_elements_backward)
//   cumsum(x) {dim, exclusive, reverse}  as ONNX CumSum
//   triu(x) / tril(x) {diagonal}        as torch.triu / torch.tril on the last two dims
// and by index tuples over the leading dims (kernels in kernels/ops_index_nd.cc):
//   scatter_nd(data, indices, updates)   as ONNX ScatterND with reduction none: data with the slices
//       the index tuples name replaced by updates (PyTorch's `x[idx] = v`, static-cache writes)
//   gather_nd(data, indices)             as ONNX GatherND with batch_dims 0: those slices
//   gather_nd_backward(grad, indices) {shape} -> zeros of `shape` with grad's slices added at the tuples
// Gradients: gather's is gather_backward, gather_elements' gather_elements_backward, gather_nd's
// gather_nd_backward (the indices get none); cumsum's is the cumsum of the
// gradient in the other direction (exclusive stays exclusive); triu's and tril's are the same mask
// applied to the gradient; scatter_nd's (PyTorch's index_put_ backward): data gets the gradient
// with the written slices zeroed, updates get gather_nd of the gradient (every one of repeated
// tuples, as PyTorch's), the indices none. The backward ops have none (no second derivatives).
#include <algorithm>

#include "dtensor/kernels/ops.h"
#include "dtensor/ir/grad_rule.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {
namespace {

void require_rank_at_least(const Node& node, int i, int64_t rank) {
  const TensorType& t = node.operands[size_t(i)]->type;
  if (t.rank() < rank)
    DT_THROW(ShapeError) << op_name(node.op) << " expects operand " << op_def(node.op).operands[size_t(i)].name
                         << " of rank >= " << rank << ", got " << type_str(t);
}

void require_indices(const Node& node, int i) {
  const TensorType& t = node.operands[size_t(i)]->type;
  if (t.dtype != DType::i64 && t.dtype != DType::i32)
    DT_THROW(DTypeError) << op_name(node.op) << " expects i64 or i32 indices, got " << type_str(t);
}

void require_numeric(const Node& node) {
  if (node.operands[0]->type.dtype == DType::boolean)
    DT_THROW(DTypeError) << op_name(node.op) << " expects a numeric operand, got " << type_str(node.operands[0]->type);
}

Shape gathered(const Shape& x, const Shape& idx, int64_t d) {
  Shape out(x.begin(), x.begin() + d);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), x.begin() + d + 1, x.end());
  return out;
}

void infer_gather(const Node& node, const Graph&, std::vector<TensorType>& out) {
  require_rank_at_least(node, 0, 1);
  require_indices(node, 1);
  const TensorType& x = node.operands[0]->type;
  const int64_t d = normalize_dim(node.attr_int("dim"), x.rank());
  out.push_back({x.dtype, gathered(x.shape, node.operands[1]->type.shape, d)});
}

// The `shape` attribute of a backward op (its result): rank >= 1 and within the parser's bounds
// for types (dims <= 2^40, <= 2^50 elements, 0 counted as 1).
Shape checked_shape_attr(const Node& node) {
  const auto& s = node.attr_ints("shape");
  const Shape shape(s.begin(), s.end());
  if (shape.empty()) DT_THROW(ShapeError) << op_name(node.op) << " needs a shape of rank >= 1";
  int64_t product = 1;
  for (int64_t v : shape) {
    if (v < 0) DT_THROW(ShapeError) << op_name(node.op) << " shape " << shape_str(shape) << " has a negative size";
    if (v > (int64_t(1) << 40) || __builtin_mul_overflow(product, std::max<int64_t>(v, 1), &product) ||
        product > (int64_t(1) << 50))
      DT_THROW(ShapeError) << op_name(node.op) << " shape " << shape_str(shape) << " is too large";
  }
  return shape;
}

void infer_gather_backward(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::require_floating(node, 0);
  require_indices(node, 1);
  const Shape shape = checked_shape_attr(node);
  const int64_t d = normalize_dim(node.attr_int("dim"), int64_t(shape.size()));
  const Shape want = gathered(shape, node.operands[1]->type.shape, d);
  if (node.operands[0]->type.shape != want)
    DT_THROW(ShapeError) << "gather_backward grad " << type_str(node.operands[0]->type) << " is not the gather "
                         << shape_str(want) << " of " << shape_str(shape) << " on dim " << d;
  out.push_back({node.operands[0]->type.dtype, shape});
}

// gather_elements(x, indices): same rank, indices no larger than x off dim.
void check_elements(const Node& node, const Shape& x, const Shape& idx) {
  if (idx.size() != x.size())
    DT_THROW(ShapeError) << op_name(node.op) << " indices " << shape_str(idx) << " must have the rank of " << shape_str(x);
  const int64_t d = normalize_dim(node.attr_int("dim"), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i)
    if (int64_t(i) != d && idx[i] > x[i])
      DT_THROW(ShapeError) << op_name(node.op) << " indices " << shape_str(idx) << " are larger than " << shape_str(x)
                           << " in dim " << i;
}

void infer_gather_elements(const Node& node, const Graph&, std::vector<TensorType>& out) {
  require_rank_at_least(node, 0, 1);
  require_indices(node, 1);
  check_elements(node, node.operands[0]->type.shape, node.operands[1]->type.shape);
  out.push_back({node.operands[0]->type.dtype, node.operands[1]->type.shape});
}

void infer_gather_elements_backward(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::require_floating(node, 0);
  require_indices(node, 1);
  const Shape shape = checked_shape_attr(node);
  check_elements(node, shape, node.operands[1]->type.shape);
  if (node.operands[0]->type.shape != node.operands[1]->type.shape)
    DT_THROW(ShapeError) << "gather_elements_backward grad " << type_str(node.operands[0]->type)
                         << " must have the indices' shape " << type_str(node.operands[1]->type);
  out.push_back({node.operands[0]->type.dtype, shape});
}

void infer_arg(const Node& node, const Graph&, std::vector<TensorType>& out) {
  require_numeric(node);
  require_rank_at_least(node, 0, 1);
  const TensorType& x = node.operands[0]->type;
  const int64_t d = normalize_dim(node.attr_int("dim"), x.rank());
  if (x.shape[size_t(d)] == 0)
    DT_THROW(ShapeError) << op_name(node.op) << " over dim " << d << " of " << type_str(x) << ", which is empty";
  Shape s = x.shape;
  if (node.attr_bool("keepdim")) s[size_t(d)] = 1;
  else s.erase(s.begin() + d);
  out.push_back({DType::i64, std::move(s)});
}

void infer_cumsum(const Node& node, const Graph&, std::vector<TensorType>& out) {
  require_numeric(node);
  require_rank_at_least(node, 0, 1);
  normalize_dim(node.attr_int("dim"), node.operands[0]->type.rank());
  out.push_back(node.operands[0]->type);
}

void infer_triangle(const Node& node, const Graph&, std::vector<TensorType>& out) {
  require_rank_at_least(node, 0, 2);
  out.push_back(node.operands[0]->type);
}

void run_gather(const KernelArgs& a) { a.out[0] = dt::gather(a.in[0], a.in[1], a.node.attr_int("dim")); }
void run_gather_backward(const KernelArgs& a) {
  const auto& s = a.node.attr_ints("shape");
  a.out[0] = dt::gather_backward(a.in[0], a.in[1], a.node.attr_int("dim"), Shape(s.begin(), s.end()));
}
void run_gather_elements(const KernelArgs& a) {
  a.out[0] = dt::gather_elements(a.in[0], a.in[1], a.node.attr_int("dim"));
}
void run_gather_elements_backward(const KernelArgs& a) {
  const auto& s = a.node.attr_ints("shape");
  a.out[0] = dt::gather_elements_backward(a.in[0], a.in[1], a.node.attr_int("dim"), Shape(s.begin(), s.end()));
}
void run_argmax(const KernelArgs& a) {
  a.out[0] = dt::argmax(a.in[0], a.node.attr_int("dim"), a.node.attr_bool("keepdim"), a.node.attr_bool("select_last_index"));
}
void run_argmin(const KernelArgs& a) {
  a.out[0] = dt::argmin(a.in[0], a.node.attr_int("dim"), a.node.attr_bool("keepdim"), a.node.attr_bool("select_last_index"));
}
void run_cumsum(const KernelArgs& a) {
  a.out[0] = dt::cumsum(a.in[0], a.node.attr_int("dim"), a.node.attr_bool("exclusive"), a.node.attr_bool("reverse"));
}
void run_triu(const KernelArgs& a) { a.out[0] = dt::triu(a.in[0], a.node.attr_int("diagonal")); }
void run_tril(const KernelArgs& a) { a.out[0] = dt::tril(a.in[0], a.node.attr_int("diagonal")); }

// gather and gather_elements: their backward op scatters the gradient into zeros of x's shape.
void grad_gather(GradContext& c) {
  const Shape& x = c.operand(0)->type.shape;
  const OpKind backward = c.node().op == OpKind::gather ? OpKind::gather_backward : OpKind::gather_elements_backward;
  c.set(0, c.b().record(backward, {c.grad(), c.operand(1)},
                        {{"dim", c.node().attr_int("dim")}, {"shape", std::vector<int64_t>(x.begin(), x.end())}})[0]);
}
void infer_topk(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const TensorType& x = node.operands[0]->type;
  if (x.rank() == 0) DT_THROW(ShapeError) << "topk needs a tensor of rank >= 1, got " << type_str(x);
  if (x.dtype == DType::boolean) DT_THROW(DTypeError) << "topk needs numbers, got " << type_str(x);
  const int64_t d = normalize_dim(node.attr_int("dim"), x.rank()), k = node.attr_int("k");
  if (k < 0 || k > x.shape[size_t(d)])
    DT_THROW(ValueError) << "topk k " << k << " is out of range for dim " << d << " of " << type_str(x);
  TensorType v = x;
  v.shape[size_t(d)] = k;
  out.push_back(v);
  v.dtype = DType::i64;
  out.push_back(v);
}
void run_topk(const KernelArgs& a) {
  auto [values, indices] = dt::topk(a.in[0], a.node.attr_int("k"), a.node.attr_int("dim"), a.node.attr_bool("largest"));
  a.out[0] = values;
  a.out[1] = indices;
}
void grad_topk(GradContext& c) {
  const Shape& x = c.operand(0)->type.shape;
  c.set(0, c.b().record(OpKind::gather_elements_backward, {c.grad_or_zeros(0), c.result(1)},
                        {{"dim", normalize_dim(c.node().attr_int("dim"), int64_t(x.size()))},
                         {"shape", std::vector<int64_t>(x.begin(), x.end())}})[0]);
}

// y_i = Σ_{j ≤ i} x_j (or j < i) gives dx_j = Σ_{i ≥ j} g_i (or i > j): the other direction.
void grad_cumsum(GradContext& c) {
  const Node& n = c.node();
  c.set(0, c.b().record(OpKind::cumsum, {c.grad()},
                        {{"dim", n.attr_int("dim")}, {"exclusive", n.attr_bool("exclusive")},
                         {"reverse", !n.attr_bool("reverse")}})[0]);
}
void grad_triangle(GradContext& c) {
  c.set(0, c.b().record(c.node().op, {c.grad()}, {{"diagonal", c.node().attr_int("diagonal")}})[0]);
}

void infer_scatter_nd(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const TensorType& data = node.operands[0]->type;
  const TensorType& idx = node.operands[1]->type;
  const TensorType& upd = node.operands[2]->type;
  require_indices(node, 1);
  if (upd.dtype != data.dtype)
    DT_THROW(DTypeError) << "scatter_nd updates " << type_str(upd) << " differ in dtype from data " << type_str(data);
  const Shape want = dt::nd_slices_shape("scatter_nd", data.shape, idx.shape);
  if (upd.shape != want)
    DT_THROW(ShapeError) << "scatter_nd updates " << type_str(upd) << " must be " << shape_str(want) << " for data "
                         << type_str(data) << " and indices " << type_str(idx);
  out.push_back(data);
}
void infer_gather_nd(const Node& node, const Graph&, std::vector<TensorType>& out) {
  require_indices(node, 1);
  const TensorType& data = node.operands[0]->type;
  out.push_back({data.dtype, dt::nd_slices_shape("gather_nd", data.shape, node.operands[1]->type.shape)});
}
void infer_gather_nd_backward(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::require_floating(node, 0);
  require_indices(node, 1);
  const Shape shape = checked_shape_attr(node);
  const Shape want = dt::nd_slices_shape("gather_nd_backward", shape, node.operands[1]->type.shape);
  if (node.operands[0]->type.shape != want)
    DT_THROW(ShapeError) << "gather_nd_backward grad " << type_str(node.operands[0]->type) << " is not the gather_nd "
                         << shape_str(want) << " of " << shape_str(shape);
  out.push_back({node.operands[0]->type.dtype, shape});
}
void run_scatter_nd(const KernelArgs& a) { a.out[0] = dt::scatter_nd(a.in[0], a.in[1], a.in[2]); }
void run_gather_nd(const KernelArgs& a) { a.out[0] = dt::gather_nd(a.in[0], a.in[1]); }
void run_gather_nd_backward(const KernelArgs& a) {
  const auto& s = a.node.attr_ints("shape");
  a.out[0] = dt::gather_nd_backward(a.in[0], a.in[1], Shape(s.begin(), s.end()));
}
// y = data with the tuples' slices replaced: those slices of data do not reach y (zeroed in its
// gradient) and each update reaches y at its tuple.
void grad_scatter_nd(GradContext& c) {
  if (c.wants(0)) c.set(0, c.b().record(OpKind::scatter_nd, {c.grad(), c.operand(1), c.full(c.operand(2)->type, 0.0)})[0]);
  if (c.wants(2)) c.set(2, c.b().record(OpKind::gather_nd, {c.grad(), c.operand(1)})[0]);
}
void grad_gather_nd(GradContext& c) {
  const Shape& x = c.operand(0)->type.shape;
  c.set(0, c.b().record(OpKind::gather_nd_backward, {c.grad(), c.operand(1)},
                        {{"shape", std::vector<int64_t>(x.begin(), x.end())}})[0]);
}

}  // namespace

void register_index_ops(OpTable& t) {
  const AttrSpec dim0{"dim", AttrKind::i64, Attr(int64_t(0))};
  t.add({.kind = OpKind::gather, .operands = {{"x"}, {"indices"}}, .attrs = {dim0}, .infer = infer_gather,
         .kernel = run_gather, .grad = grad_gather});
  t.add({.kind = OpKind::gather_backward, .operands = {{"grad"}, {"indices"}},
         .attrs = {dim0, {"shape", AttrKind::ints, std::nullopt}}, .infer = infer_gather_backward,
         .kernel = run_gather_backward, .localize_attrs = localize_util::shape_attr});
  t.add({.kind = OpKind::gather_elements, .operands = {{"x"}, {"indices"}}, .attrs = {dim0},
         .infer = infer_gather_elements, .kernel = run_gather_elements, .grad = grad_gather});
  t.add({.kind = OpKind::gather_elements_backward, .operands = {{"grad"}, {"indices"}},
         .attrs = {dim0, {"shape", AttrKind::ints, std::nullopt}}, .infer = infer_gather_elements_backward,
         .kernel = run_gather_elements_backward, .localize_attrs = localize_util::shape_attr});
  for (auto [k, kernel] : {std::pair<OpKind, KernelFn>{OpKind::argmax, run_argmax}, {OpKind::argmin, run_argmin}})
    t.add({.kind = k, .operands = {{"x"}},
           .attrs = {dim0, {"keepdim", AttrKind::boolean, Attr(false)}, {"select_last_index", AttrKind::boolean, Attr(false)}},
           .infer = infer_arg, .kernel = kernel});
  t.add({.kind = OpKind::topk, .operands = {{"x"}},
         .attrs = {{"k", AttrKind::i64, std::nullopt}, {"dim", AttrKind::i64, Attr(int64_t(-1))},
                   {"largest", AttrKind::boolean, Attr(true)}},
         .infer = infer_topk, .kernel = run_topk, .grad = grad_topk});
  t.add({.kind = OpKind::cumsum, .operands = {{"x"}},
         .attrs = {dim0, {"exclusive", AttrKind::boolean, Attr(false)}, {"reverse", AttrKind::boolean, Attr(false)}},
         .infer = infer_cumsum, .kernel = run_cumsum, .grad = grad_cumsum});
  for (auto [k, kernel] : {std::pair<OpKind, KernelFn>{OpKind::triu, run_triu}, {OpKind::tril, run_tril}})
    t.add({.kind = k, .operands = {{"x"}}, .attrs = {{"diagonal", AttrKind::i64, Attr(int64_t(0))}},
           .infer = infer_triangle, .kernel = kernel, .grad = grad_triangle});
  // The nd ops move bytes and do no arithmetic: no `flops` (estimates price them by the bytes
  // they write, as every indexing op).
  t.add({.kind = OpKind::scatter_nd, .operands = {{"data"}, {"indices"}, {"updates"}}, .attrs = {},
         .infer = infer_scatter_nd, .kernel = run_scatter_nd, .grad = grad_scatter_nd});
  t.add({.kind = OpKind::gather_nd, .operands = {{"data"}, {"indices"}}, .attrs = {}, .infer = infer_gather_nd,
         .kernel = run_gather_nd, .grad = grad_gather_nd});
  t.add({.kind = OpKind::gather_nd_backward, .operands = {{"grad"}, {"indices"}},
         .attrs = {{"shape", AttrKind::ints, std::nullopt}}, .infer = infer_gather_nd_backward,
         .kernel = run_gather_nd_backward, .localize_attrs = localize_util::shape_attr});
  for (OpKind k : {OpKind::scatter_nd, OpKind::gather_nd, OpKind::gather_nd_backward, OpKind::gather, OpKind::gather_backward, OpKind::gather_elements, OpKind::gather_elements_backward, OpKind::argmax, OpKind::argmin, OpKind::cumsum,
                   OpKind::triu, OpKind::tril, OpKind::topk})
    t.at(k).fresh_result = true;
  t.set_sharding_rules(index_sharding_rules());
}

}  // namespace dt::ir
