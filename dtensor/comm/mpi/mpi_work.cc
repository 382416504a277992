#include "dtensor/comm/mpi/mpi_work.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "dtensor/comm/backoff.h"
#include "dtensor/comm/mpi/mpi_runtime.h"
#include "dtensor/comm/mpi/peer_state_agent.h"
#include "dtensor/comm/timeout.h"

namespace dt::mpi {
namespace {

using Clock = std::chrono::steady_clock;

// How long a timed-out rank waits for the peers' agents to answer.
Duration query_grace(Duration timeout) {
  return std::clamp(timeout / 4, Duration(200), Duration(2000));
}

// MPI_Testall under the MPI lock: sets `done`, returns MPI's error code.
int test_all(std::vector<MPI_Request>& requests, int& done) {
  MpiCallGuard guard;
  return MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
}

// Polls MPI_Testall until done or the deadline, spinning first and then backing off to bounded
// sleeps (dtensor/comm/backoff.h); returns false on timeout. Throws on MPI errors.
bool test_until(std::vector<MPI_Request>& requests, Clock::time_point deadline, const WorkContext& c) {
  Backoff backoff;
  for (;;) {
    int done = 0;
    if (int rc = test_all(requests, done); rc != MPI_SUCCESS)
      throw CommError(failure_message(c, rc), int64_t(c.seq), c.group->global_ranks);
    if (done) return true;
    // Every poll checks the deadline: once the back-off sleeps, 64 polls can take 64 ms, and
    // ranks that time out together must report together (the first to abort ends the job).
    if (Clock::now() >= deadline) return false;
    backoff.pause();
  }
}

}  // namespace

std::string record_failure(const WorkContext& c, std::string message) {
  mark_comm_fault();
  FlightRecorder& recorder = flight_recorder();
  recorder.record_failed(c.flight_id, message);
  std::string path = recorder.dump_to_env_dir();
  if (!path.empty()) message += fmt::format(" (flight recorder dumped to {})", path);
  return message;
}

std::string timeout_message(const WorkContext& c, Duration timeout) {
  const std::vector<int>& ranks = c.group->global_ranks;
  PeerStateAgent* agent = peer_state_agent();
  if (c.seq == 0) {
    // Point-to-point: the peer is the only rank involved; say whether it still lives.
    const int peer = ranks[size_t(c.desc.root)];
    std::string head = fmt::format("{} {} rank {} on group {} timed out after {} ms on rank {}", c.desc.str(),
                                   c.desc.op == CollectiveOp::send ? "to" : "from", peer, ranks_str(ranks),
                                   timeout.count(), c.my_global_rank);
    if (agent == nullptr) return head;
    const Duration grace = query_grace(timeout);
    if (agent->query(c.group->id, {peer}, grace)[0].answered)
      return head + fmt::format("; rank {}: alive, its matching {} not issued (it waits elsewhere)", peer,
                                c.desc.op == CollectiveOp::send ? "recv" : "send");
    return head + fmt::format("; rank {}: no answer within {} ms, process dead or unreachable", peer, grace.count());
  }
  std::string head = fmt::format("{} collective #{} on group {} timed out after {} ms on rank {}",
                                 c.desc.str(), c.seq, ranks_str(ranks), timeout.count(),
                                 c.my_global_rank);
  if (agent == nullptr) return head;
  std::vector<int> peers;
  for (int r : ranks)
    if (r != c.my_global_rank) peers.push_back(r);
  Duration grace = query_grace(timeout);
  std::vector<PeerAnswer> answers = agent->query(c.group->id, peers, grace);
  std::vector<int> missing;
  return head + "; " + describe_missing(c.seq, answers, grace, &missing);
}

void wait_requests(const WorkContext& c, std::vector<MPI_Request>& requests, Duration timeout) {
  if (test_until(requests, deadline_after(timeout), c)) return;
  throw CommError(timeout_message(c, timeout), int64_t(c.seq), c.group->global_ranks);
}

std::string failure_message(const WorkContext& c, int rc) {
  return fmt::format("{} collective #{} on group {} failed on rank {}: {}", c.desc.str(), c.seq,
                     ranks_str(c.group->global_ranks), c.my_global_rank, mpi_error_text(rc));
}

MpiWork::MpiWork(WorkContext context, std::vector<MPI_Request> requests, std::function<void()> finish,
                 Duration default_timeout, std::shared_ptr<void> keepalive)
    : context_(std::move(context)),
      requests_(std::move(requests)),
      finish_(std::move(finish)),
      default_timeout_(default_timeout),
      keepalive_(std::move(keepalive)) {}

MpiWork::~MpiWork() = default;

bool MpiWork::poll_locked() {
  if (done_) return true;
  int done = 0;
  if (int rc = test_all(requests_, done); rc != MPI_SUCCESS) fail_locked(failure_message(context_, rc));
  if (!done) return false;
  if (finish_) finish_();
  done_ = true;
  keepalive_.reset();
  if (context_.seq > 0) {
    int64_t seen = context_.group->completed.load();
    while (seen < context_.seq && !context_.group->completed.compare_exchange_weak(seen, context_.seq)) {
    }
  }
  flight_recorder().record_completed(context_.flight_id);
  return true;
}

void MpiWork::fail_locked(const std::string& message, bool announce) {
  const std::string full = record_failure(context_, message);
  if (PeerStateAgent* agent = peer_state_agent(); agent && announce) agent->announce_fault(full, kAnnounceGrace);
  // The fields go with the message (a Python caller reads e.sequence and e.ranks); sequence 0 is
  // a point-to-point transfer, not one collective of the group.
  error_ = std::make_exception_ptr(CommError(full, context_.seq > 0 ? int64_t(context_.seq) : -1,
                                             context_.group->global_ranks));
  std::rethrow_exception(error_);
}

void MpiWork::set_failed(const std::string& message) {
  std::lock_guard lock(mu_);
  error_ = std::make_exception_ptr(CommError(message));
}

void MpiWork::wait(Duration timeout) {
  std::lock_guard lock(mu_);
  if (error_) std::rethrow_exception(error_);
  if (done_) return;
  bool completed = false;
  try {
    completed = test_until(requests_, deadline_after(timeout), context_);
  } catch (const CommError& e) {
    fail_locked(e.what());
  }
  // A transfer that times out ends the run of ranks that wait on other transfers (a pipeline's
  // farther stages, alive but stuck behind this one): they are told before the job aborts.
  if (!completed) fail_locked(timeout_message(context_, timeout), /*announce=*/context_.seq == 0);
  poll_locked();  // requests are inactive now: runs finish and the bookkeeping
}

bool MpiWork::is_completed() {
  std::lock_guard lock(mu_);
  if (error_) return true;
  return poll_locked();
}

}  // namespace dt::mpi
