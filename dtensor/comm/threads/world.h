// Shared state of one `threads` run: the ranks' liveness, the groups, and the rendezvous of every
// collective in flight.
//
// A collective instance is identified by a RendezvousKey: (group, sequence number) for
// collectives, (group, src, dst, pair sequence number) for send/recv. Each participant's progress
// thread *arrives* at it by copying its Participant (descriptor + buffer pointers) into the
// Rendezvous and then waits until every member arrived. The Rendezvous state machine:
//
//   gathering --(last member arrives)--> started --(members run the algorithm, then leave)--> erased
//   gathering --(missing member failed or exited, timeout, abandon)--> aborted
//
// Invariants:
//  * A started collective is never aborted: once every member published its buffers, peers may be
//    reading them, so every member runs the algorithm to its final phase barrier. Failures only
//    abort collectives that are still gathering, and then no member has touched a peer's buffer.
//  * A member that arrives at (or is waiting in) an aborted rendezvous throws CommError with the
//    abort reason, so every member of a failed collective reports the same cause.
//  * A failed or exited rank never arrives again (its progress threads check under the same lock),
//    so "missing member is failed/exited" is final and waiting for it fails at once, not at the
//    timeout.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dtensor/comm/collective_desc.h"
#include "dtensor/comm/flight_recorder.h"
#include "dtensor/comm/process_group.h"

namespace dt::threads {

using Clock = std::chrono::steady_clock;

// One rank's contribution to one collective, copied into the rendezvous when it arrives.
struct Participant {
  CollectiveDesc desc;
  const void* in = nullptr;
  void* out = nullptr;
};

struct RendezvousKey {
  enum Kind : int { collective = 0, p2p = 1 };
  int group_id = 0;
  int kind = collective;
  int src = -1, dst = -1;  // p2p only: group-local indices
  int64_t seq = 0;
  auto operator<=>(const RendezvousKey&) const = default;
};

class Rendezvous {
 public:
  explicit Rendezvous(std::vector<int> members)
      : members_(std::move(members)), parts_(members_.size()), arrived_(members_.size(), false) {}

  int size() const { return int(members_.size()); }
  const std::vector<int>& members() const { return members_; }  // global ranks
  // Returns participant i's contribution; valid once the rendezvous started.
  const Participant& participant(int i) const { return parts_[size_t(i)]; }
  // Blocks until every participant called barrier() the same number of times; throws CommError
  // after `timeout` (only possible if a member's progress thread died: see the class invariants).
  void barrier(Duration timeout);

 private:
  friend class World;
  enum class State { gathering, started, aborted };

  std::vector<int> members_;
  std::vector<Participant> parts_;
  std::vector<bool> arrived_;
  int num_arrived_ = 0;
  int num_left_ = 0;
  State state_ = State::gathering;
  std::string abort_reason_;

  std::mutex barrier_mu_;
  std::condition_variable barrier_cv_;
  int barrier_count_ = 0;
  int64_t barrier_generation_ = 0;
};

class Endpoint;

class World {
 public:
  World(int size, CommOptions options);
  ~World();  // stops every endpoint's progress thread
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int size() const { return size_; }
  const CommOptions& options() const { return options_; }
  FlightRecorder& recorder(int rank) { return *recorders_[size_t(rank)]; }
  // Counts all_reduce runs per algorithm that ran (one per participant), so tests can check it.
  void count_all_reduce(AllReduceAlgo algo) { all_reduce_runs_[size_t(algo)].fetch_add(1); }
  int64_t all_reduce_runs(AllReduceAlgo algo) const { return all_reduce_runs_[size_t(algo)].load(); }

  // Returns rank's endpoint in the group of exactly `ranks` (in this order), creating the group
  // and the endpoint on first use. Validates ranks (ValueError).
  Endpoint& endpoint(const std::vector<int>& ranks, int global_rank);

  // Publishes `me` as participant `index` of `key` and blocks until every member arrived; returns
  // the started rendezvous. Throws CommError(reason) when the collective cannot start: a missing
  // member failed or exited, the deadline passed, the caller's rank failed, or it was aborted.
  std::shared_ptr<Rendezvous> arrive(const RendezvousKey& key, const std::vector<int>& members,
                                     int index, Participant me, Clock::time_point deadline);
  // Records that one participant is done with a rendezvous it arrived at (or failed to).
  void leave(const RendezvousKey& key, const std::shared_ptr<Rendezvous>& rv);
  // Aborts `key` with `reason` unless it already started; returns false if it started (then its
  // buffers are in use until it completes).
  bool abandon(const RendezvousKey& key, const std::vector<int>& members, const std::string& reason);

  // Marks a rank failed with the exception that ended it; wakes every waiter.
  void mark_failed(int rank, std::exception_ptr error);
  // Lets the rank's progress threads finish their queues, then stops them.
  void drain_rank(int rank);
  // Marks a rank whose function returned: it will issue nothing more.
  void mark_exited(int rank);
  // Returns the root-cause failure: the earliest that is not a CommError (a CommError is usually a
  // consequence of another rank's failure), else the earliest CommError; null when none failed.
  std::exception_ptr root_cause() const;

 private:
  enum class RankStatus { running, failed, exited };
  struct RankState {
    RankStatus status = RankStatus::running;
    std::string error;  // what() of the failure
    std::exception_ptr exception;
    int failure_order = -1;
  };

  std::shared_ptr<Rendezvous>& find_or_create(const RendezvousKey& key, const std::vector<int>& members);  // requires mu_
  void abort_locked(Rendezvous& rv, std::string reason);  // requires mu_
  // Returns why a gathering rendezvous can never start ("" if it still can); requires mu_.
  std::string blocked_reason_locked(const Rendezvous& rv, int self_rank) const;

  const int size_;
  const CommOptions options_;
  std::vector<std::unique_ptr<FlightRecorder>> recorders_;
  std::array<std::atomic<int64_t>, 3> all_reduce_runs_{};

  mutable std::mutex mu_;
  std::condition_variable cv_;  // signalled on arrivals, aborts and rank status changes
  std::vector<RankState> ranks_;
  int failures_ = 0;
  std::map<RendezvousKey, std::shared_ptr<Rendezvous>> rendezvous_;
  // Group ids by rank list and endpoints by (group id, global rank); guarded by endpoints_mu_
  // (not mu_: creating a thread while holding the rendezvous lock is needless contention).
  std::mutex endpoints_mu_;
  std::map<std::vector<int>, int> group_ids_;
  std::map<std::pair<int, int>, std::unique_ptr<Endpoint>> endpoints_;
};

}  // namespace dt::threads
