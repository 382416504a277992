#include "dtensor/comm/threads/threads_process_group.h"

#include "dtensor/comm/collective_desc.h"
#include "dtensor/comm/threads/algorithms.h"

namespace dt::threads {

namespace {

void check_reduce_dtype(DType dtype, ReduceOp op, std::string_view what) {
  if (dtype == DType::boolean && op == ReduceOp::avg)
    DT_THROW(DTypeError) << what << " with reduce op avg does not support dtype bool";
}

}  // namespace

void ThreadsProcessGroup::check_peer(int peer, std::string_view what) const {
  if (peer < 0 || peer >= size())
    DT_THROW(ValueError) << what << " " << peer << " out of range for group " << ranks_str(global_ranks()) << " of size "
                         << size();
}

WorkPtr ThreadsProcessGroup::all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  return all_reduce_with_algo(buf, count, dtype, op, AllReduceAlgo::automatic);
}

WorkPtr ThreadsProcessGroup::all_reduce_with_algo(void* buf, size_t count, DType dtype, ReduceOp op,
                                                  AllReduceAlgo algo) {
  check_reduce_dtype(dtype, op, "all_reduce");
  CollectiveDesc d;
  d.op = CollectiveOp::all_reduce;
  d.dtype = dtype;
  d.count = count;
  d.reduce_op = op;
  // Resolved here, on the caller's thread, so the rendezvous compares concrete algorithms.
  d.algo = algo != AllReduceAlgo::automatic ? algo : resolve_all_reduce_algo(d.bytes(), options());
  return endpoint_.submit(d, buf, buf);
}

WorkPtr ThreadsProcessGroup::all_gather(const void* in, void* out, size_t count, DType dtype) {
  CollectiveDesc d;
  d.op = CollectiveOp::all_gather;
  d.dtype = dtype;
  d.count = count;
  return endpoint_.submit(d, in, out);
}

WorkPtr ThreadsProcessGroup::reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op) {
  check_reduce_dtype(dtype, op, "reduce_scatter");
  CollectiveDesc d;
  d.op = CollectiveOp::reduce_scatter;
  d.dtype = dtype;
  d.count = count;
  d.reduce_op = op;
  return endpoint_.submit(d, in, out);
}

WorkPtr ThreadsProcessGroup::all_to_all(const void* in, const std::vector<size_t>& send_counts, void* out,
                                        const std::vector<size_t>& recv_counts, DType dtype) {
  if (int(send_counts.size()) != size() || int(recv_counts.size()) != size())
    DT_THROW(ValueError) << "all_to_all needs one send and one recv count per rank of group "
                         << ranks_str(global_ranks()) << ", got " << send_counts.size() << " and "
                         << recv_counts.size();
  CollectiveDesc d;
  d.op = CollectiveOp::all_to_all;
  d.dtype = dtype;
  d.send_counts = send_counts;
  d.recv_counts = recv_counts;
  return endpoint_.submit(d, in, out);
}

WorkPtr ThreadsProcessGroup::broadcast(void* buf, size_t count, DType dtype, int root) {
  check_peer(root, "broadcast root");
  CollectiveDesc d;
  d.op = CollectiveOp::broadcast;
  d.dtype = dtype;
  d.count = count;
  d.root = root;
  return endpoint_.submit(d, buf, buf);
}

WorkPtr ThreadsProcessGroup::send(const void* buf, size_t count, DType dtype, int dst) {
  check_peer(dst, "send destination");
  if (dst == rank()) DT_THROW(ValueError) << "rank " << global_rank() << " cannot send to itself";
  CollectiveDesc d;
  d.op = CollectiveOp::send;
  d.dtype = dtype;
  d.count = count;
  d.root = dst;
  return endpoint_.submit(d, buf, nullptr);
}

WorkPtr ThreadsProcessGroup::recv(void* buf, size_t count, DType dtype, int src) {
  check_peer(src, "recv source");
  if (src == rank()) DT_THROW(ValueError) << "rank " << global_rank() << " cannot receive from itself";
  CollectiveDesc d;
  d.op = CollectiveOp::recv;
  d.dtype = dtype;
  d.count = count;
  d.root = src;
  return endpoint_.submit(d, nullptr, buf);
}

WorkPtr ThreadsProcessGroup::barrier() {
  CollectiveDesc d;
  d.op = CollectiveOp::barrier;
  return endpoint_.submit(d, nullptr, nullptr);
}

std::shared_ptr<ProcessGroup> ThreadsProcessGroup::new_group(const std::vector<int>& global_ranks) {
  Endpoint& ep = world_->endpoint(global_ranks, global_rank());
  return std::make_shared<ThreadsProcessGroup>(world_, ep);
}

}  // namespace dt::threads
