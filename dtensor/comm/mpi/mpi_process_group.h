// ProcessGroup of the mpi backend: one MPI communicator per group, non-blocking MPI collectives.
//
// The communicator's rank order is the order of the given global ranks (MPI_Group_incl keeps it),
// so group index = position in the list, as the ProcessGroup contract requires: in group
// [6, 2, 4], global rank 2 is index 1 and receives chunk 1 of a reduce_scatter. Every call posts
// one non-blocking MPI operation (MPI_Iallreduce, MPI_Iallgather, MPI_Ireduce_scatter_block,
// MPI_Ialltoallv, MPI_Ibcast, MPI_Isend/MPI_Irecv, MPI_Ibarrier) and returns an MpiWork.
// Collectives are numbered per group (#1, #2, ...) for error messages, the flight recorder and the
// peer-state agent; with CommOptions::check_collectives a descriptor exchange on a duplicate
// communicator precedes each collective (collective_check.h).
//
// all_reduce has two paths, chosen per group when it is created and by size per call:
//  * `mpi`: MPI_Iallreduce (any group, any host);
//  * `shm`: when every member runs on this host, the one-shot / two-shot algorithms over an
//    MPI-3 shared window (all_reduce_shared.h; the algorithm as requested, or as
//    choose_all_reduce_algo picks it); it runs at issue time and returns a completed Work (or one
//    whose wait() rethrows the failure).
// DTENSOR_MPI_ALL_REDUCE=mpi|shm|auto selects (auto, the default: shm when the group is on one
// host). The choice is the same on every member because it depends only on the group and count.
#pragma once

#include <mpi.h>

#include <memory>

#include "dtensor/comm/mpi/group_progress.h"
#include "dtensor/comm/mpi/shared_arena.h"
#include "dtensor/comm/mpi/mpi_work.h"
#include "dtensor/comm/process_group_base.h"

namespace dt::mpi {

class MpiProcessGroup final : public ProcessGroupBase {
 public:
  // Takes ownership of comm, whose rank order must match global_ranks.
  MpiProcessGroup(MPI_Comm comm, std::vector<int> global_ranks, CommOptions options);
  ~MpiProcessGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return int(global_ranks_.size()); }
  const std::vector<int>& global_ranks() const override { return global_ranks_; }
  std::string backend_name() const override { return "mpi"; }
  const CommOptions& options() const override { return options_; }

  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& global_ranks) override;

  MPI_Comm comm() const { return comm_; }
  // Returns "mpi:iallreduce", "shm_one_shot" or "shm_two_shot": the all_reduce path for nbytes
  // (the shm algorithm as choose_all_reduce_algo picks it for an `automatic` request).
  std::string all_reduce_algorithm(size_t nbytes) const;
  int64_t group_id() const { return progress_->id; }

 private:
  // Prints where the group runs (one host or several) when DTENSOR_MPI_LOG_GROUPS=1.
  void log_group_placement(bool one_host) const;
  WorkPtr issue(const CollectiveDesc& desc, const void* in, void* out) override;
  // One per op kind; desc is checked (ProcessGroupBase).
  WorkPtr issue_all_reduce(const CollectiveDesc& desc, void* buf);
  WorkPtr issue_all_gather(const CollectiveDesc& desc, const void* in, void* out);
  WorkPtr issue_reduce_scatter(const CollectiveDesc& desc, const void* in, void* out);
  WorkPtr issue_all_to_all(const CollectiveDesc& desc, const void* in, void* out);
  WorkPtr issue_broadcast(const CollectiveDesc& desc, void* buf);
  WorkPtr issue_point_to_point(const CollectiveDesc& desc, const void* in, void* out);
  WorkPtr issue_barrier(const CollectiveDesc& desc);
  // True when an all_reduce of nbytes runs on the shared arena (else MPI_Iallreduce).
  bool all_reduce_on_arena(size_t nbytes) const;
  // Numbers the collective, records it in the flight recorder and, in check mode, verifies that
  // every member issues the same one. Point-to-point calls pass collective = false.
  WorkContext begin(CollectiveDesc desc, bool collective);
  // Wraps the posted requests (or an MPI error code) into a Work.
  WorkPtr finish(WorkContext context, int rc, std::vector<MPI_Request> requests,
                 std::function<void()> on_complete = nullptr, std::shared_ptr<void> keepalive = nullptr);

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm check_comm_ = MPI_COMM_NULL;  // duplicate of comm_, only with check_collectives
  std::vector<int> global_ranks_;
  CommOptions options_;
  int rank_ = 0;
  std::shared_ptr<GroupProgress> progress_;
  // Returns a buffer of at least `bytes` for one in-flight operation: the cached one when no
  // earlier operation still holds it (no page faults on the repeat calls of a training step).
  std::shared_ptr<std::vector<std::byte>> scratch(size_t bytes);

  std::shared_ptr<std::vector<std::byte>> scratch_;
  MPI_Comm node_comm_ = MPI_COMM_NULL;  // comm_ again when every member shares this host
  std::unique_ptr<SharedArena> arena_;  // created with node_comm_, grown on first use
};

}  // namespace dt::mpi
