// The `mpi` backend entry point: one rank per Open MPI process (`mpirun -np 4 dtensor ...`).
//
// MpiRuntime owns MPI for the life of the process: MPI_Init_thread (MPI_THREAD_MULTIPLE when the
// library provides it; otherwise every MPI call takes one process-wide lock), the user-defined
// bf16/f16 reduction ops, and the peer-state agent thread that answers "which collective are you
// at?" queries when a collective times out. Its destructor finalizes cleanly after a clean run,
// but after a communication fault (or while an exception unwinds) it calls MPI_Abort instead:
// MPI_Finalize would wait for peers that are dead or stuck, so a failed run would hang.
#pragma once

#include <functional>
#include <memory>
#include <mutex>

#include "dtensor/comm/flight_recorder.h"
#include "dtensor/comm/process_group.h"

namespace dt::mpi {

class MpiRuntime {
 public:
  // Initializes MPI (argc/argv may be null). Throws CommError if MPI is already initialized by
  // someone else or if a second MpiRuntime is created.
  explicit MpiRuntime(int* argc = nullptr, char*** argv = nullptr);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // True when MPI granted MPI_THREAD_MULTIPLE (no process-wide lock around MPI calls).
  bool thread_multiple() const { return thread_multiple_; }

  // Returns a new world ProcessGroup (its own duplicated communicator); collective over all
  // processes, so every process must call it the same number of times.
  ProcessGroupPtr world(const CommOptions& options = {});

  // Returns the live runtime, or nullptr.
  static MpiRuntime* current();

 private:
  int world_rank_ = 0;
  int world_size_ = 1;
  bool thread_multiple_ = false;
};

// Returns the world ProcessGroup of the live MpiRuntime, creating a process-lifetime runtime
// (finalized at exit) if there is none.
ProcessGroupPtr init_mpi_world(const CommOptions& options = {});

// Runs fn(world) on this process's rank of an mpirun job, mirroring run_ranks() of the threads
// backend. If fn throws, prints "[rank r] dtensor: error: ..." to stderr and calls MPI_Abort with
// exit code 2, so that the other processes stop instead of waiting for this one; returns
// normally (after MPI_Finalize) only when fn returned.
void run_mpi(const std::function<void(ProcessGroup& world)>& fn, const CommOptions& options = {});

// Returns true when this process was started by mpirun / an MPI launcher (OMPI_COMM_WORLD_SIZE,
// PMI_SIZE or PMIX_RANK in the environment), so `dtensor run` can pick the mpi backend.
bool launched_by_mpi_launcher();

// Returns this process's flight recorder (rank = world rank); dumped to
// $DTENSOR_FLIGHT_RECORDER_DIR/rank_<r>.json when a collective fails.
FlightRecorder& flight_recorder();

// Records that a collective failed: the runtime will abort instead of finalizing.
void mark_comm_fault();
bool comm_fault_happened();

// Serializes MPI calls when MPI_THREAD_MULTIPLE is not available (a no-op lock otherwise).
class MpiCallGuard {
 public:
  MpiCallGuard();
  ~MpiCallGuard();
  MpiCallGuard(const MpiCallGuard&) = delete;
  MpiCallGuard& operator=(const MpiCallGuard&) = delete;

 private:
  bool locked_ = false;
};

// MPI's text for the error code rc.
std::string mpi_error_text(int rc);
// Throws CommError "<what>: <MPI error string>" when rc is not MPI_SUCCESS.
void check_mpi(int rc, const std::string& what);

}  // namespace dt::mpi
