#include "dtensor/comm/mpi/peer_state_agent.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <set>

#include "dtensor/comm/mpi/group_progress.h"
#include "dtensor/comm/mpi/mpi_runtime.h"

namespace dt::mpi {
namespace {

constexpr int kQueryTag = 1;
// Above the reply tags (2 .. 30001).
constexpr int kFaultTag = 30002;
constexpr int kFaultAckTag = 30003;
constexpr int kQueryWords = 2;  // group_id, nonce
constexpr int kReplyWords = 4;  // knows_group, issued, completed, last_op
constexpr auto kIdleSleep = std::chrono::milliseconds(1);

PeerStateAgent* g_agent = nullptr;

int reply_tag(int64_t nonce) { return 2 + int(nonce % 30000); }

}  // namespace

bool print_fault(int rank, const std::string& message, const std::string& suffix, bool only_if_silent) {
  static std::mutex mu;
  static std::set<std::string> printed;
  std::lock_guard lock(mu);
  // A message that quotes a printed one (the interpreter prefixes the node that failed) adds no cause.
  for (const std::string& p : printed)
    if (message.find(p) != std::string::npos) return false;
  if (only_if_silent && !printed.empty()) return false;
  printed.insert(message);
  std::fprintf(stderr, "[rank %d] dtensor: error: %s%s\n", rank, message.c_str(), suffix.c_str());
  std::fflush(stderr);
  return true;
}

PeerStateAgent* peer_state_agent() { return g_agent; }
void set_peer_state_agent(PeerStateAgent* agent) { g_agent = agent; }

PeerStateAgent::PeerStateAgent() {
  {
    MpiCallGuard guard;
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup for the peer-state agent");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }
  thread_ = std::thread([this] { serve(); });
}

PeerStateAgent::~PeerStateAgent() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  MpiCallGuard guard;
  MPI_Comm_free(&comm_);
}

void PeerStateAgent::serve() {
  int64_t query[kQueryWords];
  MPI_Request recv = MPI_REQUEST_NULL;
  std::vector<std::pair<MPI_Request, std::vector<int64_t>>> replies;  // in flight, with buffers
  auto post_receive = [&] {
    MpiCallGuard guard;
    MPI_Irecv(query, kQueryWords, MPI_INT64_T, MPI_ANY_SOURCE, kQueryTag, comm_, &recv);
  };
  post_receive();
  while (!stop_) {
    int arrived = 0;
    MPI_Status status;
    {
      MpiCallGuard guard;
      if (MPI_Test(&recv, &arrived, &status) != MPI_SUCCESS) arrived = 0;
      // Drop replies that completed; a reply to a dead asker stays pending, which is harmless.
      for (size_t i = 0; i < replies.size();) {
        int done = 0;
        MPI_Test(&replies[i].first, &done, MPI_STATUS_IGNORE);
        if (done) {
          if (i + 1 != replies.size()) replies[i] = std::move(replies.back());
          replies.pop_back();
        } else {
          ++i;
        }
      }
    }
    serve_fault_announcement();
    if (!arrived) {
      std::this_thread::sleep_for(kIdleSleep);
      continue;
    }
    std::vector<int64_t> reply(kReplyWords, 0);
    if (auto g = find_group(query[0])) {
      reply = {1, g->issued.load(), g->completed.load(), g->last_op.load()};
    }
    {
      MpiCallGuard guard;
      replies.emplace_back(MPI_REQUEST_NULL, std::move(reply));
      // Moving the vector keeps its heap buffer, so the pointer stays valid while in flight.
      MPI_Isend(replies.back().second.data(), kReplyWords, MPI_INT64_T, status.MPI_SOURCE,
                reply_tag(query[1]), comm_, &replies.back().first);
    }
    post_receive();
  }
  MpiCallGuard guard;
  MPI_Cancel(&recv);
  MPI_Wait(&recv, MPI_STATUS_IGNORE);
  for (auto& [req, buf] : replies) MPI_Request_free(&req);
}

void PeerStateAgent::serve_fault_announcement() {
  int pending = 0;
  MPI_Status status;
  std::string text;
  {
    MpiCallGuard guard;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kFaultTag, comm_, &pending, &status) != MPI_SUCCESS || !pending) return;
    int len = 0;
    MPI_Get_count(&status, MPI_CHAR, &len);
    text.resize(size_t(len));
    MPI_Recv(text.data(), len, MPI_CHAR, status.MPI_SOURCE, kFaultTag, comm_, MPI_STATUS_IGNORE);
  }
  int me = 0;
  MPI_Comm_rank(comm_, &me);
  // Once per process: several ranks may announce the same fault (every member detects a
  // mismatch), and a process that reported its own fault has said why already.
  print_fault(me, text, fmt::format(" (reported by rank {})", status.MPI_SOURCE), /*only_if_silent=*/true);
  static int ack = 1;
  MpiCallGuard guard;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Isend(&ack, 1, MPI_INT, status.MPI_SOURCE, kFaultAckTag, comm_, &request);
  MPI_Request_free(&request);
}

void PeerStateAgent::announce_fault(const std::string& message, Duration grace) {
  int me = 0, n = 1;
  MPI_Comm_rank(comm_, &me);
  MPI_Comm_size(comm_, &n);
  print_fault(me, message);
  // Leaked on purpose: the job aborts next, and an unanswered request to a dead peer stays pending.
  auto* text = new std::string(message);
  auto* acks = new std::vector<int>(size_t(n), 0);
  std::vector<MPI_Request> requests;
  {
    MpiCallGuard guard;
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      MPI_Request send = MPI_REQUEST_NULL, recv = MPI_REQUEST_NULL;
      MPI_Isend(text->data(), int(text->size()), MPI_CHAR, r, kFaultTag, comm_, &send);
      MPI_Request_free(&send);
      MPI_Irecv(&(*acks)[size_t(r)], 1, MPI_INT, r, kFaultAckTag, comm_, &recv);
      requests.push_back(recv);
    }
  }
  auto deadline = std::chrono::steady_clock::now() + grace;
  for (int done = 0; !done && std::chrono::steady_clock::now() < deadline;) {
    {
      MpiCallGuard guard;
      MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    }
    if (!done) std::this_thread::sleep_for(kIdleSleep);
  }
}

std::vector<PeerAnswer> PeerStateAgent::query(int64_t group_id, const std::vector<int>& peers,
                                              Duration grace) {
  size_t n = peers.size();
  std::vector<PeerAnswer> answers(n);
  std::vector<int64_t> queries(n * kQueryWords), replies(n * kReplyWords, 0);
  std::vector<MPI_Request> send_reqs(n, MPI_REQUEST_NULL), recv_reqs(n, MPI_REQUEST_NULL);
  {
    MpiCallGuard guard;
    for (size_t i = 0; i < n; ++i) {
      answers[i].global_rank = peers[i];
      int64_t nonce = next_nonce_++;
      queries[i * kQueryWords] = group_id;
      queries[i * kQueryWords + 1] = nonce;
      MPI_Irecv(&replies[i * kReplyWords], kReplyWords, MPI_INT64_T, peers[i], reply_tag(nonce),
                comm_, &recv_reqs[i]);
      MPI_Isend(&queries[i * kQueryWords], kQueryWords, MPI_INT64_T, peers[i], kQueryTag, comm_,
                &send_reqs[i]);
    }
  }
  auto deadline = std::chrono::steady_clock::now() + grace;
  size_t answered = 0;
  while (answered < n && std::chrono::steady_clock::now() < deadline) {
    {
      MpiCallGuard guard;
      for (size_t i = 0; i < n; ++i) {
        if (answers[i].answered) continue;
        int done = 0;
        if (MPI_Test(&recv_reqs[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) continue;
        const int64_t* r = &replies[i * kReplyWords];
        answers[i].answered = true;
        answers[i].knows_group = r[0] != 0;
        answers[i].issued = r[1];
        answers[i].completed = r[2];
        answers[i].last_op = r[3];
        ++answered;
      }
    }
    if (answered < n) std::this_thread::sleep_for(kIdleSleep);
  }
  // Unanswered requests are left pending on purpose: cancelling a send to a dead peer can block,
  // and a process that reaches this point is about to abort.
  if (answered == n) {
    MpiCallGuard guard;
    MPI_Waitall(int(n), send_reqs.data(), MPI_STATUSES_IGNORE);
  } else {
    // Keep the buffers alive for the pending requests: they are leaked with the process.
    new std::vector<int64_t>(std::move(queries));
    new std::vector<int64_t>(std::move(replies));
  }
  return answers;
}

std::string describe_missing(int64_t seq, const std::vector<PeerAnswer>& answers, Duration grace,
                             std::vector<int>* missing) {
  std::vector<std::string> details;
  for (const PeerAnswer& a : answers) {
    if (!a.answered) {
      missing->push_back(a.global_rank);
      details.push_back(fmt::format("rank {}: no answer within {} ms, process dead or unreachable",
                                    a.global_rank, grace.count()));
    } else if (!a.knows_group) {
      missing->push_back(a.global_rank);
      details.push_back(fmt::format("rank {}: alive, has not created this group", a.global_rank));
    } else if (a.issued < seq) {
      missing->push_back(a.global_rank);
      std::string last = a.last_op < 0 ? std::string("none")
                                        : std::string(collective_op_name(CollectiveOp(a.last_op)));
      details.push_back(fmt::format("rank {}: alive, last issued collective #{} ({})",
                                    a.global_rank, a.issued, last));
    }
  }
  if (missing->empty())
    return "every rank issued it (a peer failed during the collective or the transport is stuck)";
  std::string out = fmt::format("ranks that did not arrive: {} (", ranks_str(*missing));
  for (size_t i = 0; i < details.size(); ++i) out += (i ? "; " : "") + details[i];
  return out + ")";
}

}  // namespace dt::mpi
