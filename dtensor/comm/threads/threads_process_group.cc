#include "dtensor/comm/threads/threads_process_group.h"

namespace dt::threads {

WorkPtr ThreadsProcessGroup::issue(const CollectiveDesc& desc, const void* in, void* out) {
  if ((desc.op == CollectiveOp::send || desc.op == CollectiveOp::recv) && desc.root == rank())
    DT_THROW(ValueError) << "rank " << global_rank() << " cannot " << (desc.op == CollectiveOp::send ? "send to" : "receive from")
                         << " itself";
  return endpoint_.submit(desc, in, out);
}

std::shared_ptr<ProcessGroup> ThreadsProcessGroup::new_group(const std::vector<int>& global_ranks) {
  Endpoint& ep = world_->endpoint(global_ranks, global_rank());
  return std::make_shared<ThreadsProcessGroup>(world_, ep);
}

}  // namespace dt::threads
