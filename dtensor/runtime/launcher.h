// Runs one program per rank: on the threads backend rank r runs programs[r] with bindings[r]
// (its parameter shards and data inputs) on its own thread, with the process groups its program
// declares; on the mpi backend (one rank per process, under mpirun) each process runs only its
// own rank. launch() returns every rank's outputs and run statistics; the first failure on any
// rank is rethrown after every rank has stopped (a failed rank makes the others' collectives fail
// within the timeout, so nothing hangs).
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "dtensor/comm/process_group.h"
#include "dtensor/ir/graph.h"
#include "dtensor/runtime/interpreter.h"

namespace dt::runtime {

struct RankResult {
  std::vector<Tensor> outputs;
  RunStats stats;  // of the fastest repetition
};

// Where the ranks run: threads of this process, or one Open MPI process per rank.
enum class Backend { threads, mpi };

// Parses "threads" | "mpi"; throws ValueError naming the text otherwise.
Backend parse_backend(std::string_view text);
std::string_view backend_name(Backend backend);
// Returns true when this binary was built with the mpi backend (DTENSOR_WITH_MPI).
bool mpi_backend_available();
// Returns true when this process was started by mpirun or another MPI launcher (always false
// without the mpi backend): the mpi backend is then the default.
bool launched_by_mpirun();

struct LaunchOptions {
  int repeat = 1;  // runs per rank (the stats keep the fastest)
  CommOptions comm;
  // When set, rank r's interpreter gets node_hook(r) (traces: runtime/trace.h).
  std::function<NodeHook(int rank)> node_hook;
  // Place the programs' planned comm buffers (arena_offset) in a symmetric arena: launch()
  // shares one arena among the rank threads, sized for the largest plan, when every program
  // places the same offsets (passes::same_arena_layout); run_rank() without `arena` gives its rank
  // a private one. Off: buffers are allocated as usual.
  bool comm_arena = true;
  std::shared_ptr<SymmetricArena> arena;  // set by launch(); rank r uses region r
  // The ranks' parameter bindings are handed over: in-place ops (optimizer updates) write into
  // them (Interpreter::set_update_params_in_place; every repetition updates them again).
  bool update_params_in_place = false;
  // When set, rank 0 calls it before each run, while every rank waits between two barriers (so no
  // rank is still in the previous run nor yet in this one): a profiler takes its process-usage
  // snapshot at run 1, after one warm-up run of the same interpreters (which packs their weights).
  std::function<void(int run)> before_run;
};

// Runs programs[r] on global rank r for r in [0, programs.size()) on the threads backend.
std::vector<RankResult> launch(const std::vector<const ir::Graph*>& programs, const std::vector<Bindings>& bindings,
                               const LaunchOptions& options = {});

// Runs `program` with `bindings` on the caller's rank of `world` (options.repeat times, keeping
// the fastest stats); every rank of world must call it with its own program.
RankResult run_rank(const ir::Graph& program, const Bindings& bindings, ProcessGroup& world,
                    const LaunchOptions& options = {});

// Runs fn(world) on every rank of a world of `ranks` ranks: threads → run_ranks (one thread per
// rank), mpi → run_mpi (this process's rank only; the job's -np must equal `ranks`, else a
// ValueError naming both). On mpi a throwing fn aborts the whole job with exit code 2, and MPI is
// finalized before this returns, so fn must do all communication (gathering results) itself.
// Throws ValueError for mpi in a build without DTENSOR_WITH_MPI.
void run_world(Backend backend, int ranks, const std::function<void(ProcessGroup& world)>& fn,
               const CommOptions& comm = {});

}  // namespace dt::runtime
