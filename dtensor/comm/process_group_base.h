// The backend-independent half of every ProcessGroup: argument checks and the CollectiveDesc of
// each call, written once for the threads and mpi backends.
//
// Each ProcessGroup call checks its arguments on the caller's thread (so a mistake throws at the
// call site, with the values and the group), builds the call's CollectiveDesc (all_reduce: with
// the algorithm resolved by choose_all_reduce_algo, so members compare concrete algorithms) and
// hands it to the backend's issue(). Checks that depend on the transport (MPI's int counts, its
// reduce ops) stay in the backend.
#pragma once

#include "dtensor/comm/collective_desc.h"
#include "dtensor/comm/process_group.h"

namespace dt {

// Checks the rank list of new_group(ranks) called by global rank `me` of a backend whose valid
// global ranks are `valid` (the world's, or the parent group's); throws ValueError naming the fault
// (an empty list, a rank not in `valid`, a rank twice, or a caller that is not a member).
void check_group_ranks(const std::vector<int>& ranks, const std::vector<int>& valid, int me);

class ProcessGroupBase : public ProcessGroup {
 public:
  WorkPtr all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) final;
  // Honours `algo` where the backend runs a peer-memory algorithm (threads; mpi's shared window);
  // `automatic` picks by CommOptions::one_shot_threshold.
  WorkPtr all_reduce_with_algo(void* buf, size_t count, DType dtype, ReduceOp op, AllReduceAlgo algo) final;
  WorkPtr all_gather(const void* in, void* out, size_t count, DType dtype) final;
  WorkPtr all_gather_rows(const void* in, void* out, size_t count, size_t rows, DType dtype) final;
  WorkPtr reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op) final;
  WorkPtr all_to_all(const void* in, const std::vector<size_t>& send_counts, void* out,
                     const std::vector<size_t>& recv_counts, DType dtype) final;
  WorkPtr broadcast(void* buf, size_t count, DType dtype, int root) final;
  WorkPtr send(const void* buf, size_t count, DType dtype, int dst) final;
  WorkPtr recv(void* buf, size_t count, DType dtype, int src) final;
  WorkPtr barrier() final;

 protected:
  // Issues the checked collective `desc` with the caller's buffers (see ProcessGroup for each op's
  // meaning of in/out: all_reduce and broadcast pass buf as both, send passes out = nullptr, recv
  // in = nullptr, barrier neither).
  virtual WorkPtr issue(const CollectiveDesc& desc, const void* in, void* out) = 0;

 private:
  // Throws ValueError unless `peer` is a group index of this group.
  void check_peer(int peer, std::string_view what) const;
  // Issues broadcast, send or recv, whose descriptor's root is the peer (`what` names it in the
  // error when it is not a group index).
  WorkPtr issue_with_peer(CollectiveOp op, int peer, std::string_view what, size_t count, DType dtype,
                          const void* in, void* out);
};

}  // namespace dt
