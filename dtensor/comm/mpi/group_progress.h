// Per-group collective progress, readable by the peer-state agent thread.
//
// Every MpiProcessGroup numbers its collectives 1, 2, 3... (point-to-point send/recv are not
// numbered: they involve two ranks, so the other members could not agree on the count). When a
// collective times out, the waiting rank asks each peer's agent for that group's `issued` number:
// a peer whose number is below the stuck sequence number has not arrived.
//
// Groups are identified across processes by group_id = hash(rank list, ordinal), where ordinal
// counts earlier groups with the same rank list in this process: new_group is collective over the
// members, so the n-th group over [0,2] is the same communicator on ranks 0 and 2.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/comm/collective_desc.h"

namespace dt::mpi {

struct GroupProgress {
  int64_t id = 0;
  std::vector<int> global_ranks;  // group order
  std::atomic<int64_t> issued{0};     // seq of the last collective issued (0: none yet)
  std::atomic<int64_t> completed{0};  // highest seq observed complete by this rank
  std::atomic<int64_t> last_op{-1};  // CollectiveOp of the last issued, -1: none
};

// Creates and registers the progress record of a new group over global_ranks (assigning its id).
std::shared_ptr<GroupProgress> register_group(const std::vector<int>& global_ranks);
// Returns the registered group with this id, or nullptr (not created here yet, or destroyed).
std::shared_ptr<GroupProgress> find_group(int64_t id);

}  // namespace dt::mpi
