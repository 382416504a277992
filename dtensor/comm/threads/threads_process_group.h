// The `threads` backend's ProcessGroup: a thin handle on the calling rank's Endpoint of one group.
//
// It validates arguments on the caller's thread (so mistakes throw at the call site with the
// values), then queues the collective on the endpoint's progress thread and returns its Work.
// Groups are shared by rank list: every distinct ordered rank list (within one run_ranks world)
// has one set of sequence numbers and rendezvous state, however many handles name it.
#pragma once

#include <memory>

#include "dtensor/comm/threads/endpoint.h"

namespace dt::threads {

class ThreadsProcessGroup : public ProcessGroup {
 public:
  ThreadsProcessGroup(std::shared_ptr<World> world, Endpoint& endpoint)
      : world_(std::move(world)), endpoint_(endpoint) {}

  int rank() const override { return endpoint_.index(); }
  int size() const override { return int(endpoint_.ranks().size()); }
  const std::vector<int>& global_ranks() const override { return endpoint_.ranks(); }
  std::string backend_name() const override { return "threads"; }
  const CommOptions& options() const override { return world_->options(); }

  WorkPtr all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) override;
  // Honours `algo`; `automatic` picks by CommOptions::one_shot_threshold.
  WorkPtr all_reduce_with_algo(void* buf, size_t count, DType dtype, ReduceOp op, AllReduceAlgo algo) override;
  WorkPtr all_gather(const void* in, void* out, size_t count, DType dtype) override;
  WorkPtr reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op) override;
  WorkPtr all_to_all(const void* in, const std::vector<size_t>& send_counts, void* out,
                     const std::vector<size_t>& recv_counts, DType dtype) override;
  WorkPtr broadcast(void* buf, size_t count, DType dtype, int root) override;
  WorkPtr send(const void* buf, size_t count, DType dtype, int dst) override;
  WorkPtr recv(void* buf, size_t count, DType dtype, int src) override;
  WorkPtr barrier() override;
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& global_ranks) override;

  World& world() { return *world_; }
  int global_rank() const { return endpoint_.global_rank(); }

 private:
  void check_peer(int peer, std::string_view what) const;
  std::shared_ptr<World> world_;
  Endpoint& endpoint_;
};

}  // namespace dt::threads
