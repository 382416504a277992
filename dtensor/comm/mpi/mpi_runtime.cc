#include "dtensor/comm/mpi/mpi_runtime.h"

#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "dtensor/comm/mpi/mpi_datatypes.h"
#include "dtensor/comm/mpi/mpi_process_group.h"
#include "dtensor/comm/mpi/peer_state_agent.h"

namespace dt::mpi {
namespace {

MpiRuntime* g_runtime = nullptr;
std::atomic<bool> g_fault{false};
bool g_need_lock = false;
std::mutex g_mpi_mutex;
FlightRecorder* g_recorder = nullptr;
PeerStateAgent* g_owned_agent = nullptr;

// Flushes the C and C++ streams, then aborts the whole MPI job with exit code `code`.
[[noreturn]] void abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace

MpiCallGuard::MpiCallGuard() {
  if (g_need_lock) {
    g_mpi_mutex.lock();
    locked_ = true;
  }
}

MpiCallGuard::~MpiCallGuard() {
  if (locked_) g_mpi_mutex.unlock();
}

std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string(text, len);
}

void check_mpi(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  DT_THROW(CommError) << what << " failed: " << mpi_error_text(rc);
}

void mark_comm_fault() { g_fault = true; }
bool comm_fault_happened() { return g_fault; }

FlightRecorder& flight_recorder() {
  if (g_recorder == nullptr) {
    // Leaked on purpose: records may be written while the process aborts.
    int rank = 0, initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    g_recorder = new FlightRecorder(rank);
  }
  return *g_recorder;
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  if (g_runtime != nullptr) DT_THROW(CommError) << "an MpiRuntime already exists in this process";
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) DT_THROW(CommError) << "MPI was initialized outside MpiRuntime";
  // Open MPI's libnbc runs every in-place MPI_Iallreduce as a binomial tree (reduce to one rank,
  // then broadcast: all the data crosses the root twice), and all_reduce is in place here; at
  // 64 MiB on 2 processes that is ~2x slower than MPI_Allreduce. Unless the user chose, select
  // reduce-scatter + allgather (libnbc falls back to a ring for counts below the process count).
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", /*overwrite=*/0);
  int provided = MPI_THREAD_SINGLE;
  int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  if (rc != MPI_SUCCESS) DT_THROW(CommError) << "MPI_Init_thread failed with code " << rc;
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    DT_THROW(CommError) << "the MPI library provides thread level " << provided
                        << ", the mpi backend needs at least MPI_THREAD_SERIALIZED";
  }
  thread_multiple_ = provided == MPI_THREAD_MULTIPLE;
  g_need_lock = !thread_multiple_;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  create_user_ops();
  flight_recorder();
  g_owned_agent = new PeerStateAgent();
  set_peer_state_agent(g_owned_agent);
  g_runtime = this;
}

MpiRuntime::~MpiRuntime() {
  g_runtime = nullptr;
  if (g_fault || std::uncaught_exceptions() > 0) {
    // MPI_Finalize would wait for peers that are dead, stuck, or waiting for us.
    abort_job(2);
  }
  set_peer_state_agent(nullptr);
  delete g_owned_agent;
  g_owned_agent = nullptr;
  free_user_ops();
  MPI_Finalize();
}

MpiRuntime* MpiRuntime::current() { return g_runtime; }

ProcessGroupPtr MpiRuntime::world(const CommOptions& options) {
  MPI_Comm comm = MPI_COMM_NULL;
  {
    MpiCallGuard guard;
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup of MPI_COMM_WORLD");
  }
  std::vector<int> ranks(world_size_);
  for (int i = 0; i < world_size_; ++i) ranks[i] = i;
  return std::make_shared<MpiProcessGroup>(comm, std::move(ranks), options);
}

ProcessGroupPtr init_mpi_world(const CommOptions& options) {
  if (g_runtime == nullptr) {
    static MpiRuntime* runtime = new MpiRuntime();
    // Finalize at exit (after main returns); aborts instead after a fault.
    std::atexit([] { delete runtime; });
  }
  return g_runtime->world(options);
}

void run_mpi(const std::function<void(ProcessGroup& world)>& fn, const CommOptions& options) {
  std::unique_ptr<MpiRuntime> owned;
  if (g_runtime == nullptr) owned = std::make_unique<MpiRuntime>();
  int rank = g_runtime->world_rank();
  try {
    ProcessGroupPtr world = g_runtime->world(options);
    fn(*world);
  } catch (const std::exception& e) {
    print_fault(rank, e.what());  // unless announce_fault printed it already
    abort_job(2);
  }
}

bool launched_by_mpi_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

}  // namespace dt::mpi
