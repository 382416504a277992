// A symmetric arena across the processes of one host: an MPI-3 shared window
// (MPI_Win_allocate_shared) holding one segment per group member, every member mapping every
// segment, so a collective reads its peers' data with plain loads instead of messages.
//
// Segment layout (same on every member, hence "symmetric"):
//   [ counters: phase | done, one cache line each ][ data: capacity bytes ]
// The counters are monotonic per member: `phase` counts the barriers the member passed, `done` the
// operations it finished (no longer reading peers' segments). They are written only by their owner
// with release stores and read by peers with acquire loads, so "member j's counter reached k"
// means everything j wrote before it is visible. wait_for() polls them (spinning, then backing off to
// bounded sleeps: comm/backoff.h) with a timeout and names the members that lag, which is
// exactly the set that did not arrive.
//
// The data area grows on demand (collectively: every member asks for the same size, since it
// follows from the collective's count). Growth first agrees on the size with a non-blocking
// MPI_Iallreduce under the timeout, so the blocking MPI_Win_free / MPI_Win_allocate_shared only
// run once every member is known to be there.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/comm/process_group.h"

namespace dt::mpi {

enum class ArenaCounter : int { phase = 0, done = 1 };

class SharedArena;


// A wait on the arena's counters timed out; what() names the step and the members behind, e.g.
// "shared-memory phase 2: ranks [1] behind (rank 1 at 1)". The caller turns it into the
// backend's usual timeout message (collective, number, group, ranks that did not arrive).
class ArenaTimeout : public CommError {
  using CommError::CommError;
};

class SharedArena {
 public:
  // node_comm: the group's communicator, all of whose members share this host (same order).
  SharedArena(MPI_Comm node_comm, std::vector<int> global_ranks);
  ~SharedArena();
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;

  // Makes every segment's data area at least `bytes` long (collective; see the file comment).
  void reserve(size_t bytes, Duration timeout);
  size_t capacity() const { return capacity_; }

  std::byte* data(int member) const { return data_[size_t(member)]; }
  int size() const { return int(data_.size()); }
  int me() const { return me_; }

  // Returns the number of the next operation on this arena (1, 2, ...), same on every member.
  uint64_t next_op() { return ++op_; }
  // Returns the number of the next barrier on this arena (1, 2, ...), same on every member.
  uint64_t next_phase() { return ++phase_; }
  // Returns this member's private scratch memory (see PeerMemory::scratch).
  std::vector<std::byte>& scratch() { return scratch_; }
  // Publishes that I reached `op` at `counter` (release).
  void signal(ArenaCounter counter, uint64_t op);
  // Waits until every member reached `op` at `counter`; throws ArenaTimeout naming the lagging
  // members (global ranks) after `timeout`. Pokes MPI progress while spinning, so non-blocking MPI
  // collectives that peers are waiting on keep moving.
  void wait_for(ArenaCounter counter, uint64_t op, Duration timeout);

 private:
  void allocate(size_t capacity);
  void free_window();
  std::atomic_ref<uint64_t> counter_ref(int member, ArenaCounter counter) const;

  MPI_Comm comm_;
  std::vector<int> global_ranks_;
  int me_ = 0;
  MPI_Win win_ = MPI_WIN_NULL;
  size_t capacity_ = 0;
  std::vector<std::byte*> base_;  // segment starts
  std::vector<std::byte*> data_;  // data areas
  uint64_t op_ = 0;
  uint64_t phase_ = 0;
  std::vector<std::byte> scratch_;
};

}  // namespace dt::mpi
