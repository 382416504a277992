// A background thread per process that answers "how far is this group on your side?" queries,
// so a rank whose collective timed out can name the ranks that did not arrive.
//
// Protocol (on a private duplicate of MPI_COMM_WORLD, so it never matches application traffic):
// the asking rank posts a receive for the reply, then sends {group_id, nonce} with kQueryTag;
// the agent of the peer looks the group up in the registry (group_progress.h) and replies
// {knows_group, issued, completed, last_op} with tag reply_tag(nonce). A peer that does not
// reply within the grace period is reported as dead or unreachable: that is all one can know
// about it (a live process answers even while it computes, because the agent is its own thread).
// The same thread receives fault announcements (kFaultTag: the text of the fault), prints them on
// this process's stderr and acknowledges (kFaultAckTag), so every rank of a failed job says why.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "dtensor/comm/collective_desc.h"
#include "dtensor/comm/process_group.h"

namespace dt::mpi {

struct PeerAnswer {
  int global_rank = -1;
  bool answered = false;
  bool knows_group = false;  // false: the peer has not created this group (yet)
  int64_t issued = 0;
  int64_t completed = 0;
  int64_t last_op = -1;  // CollectiveOp, -1: none
};

class PeerStateAgent {
 public:
  // Duplicates MPI_COMM_WORLD (collective over all processes) and starts the thread.
  PeerStateAgent();
  // Stops the thread and frees the communicator (call before MPI_Finalize).
  ~PeerStateAgent();
  PeerStateAgent(const PeerStateAgent&) = delete;
  PeerStateAgent& operator=(const PeerStateAgent&) = delete;

  // Asks each peer (global ranks) for its progress on group_id; waits at most `grace`.
  std::vector<PeerAnswer> query(int64_t group_id, const std::vector<int>& peers, Duration grace);

  // Tells every other process of the job that this one hit a fault that ends the run (e.g. a
  // collective mismatch, a transfer whose peer died), so each prints "[rank r] dtensor: error:
  // <message> (reported by rank s)" at once instead of sitting in its own collectives until the
  // timeout (the caller then aborts the job, which would otherwise kill them without a word).
  // Prints this process's own line first (print_fault), then waits at most `grace` for every
  // process to acknowledge that it printed: once all have, every live process has said why, so
  // whichever aborts first silences nobody.
  void announce_fault(const std::string& message, Duration grace);

 private:
  void serve();
  // Receives, prints and acknowledges one pending fault announcement, if any.
  void serve_fault_announcement();

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> next_nonce_{0};
  std::thread thread_;
};

// Prints "[rank r] dtensor: error: <message><suffix>" on stderr and flushes, unless this process
// printed `message` already (or a message that `message` quotes: the interpreter prefixes the node
// that failed) or, with `only_if_silent`, printed any fault line; returns whether it
// printed. One lock orders the lines of the main thread and the agent's thread, so a process that
// acknowledges an announcement has its line out before the announcer may abort the job.
bool print_fault(int rank, const std::string& message, const std::string& suffix = "", bool only_if_silent = false);

// Returns the live agent (owned by MpiRuntime), or nullptr.
PeerStateAgent* peer_state_agent();
void set_peer_state_agent(PeerStateAgent* agent);

// Returns the part of a timeout message that says who did not arrive at collective `seq`, e.g.
// "ranks that did not arrive: [1, 3] (rank 1: alive, last issued collective #4 (all_gather); rank 3: no
// answer within 500 ms, process dead or unreachable)", and appends those global ranks to missing.
std::string describe_missing(int64_t seq, const std::vector<PeerAnswer>& answers, Duration grace,
                             std::vector<int>* missing);

}  // namespace dt::mpi
