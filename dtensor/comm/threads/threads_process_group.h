// The `threads` backend's ProcessGroup: a thin handle on the calling rank's Endpoint of one group.
//
// ProcessGroupBase validates arguments on the caller's thread (so mistakes throw at the call site
// with the values); issue() queues the collective on the endpoint's progress thread and returns its Work.
// Groups are shared by rank list: every distinct ordered rank list (within one run_ranks world)
// has one set of sequence numbers and rendezvous state, however many handles name it.
#pragma once

#include <memory>

#include "dtensor/comm/process_group_base.h"
#include "dtensor/comm/threads/endpoint.h"

namespace dt::threads {

class ThreadsProcessGroup : public ProcessGroupBase {
 public:
  ThreadsProcessGroup(std::shared_ptr<World> world, Endpoint& endpoint)
      : world_(std::move(world)), endpoint_(endpoint) {}

  int rank() const override { return endpoint_.index(); }
  int size() const override { return int(endpoint_.ranks().size()); }
  const std::vector<int>& global_ranks() const override { return endpoint_.ranks(); }
  std::string backend_name() const override { return "threads"; }
  const CommOptions& options() const override { return world_->options(); }

  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& global_ranks) override;

  World& world() { return *world_; }
  int global_rank() const { return endpoint_.global_rank(); }

 private:
  // Refuses a send or recv to oneself (the rendezvous pairs two distinct ranks; MPI allows it).
  WorkPtr issue(const CollectiveDesc& desc, const void* in, void* out) override;
  std::shared_ptr<World> world_;
  Endpoint& endpoint_;
};

}  // namespace dt::threads
