// One rank's end of one group: assigns sequence numbers and runs the rank's collectives of that
// group, in issue order, on its own progress thread.
//
// Why a progress thread per (rank, group): a call must return a Work before the peers arrive so
// the rank can compute while the collective waits for peers and moves data (the interpreter issues
// collectives early and waits on them late). Running the rank's collectives of one group in issue
// order on one thread gives stream semantics: collective k+1 starts only after k finished on this
// rank, so reusing a buffer across back-to-back collectives is safe. Different groups progress
// independently (like one stream per process group), so a rank may have a collective in flight on
// its tp group while it issues one on its dp group.
//
// Buffers must stay alive until the Work completes. The Work handle enforces it where it can: its
// destructor waits for completion, except while an exception unwinds the issuing thread; then it
// abandons a collective that has not started yet (peers fail at once with CommError naming this
// rank, and nobody ever reads the buffers being freed) and waits for one that has started.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "dtensor/comm/threads/world.h"

namespace dt::threads {

// Completion state shared by the Work handle and the progress thread.
class WorkState {
 public:
  WorkState(RendezvousKey key, std::vector<int> members, int rank, std::string label)
      : key(std::move(key)), members(std::move(members)), rank(rank), label(std::move(label)) {}

  // Marks the work done; an empty error means success.
  void finish(std::string error);
  bool done() const;
  // Waits until done or `deadline`; returns whether it is done.
  bool wait_until(Clock::time_point deadline);
  void wait_forever();
  // Returns the failure message ("" on success); valid once done.
  std::string error() const;

  const RendezvousKey key;
  const std::vector<int> members;  // global ranks of the participants
  const int rank;                  // the issuing rank (global)
  const std::string label;         // "all_reduce #3 on group [0, 1]"

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string error_;
};

class ThreadsWork : public Work {
 public:
  ThreadsWork(World& world, std::shared_ptr<WorkState> state) : world_(world), state_(std::move(state)) {}
  ~ThreadsWork() override;
  void wait() override;
  void wait(Duration timeout) override;
  bool is_completed() override { return state_->done(); }

 private:
  void throw_if_failed();
  World& world_;
  std::shared_ptr<WorkState> state_;
};

class Endpoint {
 public:
  Endpoint(World& world, int group_id, std::vector<int> ranks, int index);
  ~Endpoint();  // drains
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  World& world() { return world_; }
  const std::vector<int>& ranks() const { return ranks_; }
  int index() const { return index_; }
  int global_rank() const { return ranks_[size_t(index_)]; }

  // Queues one collective (desc.op != send/recv) or point-to-point op and returns its Work.
  // `in`/`out` are the caller's buffers (see ProcessGroup for each op's meaning).
  WorkPtr submit(const CollectiveDesc& desc, const void* in, void* out);
  // Runs the queued work to the end, then stops the progress thread; later submits throw.
  void drain();

 private:
  struct Task {
    std::shared_ptr<WorkState> state;
    Participant me;
    int index = 0;  // my participant index
    uint64_t record_id = 0;
  };

  void run();
  void execute(Task& task);

  World& world_;
  const int group_id_;
  const std::vector<int> ranks_;
  const int index_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  bool drained_ = false;
  int64_t next_seq_ = 1;
  std::map<int, int64_t> next_send_seq_, next_recv_seq_;  // per peer index
  std::thread thread_;
  std::vector<std::byte> scratch_;  // progress thread only
};

}  // namespace dt::threads
