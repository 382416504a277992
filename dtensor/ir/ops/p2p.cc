// Point-to-point transfers between two members of a group, the pipeline's activations and their
// gradients crossing stages (PyTorch's P2POp isend/irecv). Both are asynchronous like the
// functional collectives: the kernel posts the transfer on the node's `group` and returns at once;
// the matching wait_tensor completes it.
//   send(x) {group, peer, tag}                 result: x itself (the sent buffer), kept alive
//                                              until the wait
//   recv() {group, peer, tag, shape, dtype}     result: a new tensor of `shape` and `dtype`
// `peer` is the other side's index in the group (as broadcast's `src`). The k-th send from a to b
// on a group pairs with the k-th recv on b from a (the transports keep each pair's messages in
// order); `tag` names the message so the compile-time check (passes/p2p_order.h) can prove that
// each pair agrees on tag, dtype and element count, and that no rank's order can deadlock.
#include "dtensor/comm/process_group.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {
namespace {

void check_peer(const Node& node, const Graph& graph) {
  const int n = infer_util::group_size(node, graph);
  const int64_t peer = node.attr_int("peer");
  if (peer < 0 || peer >= n)
    DT_THROW(ValueError) << op_name(node.op) << " peer " << peer << " out of range for group size " << n;
  if (node.attr_int("tag") < 0) DT_THROW(ValueError) << op_name(node.op) << " tag " << node.attr_int("tag") << " is negative";
}

void infer_send(const Node& node, const Graph& graph, std::vector<TensorType>& out) {
  check_peer(node, graph);
  out.push_back(node.operands[0]->type);
}

void infer_recv(const Node& node, const Graph& graph, std::vector<TensorType>& out) {
  check_peer(node, graph);
  const auto& shape = node.attr_ints("shape");
  for (int64_t d : shape)
    if (d < 0) DT_THROW(ShapeError) << "recv shape " << shape_str(shape) << " has a negative size";
  out.push_back({node.attr_dtype("dtype"), Shape(shape.begin(), shape.end())});
}

void run_send(const KernelArgs& a) {
  ProcessGroup& pg = kernel_group(a);
  Tensor in = a.in[0].contiguous();
  WorkPtr w = pg.send(in.raw_data(), size_t(in.numel()), in.dtype(), int(a.node.attr_int("peer")));
  a.comm->issue(a.node.result(), std::move(w), {in});
  a.out[0] = in;
}

void run_recv(const KernelArgs& a) {
  ProcessGroup& pg = kernel_group(a);
  Tensor out = output_buffer(a);
  WorkPtr w = pg.recv(out.raw_data(), size_t(out.numel()), out.dtype(), int(a.node.attr_int("peer")));
  a.comm->issue(a.node.result(), std::move(w), {out});
  a.out[0] = out;
}

AttrSpec peer_attr() { return {"peer", AttrKind::i64, std::nullopt}; }
AttrSpec tag_attr() { return {"tag", AttrKind::i64, Attr(int64_t(0))}; }

}  // namespace

void register_p2p_ops(OpTable& t) {
  t.add({.kind = OpKind::send, .operands = {{"x"}}, .attrs = {group_attr(), peer_attr(), tag_attr()},
         .infer = infer_send, .kernel = run_send, .needs_wait = true, .bytes_sent = comm_bytes::point_to_point,
         .point_to_point = true, .result_aliases_operand = true});
  t.add({.kind = OpKind::recv, .operands = {},
         .attrs = {group_attr(), peer_attr(), tag_attr(), {"shape", AttrKind::ints, std::nullopt},
                   {"dtype", AttrKind::dtype, Attr(DType::f32)}},
         .infer = infer_recv, .kernel = run_recv, .needs_wait = true, .bytes_sent = comm_bytes::point_to_point,
         .point_to_point = true, .fresh_result = true});
}

}  // namespace dt::ir
