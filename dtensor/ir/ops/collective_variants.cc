// The coalesced and out variants of the functional collectives (PyTorch's _c10d_functional
// *_coalesced and all_gather_into_tensor_out). The in-place forms (all_reduce_,
// all_gather_into_tensor_) live with the passes' ops in ops_bucketing.cc.
//
//   all_gather_into_tensor_coalesced(x1..xk) {group}      -> k results, each as all_gather_into_tensor
//   reduce_scatter_tensor_coalesced(x1..xk) {group, op}   -> k results, each as reduce_scatter_tensor
//   all_reduce_coalesced(x1..xk) {group, op}              -> k results, each as all_reduce
//   all_gather_into_tensor_out(x, out) {group}            -> gathers x into out's buffer; the result
//                                                           is that buffer (nothing may read `out`
//                                                           afterwards, as for in-place ops)
// A coalesced op issues its k collectives back to back from one node; every result has its own
// wait_tensor. Types follow the single collectives exactly.
#include "dtensor/comm/collectives.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {
namespace {

TensorType gathered(const Node& node, const Value* x, int n) {
  if (x->type.rank() < 1)
    DT_THROW(ShapeError) << op_name(node.op) << " expects tensors of rank >= 1, got " << type_str(x->type);
  TensorType t = x->type;
  if (__builtin_mul_overflow(t.shape[0], int64_t(n), &t.shape[0]))
    DT_THROW(ShapeError) << op_name(node.op) << " output of " << type_str(x->type) << " is too large";
  return t;
}

void infer_all_gather_coalesced(const Node& node, const Graph& graph, std::vector<TensorType>& out) {
  const int n = infer_util::group_size(node, graph);
  for (const Value* x : node.operands) out.push_back(gathered(node, x, n));
}

void infer_reduce_scatter_coalesced(const Node& node, const Graph& graph, std::vector<TensorType>& out) {
  const int n = infer_util::group_size(node, graph);
  parse_reduce_op(node.attr_str("op"));
  for (const Value* x : node.operands) {
    TensorType t = x->type;
    if (t.rank() < 1 || t.shape[0] % n != 0)
      DT_THROW(ShapeError) << op_name(node.op) << " input " << type_str(t) << " dim 0 is not divisible by group size "
                           << n;
    t.shape[0] /= n;
    out.push_back(std::move(t));
  }
}

void infer_all_reduce_coalesced(const Node& node, const Graph& graph, std::vector<TensorType>& out) {
  infer_util::group_size(node, graph);
  parse_reduce_op(node.attr_str("op"));
  for (const Value* x : node.operands) out.push_back(x->type);
}

void infer_all_gather_out(const Node& node, const Graph& graph, std::vector<TensorType>& out) {
  const TensorType want = gathered(node, node.operands[0], infer_util::group_size(node, graph));
  if (node.operands[1]->type != want)
    DT_THROW(ShapeError) << "all_gather_into_tensor_out: out is " << type_str(node.operands[1]->type) << " but gathering "
                         << type_str(node.operands[0]->type) << " gives " << type_str(want);
  out.push_back(want);
}

// Issues one collective per operand: issue(pg, out_i, in_i) with out_i a new tensor of result i.
template <typename Issue>
void run_each(const KernelArgs& a, Issue issue) {
  ProcessGroup& pg = kernel_group(a);
  for (size_t i = 0; i < a.in.size(); ++i) {
    Tensor in = a.in[i].contiguous();
    Tensor out = Tensor::uninitialized(a.node.results[i]->type.shape, a.node.results[i]->type.dtype);
    a.comm->issue(a.node.results[i], issue(pg, out, in), {in, out});
    a.out[i] = out;
  }
}

void run_all_gather_coalesced(const KernelArgs& a) {
  run_each(a, [](ProcessGroup& pg, Tensor& out, const Tensor& in) { return dt::all_gather_into_tensor(pg, out, in); });
}

void run_reduce_scatter_coalesced(const KernelArgs& a) {
  const ReduceOp op = parse_reduce_op(a.node.attr_str("op"));
  run_each(a, [op](ProcessGroup& pg, Tensor& out, const Tensor& in) { return dt::reduce_scatter_tensor(pg, out, in, op); });
}

void run_all_reduce_coalesced(const KernelArgs& a) {
  const ReduceOp op = parse_reduce_op(a.node.attr_str("op"));
  run_each(a, [op](ProcessGroup& pg, Tensor& out, const Tensor& in) {
    out.copy_(in);  // functional: the input stays unchanged for its other readers
    return dt::all_reduce_(pg, out, op);
  });
}

void run_all_gather_out(const KernelArgs& a) {
  ProcessGroup& pg = kernel_group(a);
  Tensor in = a.in[0].contiguous();
  Tensor out = a.in[1];
  if (!out.is_contiguous())
    DT_THROW(ValueError) << "all_gather_into_tensor_out: out %" << a.node.operands[1]->name << " is not contiguous";
  a.comm->issue(a.node.result(), dt::all_gather_into_tensor(pg, out, in), {in, out});
  a.out[0] = out;
}

}  // namespace

void register_collective_variant_ops(OpTable& t) {
  t.add({.kind = OpKind::all_gather_into_tensor_coalesced, .operands = {{"x", false, true}}, .attrs = {group_attr()},
         .infer = infer_all_gather_coalesced, .kernel = run_all_gather_coalesced, .needs_wait = true,
         .bytes_sent = comm_bytes::gather});
  t.add({.kind = OpKind::reduce_scatter_tensor_coalesced, .operands = {{"x", false, true}},
         .attrs = {group_attr(), reduce_op_attr()}, .infer = infer_reduce_scatter_coalesced,
         .kernel = run_reduce_scatter_coalesced, .needs_wait = true, .bytes_sent = comm_bytes::reduce_scatter});
  t.add({.kind = OpKind::all_reduce_coalesced, .operands = {{"x", false, true}}, .attrs = {group_attr(), reduce_op_attr()},
         .infer = infer_all_reduce_coalesced, .kernel = run_all_reduce_coalesced, .needs_wait = true, .bytes_sent = comm_bytes::reduce});
  // The result is `out`'s buffer: it aliases an operand for the buffer planner.
  t.add({.kind = OpKind::all_gather_into_tensor_out, .operands = {{"x"}, {"out"}}, .attrs = {group_attr()},
         .infer = infer_all_gather_out, .kernel = run_all_gather_out, .needs_wait = true, .bytes_sent = comm_bytes::gather,
         .result_aliases_operand = true});
}

}  // namespace dt::ir
