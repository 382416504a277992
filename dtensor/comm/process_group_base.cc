#include "dtensor/comm/process_group_base.h"

#include <algorithm>
#include <set>

#include "dtensor/comm/all_reduce_algos.h"

namespace dt {

namespace {

void check_reduce_dtype(DType dtype, ReduceOp op, std::string_view what) {
  if (dtype == DType::boolean && op == ReduceOp::avg)
    DT_THROW(DTypeError) << what << " with reduce op avg does not support dtype bool";
}

CollectiveDesc make_desc(CollectiveOp op, DType dtype = DType::f32, size_t count = 0) {
  CollectiveDesc d;
  d.op = op;
  d.dtype = dtype;
  d.count = count;
  return d;
}

}  // namespace

void ProcessGroupBase::check_peer(int peer, std::string_view what) const {
  if (peer < 0 || peer >= size())
    DT_THROW(ValueError) << what << " " << peer << " out of range for group " << ranks_str(global_ranks()) << " of size "
                         << size();
}

void check_group_ranks(const std::vector<int>& ranks, const std::vector<int>& valid, int me) {
  if (ranks.empty()) DT_THROW(ValueError) << "process group needs at least one rank";
  std::set<int> seen;
  for (int r : ranks) {
    if (std::find(valid.begin(), valid.end(), r) == valid.end())
      DT_THROW(ValueError) << "rank " << r << " in group " << ranks_str(ranks) << " is not one of the ranks "
                           << ranks_str(valid);
    if (!seen.insert(r).second) DT_THROW(ValueError) << "rank " << r << " appears twice in group " << ranks_str(ranks);
  }
  if (!seen.count(me)) DT_THROW(ValueError) << "rank " << me << " is not a member of group " << ranks_str(ranks);
}

WorkPtr ProcessGroupBase::all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  return all_reduce_with_algo(buf, count, dtype, op, AllReduceAlgo::automatic);
}

WorkPtr ProcessGroupBase::all_reduce_with_algo(void* buf, size_t count, DType dtype, ReduceOp op, AllReduceAlgo algo) {
  check_reduce_dtype(dtype, op, "all_reduce");
  CollectiveDesc d = make_desc(CollectiveOp::all_reduce, dtype, count);
  d.reduce_op = op;
  d.algo = choose_all_reduce_algo(algo, d.bytes(), options());
  return issue(d, buf, buf);
}

WorkPtr ProcessGroupBase::all_gather(const void* in, void* out, size_t count, DType dtype) {
  return issue(make_desc(CollectiveOp::all_gather, dtype, count), in, out);
}

WorkPtr ProcessGroupBase::all_gather_rows(const void* in, void* out, size_t count, size_t rows, DType dtype) {
  if (rows == 0 || count % rows != 0)
    DT_THROW(ValueError) << "all_gather of " << count << " elements per rank in " << rows
                         << " rows: the rows must divide the elements";
  CollectiveDesc d = make_desc(CollectiveOp::all_gather, dtype, count);
  d.rows = rows;
  return issue(d, in, out);
}

WorkPtr ProcessGroupBase::reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op) {
  check_reduce_dtype(dtype, op, "reduce_scatter");
  CollectiveDesc d = make_desc(CollectiveOp::reduce_scatter, dtype, count);
  d.reduce_op = op;
  return issue(d, in, out);
}

WorkPtr ProcessGroupBase::all_to_all(const void* in, const std::vector<size_t>& send_counts, void* out,
                                     const std::vector<size_t>& recv_counts, DType dtype) {
  if (int(send_counts.size()) != size() || int(recv_counts.size()) != size())
    DT_THROW(ValueError) << "all_to_all needs one send and one recv count per rank of group "
                         << ranks_str(global_ranks()) << ", got " << send_counts.size() << " and "
                         << recv_counts.size();
  CollectiveDesc d = make_desc(CollectiveOp::all_to_all, dtype);
  d.send_counts = send_counts;
  d.recv_counts = recv_counts;
  return issue(d, in, out);
}

WorkPtr ProcessGroupBase::issue_with_peer(CollectiveOp op, int peer, std::string_view what, size_t count,
                                          DType dtype, const void* in, void* out) {
  check_peer(peer, what);
  CollectiveDesc d = make_desc(op, dtype, count);
  d.root = peer;
  return issue(d, in, out);
}

WorkPtr ProcessGroupBase::broadcast(void* buf, size_t count, DType dtype, int root) {
  return issue_with_peer(CollectiveOp::broadcast, root, "broadcast root", count, dtype, buf, buf);
}

WorkPtr ProcessGroupBase::send(const void* buf, size_t count, DType dtype, int dst) {
  return issue_with_peer(CollectiveOp::send, dst, "send destination", count, dtype, buf, nullptr);
}

WorkPtr ProcessGroupBase::recv(void* buf, size_t count, DType dtype, int src) {
  return issue_with_peer(CollectiveOp::recv, src, "recv source", count, dtype, nullptr, buf);
}

WorkPtr ProcessGroupBase::barrier() { return issue(make_desc(CollectiveOp::barrier), nullptr, nullptr); }

}  // namespace dt
