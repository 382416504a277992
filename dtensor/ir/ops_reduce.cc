// sum and mean over `dims` (empty: all dims), with keepdim, as torch.sum / torch.mean.
#include "dtensor/core/ops.h"
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
void run_mean(const KernelArgs& a) { a.out[0] = dt::mean(a.in[0], a.node.attr_ints("dims"), a.node.attr_bool("keepdim")); }

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
  for (OpKind k : {OpKind::sum, OpKind::mean}) t.at(k).fresh_result = true;
}

}  // namespace dt::ir
