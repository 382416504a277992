// Work handle of the mpi backend: one or more MPI requests of a non-blocking collective.
//
// wait() polls MPI_Testall (Open MPI progresses non-blocking collectives only inside MPI calls,
// so a sleeping waiter would stall the transfer): it spins, yielding the CPU so that
// oversubscribed runs (`mpirun --oversubscribe`) still make progress, for 20 ms, then polls with
// sleeps of at most 1 ms, so a rank waiting on a stalled peer does not burn a core
// (dtensor/comm/backoff.h). When the timeout
// expires, it asks the peers' agents how far they are (peer_state_agent.h) and throws CommError
// naming the collective, its sequence number, the group and the ranks that did not arrive; the
// failure is sticky (later waits rethrow it) and marks the process as faulted, so MpiRuntime aborts
// instead of hanging in MPI_Finalize.
#pragma once

#include <mpi.h>

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "dtensor/comm/collective_desc.h"
#include "dtensor/comm/mpi/group_progress.h"
#include "dtensor/comm/process_group.h"

namespace dt::mpi {

// What a failure message names about one collective.
struct WorkContext {
  std::shared_ptr<GroupProgress> group;
  CollectiveDesc desc;
  int64_t seq = 0;  // the group's collective number; 0 for point-to-point
  int my_global_rank = 0;
  uint64_t flight_id = 0;  // entry in the process's flight recorder
};

// "<collective> #<seq> on group [...] failed on rank <r>: <MPI's text for rc>".
std::string failure_message(const WorkContext& c, int rc);

class MpiWork final : public Work {
 public:
  // finish runs once after the requests complete (e.g. the division of avg); keepalive holds
  // buffers MPI reads until completion (all_to_all count arrays).
  MpiWork(WorkContext context, std::vector<MPI_Request> requests, std::function<void()> finish,
          Duration default_timeout, std::shared_ptr<void> keepalive = nullptr);
  ~MpiWork() override;

  void wait() override { wait(default_timeout_); }
  void wait(Duration timeout) override;
  bool is_completed() override;

  const WorkContext& context() const { return context_; }
  // Makes the work failed with a CommError(message) that wait() rethrows (for collectives that
  // ran synchronously at issue time, like the shared-memory all_reduce).
  void set_failed(const std::string& message);

 private:
  // Tests the requests once; runs finish on completion. Throws CommError on an MPI error.
  bool poll_locked();
  // Records the failure and throws it; with `announce`, tells every process first (announce_fault).
  [[noreturn]] void fail_locked(const std::string& message, bool announce = false);

  WorkContext context_;
  std::vector<MPI_Request> requests_;
  std::function<void()> finish_;
  Duration default_timeout_;
  std::shared_ptr<void> keepalive_;
  std::mutex mu_;
  bool done_ = false;
  std::exception_ptr error_;
};

// Waits for raw requests with the same timeout / missing-rank message as MpiWork (used by the
// --check-collectives descriptor exchange, which must not hang either); throws CommError without
// recording it (the caller calls record_failure).
void wait_requests(const WorkContext& context, std::vector<MPI_Request>& requests, Duration timeout);

// Marks the process as faulted, records the failure in the flight recorder, dumps it when
// $DTENSOR_FLIGHT_RECORDER_DIR is set, and returns message (with the dump path appended).
std::string record_failure(const WorkContext& context, std::string message);

// How long a process that announces a fault waits for the others' acknowledgements (a dead one
// never sends one).
inline constexpr Duration kAnnounceGrace{2000};

// Returns the CommError message for a collective that timed out, after querying the peers (for a
// transfer: whether the peer process lives).
std::string timeout_message(const WorkContext& context, Duration timeout);

}  // namespace dt::mpi
