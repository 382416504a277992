// sum, mean, amax and amin over `dims` (empty: all dims), with keepdim, as torch.sum / torch.mean /
// torch.amax / torch.amin.
#include "dtensor/kernels/ops.h"
#include "dtensor/ir/grad_rule.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {
namespace {

void infer_reduce(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const TensorType& x = node.operands[0]->type;
  if (node.op == OpKind::mean) infer_util::require_floating(node, 0);
  const auto& dims = node.attr_ints("dims");
  const bool keepdim = node.attr_bool("keepdim");
  std::vector<bool> reduced(size_t(x.rank()), dims.empty());
  for (int64_t d : dims) {
    int64_t nd = normalize_dim(d, x.rank());
    if (reduced[size_t(nd)]) DT_THROW(ValueError) << op_name(node.op) << " dims " << shape_str(dims) << " repeat dim " << nd;
    reduced[size_t(nd)] = true;
  }
  Shape s;
  for (size_t i = 0; i < x.shape.size(); ++i) {
    if (!reduced[i]) s.push_back(x.shape[i]);
    else if (keepdim) s.push_back(1);
  }
  out.push_back({x.dtype, std::move(s)});
}

void run_sum(const KernelArgs& a) { a.out[0] = dt::sum(a.in[0], a.node.attr_ints("dims"), a.node.attr_bool("keepdim")); }
void run_amax(const KernelArgs& a) { a.out[0] = dt::amax(a.in[0], a.node.attr_ints("dims"), a.node.attr_bool("keepdim")); }
void run_amin(const KernelArgs& a) { a.out[0] = dt::amin(a.in[0], a.node.attr_ints("dims"), a.node.attr_bool("keepdim")); }
void run_mean(const KernelArgs& a) { a.out[0] = dt::mean(a.in[0], a.node.attr_ints("dims"), a.node.attr_bool("keepdim")); }

// Gradient rules: g broadcast back over the reduced dims (with keepdim's 1s restored first),
// divided by the number of elements each result averaged for mean.
Value* grad_broadcast_back(GradContext& c, Value* g) {
  const Shape& in = c.operand(0)->type.shape;
  const auto& dims = c.node().attr_ints("dims");
  Shape kept = in;  // the keepdim shape of the result
  for (size_t d = 0; d < kept.size(); ++d)
    if (dims.empty()) kept[d] = 1;
  for (int64_t d : dims) kept[size_t(normalize_dim(d, int64_t(in.size())))] = 1;
  if (g->type.shape != kept) g = c.b().reshape(g, kept);
  return c.expand_to(g, in);
}
void grad_sum(GradContext& c) { c.set(0, grad_broadcast_back(c, c.grad())); }
// amax / amin: the gradient is shared evenly by the elements equal to the extremum (torch's rule).
void grad_extremum(GradContext& c) {
  Builder& b = c.b();
  Value* x = c.operand(0);
  const DType t = x->type.dtype;
  Value* hit = b.cast(b.record(OpKind::eq, {x, grad_broadcast_back(c, c.result())})[0], t);
  Value* count = b.sum(hit, c.node().attr_ints("dims"), c.node().attr_bool("keepdim"));
  c.set(0, b.mul(hit, grad_broadcast_back(c, b.div(c.grad(), count))));
}
void grad_mean(GradContext& c) {
  const int64_t in = c.operand(0)->type.numel(), out = c.result()->type.numel();
  c.set(0, c.scale(grad_broadcast_back(c, c.grad()), in == 0 ? 1.0 : double(out) / double(in)));
}

OpDef reduction(OpKind kind, KernelFn kernel) {
  return {.kind = kind,
          .operands = {{"x"}},
          .attrs = {{"dims", AttrKind::ints, Attr(std::vector<int64_t>{})}, {"keepdim", AttrKind::boolean, Attr(false)}},
          .infer = infer_reduce,
          .kernel = kernel};
}

}  // namespace

void register_reduce_ops(OpTable& t) {
  t.add(reduction(OpKind::sum, run_sum));
  t.add(reduction(OpKind::mean, run_mean));
  t.add(reduction(OpKind::amax, run_amax));
  t.add(reduction(OpKind::amin, run_amin));
  for (OpKind k : {OpKind::sum, OpKind::mean, OpKind::amax, OpKind::amin}) t.at(k).fresh_result = true;
  t.at(OpKind::amax).grad = grad_extremum;
  t.at(OpKind::amin).grad = grad_extremum;
  t.at(OpKind::sum).grad = grad_sum;
  t.at(OpKind::mean).grad = grad_mean;
  t.set_sharding_rules(reduce_sharding_rules());
}

}  // namespace dt::ir
