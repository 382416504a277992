// Functional collectives (PyTorch's _c10d_functional): each returns a new tensor and is
// asynchronous. The kernel issues the collective on the rank's ProcessGroup for the node's
// `group`, hands the Work (and the buffers it reads and writes) to the CommContext, and returns
// the output buffer at once; the matching wait_tensor blocks on the Work. Its result is the same
// buffer, now complete. Shapes follow c10d (group size n):
//   all_gather_into_tensor  [d0, ...] -> [n*d0, ...]      rank i's input lands in rows [i*d0, (i+1)*d0)
//   reduce_scatter_tensor   [n*c, ...] -> [c, ...]       rank i gets the reduction of block i
//   all_reduce              same shape
//   all_to_all_single       [sum(in_split_sizes), ...] -> [sum(out_split_sizes), ...] (equal splits
//                           when the lists are empty, then d0 must divide by n)
//   broadcast               same shape, value of group index `src`
#include "dtensor/comm/collectives.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {
namespace {

void require_rank_at_least_1(const Node& node) {
  if (node.operands[0]->type.rank() < 1)
    DT_THROW(ShapeError) << op_name(node.op) << " expects a tensor of rank >= 1, got "
                         << type_str(node.operands[0]->type);
}

void check_reduce_op(const Node& node) { parse_reduce_op(node.attr_str("op")); }

void infer_all_gather(const Node& node, const Graph& graph, std::vector<TensorType>& out) {
  infer_util::check_arena_offset(node);
  int n = infer_util::group_size(node, graph);
  require_rank_at_least_1(node);
  TensorType t = node.operands[0]->type;
  if (__builtin_mul_overflow(t.shape[0], int64_t(n), &t.shape[0]))
    DT_THROW(ShapeError) << "all_gather_into_tensor output of " << type_str(node.operands[0]->type) << " is too large";
  out.push_back(std::move(t));
}

void infer_reduce_scatter(const Node& node, const Graph& graph, std::vector<TensorType>& out) {
  infer_util::check_arena_offset(node);
  int n = infer_util::group_size(node, graph);
  check_reduce_op(node);
  require_rank_at_least_1(node);
  TensorType t = node.operands[0]->type;
  if (t.shape[0] % n != 0)
    DT_THROW(ShapeError) << "reduce_scatter_tensor input " << type_str(t) << " dim 0 is not divisible by group size " << n;
  t.shape[0] /= n;
  out.push_back(std::move(t));
}

void infer_all_reduce(const Node& node, const Graph& graph, std::vector<TensorType>& out) {
  infer_util::check_arena_offset(node);
  infer_util::group_size(node, graph);
  check_reduce_op(node);
  out.push_back(node.operands[0]->type);
}

void infer_all_to_all(const Node& node, const Graph& graph, std::vector<TensorType>& out) {
  infer_util::check_arena_offset(node);
  int n = infer_util::group_size(node, graph);
  require_rank_at_least_1(node);
  TensorType t = node.operands[0]->type;
  const auto& out_splits = node.attr_ints("out_split_sizes");
  const auto& in_splits = node.attr_ints("in_split_sizes");
  auto check_list = [&](const std::vector<int64_t>& splits, const char* name) -> int64_t {
    if (int64_t(splits.size()) != n)
      DT_THROW(ValueError) << "all_to_all_single " << name << " " << shape_str(splits) << " needs " << n << " entries";
    int64_t total = 0;
    for (int64_t s : splits) {
      if (s < 0) DT_THROW(ValueError) << "all_to_all_single " << name << " " << shape_str(splits) << " has a negative size";
      if (__builtin_add_overflow(total, s, &total))
        DT_THROW(ValueError) << "all_to_all_single " << name << " " << shape_str(splits) << " overflow";
    }
    return total;
  };
  if (!in_splits.empty()) {
    if (check_list(in_splits, "in_split_sizes") != t.shape[0])
      DT_THROW(ShapeError) << "all_to_all_single in_split_sizes " << shape_str(in_splits)
                           << " do not sum to dim 0 of " << type_str(t);
  } else if (t.shape[0] % n != 0) {
    DT_THROW(ShapeError) << "all_to_all_single input " << type_str(t) << " dim 0 is not divisible by group size " << n;
  }
  if (!out_splits.empty()) t.shape[0] = check_list(out_splits, "out_split_sizes");
  out.push_back(std::move(t));
}

void infer_broadcast(const Node& node, const Graph& graph, std::vector<TensorType>& out) {
  infer_util::check_arena_offset(node);
  int n = infer_util::group_size(node, graph);
  int64_t src = node.attr_int("src");
  if (src < 0 || src >= n) DT_THROW(ValueError) << "broadcast src " << src << " out of range for group size " << n;
  out.push_back(node.operands[0]->type);
}

void infer_wait(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const Value* v = node.operands[0];
  if (!v->producer || !op_def(v->producer->op).needs_wait)
    DT_THROW(ValueError) << "wait_tensor expects the result of a collective, got %" << v->name;
  out.push_back(v->type);
}

void run_all_gather(const KernelArgs& a) {
  ProcessGroup& pg = kernel_group(a);
  Tensor in = a.in[0].contiguous();
  Tensor out = output_buffer(a);
  WorkPtr w = dt::all_gather_into_tensor(pg, out, in);
  a.comm->issue(a.node.result(), std::move(w), {in, out});
  a.out[0] = out;
}

void run_reduce_scatter(const KernelArgs& a) {
  ProcessGroup& pg = kernel_group(a);
  Tensor in = a.in[0].contiguous();
  Tensor out = output_buffer(a);
  WorkPtr w = dt::reduce_scatter_tensor(pg, out, in, parse_reduce_op(a.node.attr_str("op")));
  a.comm->issue(a.node.result(), std::move(w), {in, out});
  a.out[0] = out;
}

void run_all_reduce(const KernelArgs& a) {
  ProcessGroup& pg = kernel_group(a);
  Tensor out = output_buffer(a);  // functional: the input stays unchanged for its other readers
  out.copy_(a.in[0]);
  WorkPtr w = dt::all_reduce_(pg, out, parse_reduce_op(a.node.attr_str("op")));
  a.comm->issue(a.node.result(), std::move(w), {out});
  a.out[0] = out;
}

void run_all_to_all(const KernelArgs& a) {
  ProcessGroup& pg = kernel_group(a);
  Tensor in = a.in[0].contiguous();
  Tensor out = output_buffer(a);
  WorkPtr w = dt::all_to_all_single(pg, out, in, a.node.attr_ints("out_split_sizes"), a.node.attr_ints("in_split_sizes"));
  a.comm->issue(a.node.result(), std::move(w), {in, out});
  a.out[0] = out;
}

void run_broadcast(const KernelArgs& a) {
  ProcessGroup& pg = kernel_group(a);
  Tensor out = output_buffer(a);
  out.copy_(a.in[0]);
  WorkPtr w = dt::broadcast_(pg, out, int(a.node.attr_int("src")));
  a.comm->issue(a.node.result(), std::move(w), {out});
  a.out[0] = out;
}

void run_wait(const KernelArgs& a) {
  DT_CHECK(a.comm) << "wait_tensor run without a communication context";
  a.comm->wait(a.node.operands[0]);
  a.out[0] = a.in[0];
}

}  // namespace

void register_collective_ops(OpTable& t) {
  t.add({.kind = OpKind::all_gather_into_tensor, .operands = {{"x"}}, .attrs = {group_attr(), arena_offset_attr()},
         .infer = infer_all_gather, .kernel = run_all_gather, .needs_wait = true, .bytes_sent = comm_bytes::gather, .writes_preallocated_out = true});
  t.add({.kind = OpKind::reduce_scatter_tensor, .operands = {{"x"}}, .attrs = {group_attr(), reduce_op_attr(), arena_offset_attr()},
         .infer = infer_reduce_scatter, .kernel = run_reduce_scatter, .needs_wait = true,
         .bytes_sent = comm_bytes::reduce_scatter,
         .writes_preallocated_out = true});
  t.add({.kind = OpKind::all_reduce, .operands = {{"x"}}, .attrs = {group_attr(), reduce_op_attr(), arena_offset_attr()},
         .infer = infer_all_reduce, .kernel = run_all_reduce, .needs_wait = true, .bytes_sent = comm_bytes::reduce, .writes_preallocated_out = true});
  t.add({.kind = OpKind::all_to_all_single, .operands = {{"x"}},
         .attrs = {group_attr(),
                   {"out_split_sizes", AttrKind::ints, Attr(std::vector<int64_t>{})},
                   {"in_split_sizes", AttrKind::ints, Attr(std::vector<int64_t>{})}, arena_offset_attr()},
         .infer = infer_all_to_all, .kernel = run_all_to_all, .needs_wait = true, .bytes_sent = comm_bytes::all_to_all, .writes_preallocated_out = true});
  t.add({.kind = OpKind::broadcast, .operands = {{"x"}}, .attrs = {group_attr(), {"src", AttrKind::i64, Attr(int64_t(0))}, arena_offset_attr()},
         .infer = infer_broadcast, .kernel = run_broadcast, .needs_wait = true, .bytes_sent = comm_bytes::broadcast, .writes_preallocated_out = true});
  t.add({.kind = OpKind::wait_tensor, .operands = {{"x"}}, .attrs = {}, .infer = infer_wait, .kernel = run_wait,
         .result_aliases_operand = true});
}

}  // namespace dt::ir
