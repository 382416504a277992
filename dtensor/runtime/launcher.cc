#include "dtensor/runtime/launcher.h"

#include <algorithm>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/core/error.h"
#include "dtensor/passes/buffer_planner.h"
#ifdef DTENSOR_WITH_MPI
#include "dtensor/comm/mpi/mpi_runtime.h"
#endif

namespace dt::runtime {

Backend parse_backend(std::string_view text) {
  if (text == "mpi") return Backend::mpi;
  if (text != "threads") DT_THROW(ValueError) << "unknown backend '" << text << "' (expected threads or mpi)";
  return Backend::threads;
}

std::string_view backend_name(Backend backend) { return backend == Backend::mpi ? "mpi" : "threads"; }

bool mpi_backend_available() {
#ifdef DTENSOR_WITH_MPI
  return true;
#else
  return false;
#endif
}

bool launched_by_mpirun() {
#ifdef DTENSOR_WITH_MPI
  return mpi::launched_by_mpi_launcher();
#else
  return false;
#endif
}

RankResult run_rank(const ir::Graph& program, const Bindings& bindings, ProcessGroup& world,
                    const LaunchOptions& options) {
  GroupMap groups = make_groups(program, world);
  Interpreter interp(program);
  if (options.node_hook) interp.set_node_hook(options.node_hook(world.rank()));
  interp.set_update_params_in_place(options.update_params_in_place);
  if (options.comm_arena && interp.arena_bytes() > 0) {
    if (options.arena)
      interp.set_comm_arena(options.arena, world.rank());
    else
      interp.set_comm_arena(std::make_shared<SymmetricArena>(1, interp.arena_bytes()), 0);
  }
  RankResult out;
  for (int i = 0; i < std::max(options.repeat, 1); ++i) {
    // Every rank starts its clock together: without the barrier a rank's time would include
    // waiting at its first collective for ranks whose threads or processes started later.
    world.barrier()->wait();
    if (options.before_run) {
      if (world.rank() == 0) options.before_run(i);
      world.barrier()->wait();
    }
    RunStats s;
    out.outputs = interp.run(bindings, groups, &s);
    if (i == 0 || s.seconds < out.stats.seconds) out.stats = s;
  }
  return out;
}

void run_world(Backend backend, int ranks, const std::function<void(ProcessGroup& world)>& fn,
               const CommOptions& comm) {
  if (backend == Backend::threads) {
    run_ranks(ranks, fn, comm);
    return;
  }
#ifdef DTENSOR_WITH_MPI
  mpi::run_mpi(
      [&](ProcessGroup& world) {
        if (world.size() == 1 && ranks > 1 && !mpi::launched_by_mpi_launcher())
          DT_THROW(ValueError) << "--backend mpi runs one process per rank under mpirun: start it with mpirun -np "
                               << ranks << " (this process was not started by mpirun)";
        if (world.size() != ranks)
          DT_THROW(ValueError) << "mpirun started " << world.size() << (world.size() == 1 ? " process" : " processes")
                               << " but the mesh has " << ranks << (ranks == 1 ? " rank" : " ranks")
                               << ": run with mpirun -np " << ranks;
        fn(world);
      },
      comm);
#else
  DT_THROW(ValueError) << "backend mpi requested for " << ranks
                       << " ranks, but this dtensor was built without Open MPI (DTENSOR_WITH_MPI off)";
#endif
}

std::vector<RankResult> launch(const std::vector<const ir::Graph*>& programs, const std::vector<Bindings>& bindings,
                               const LaunchOptions& options) {
  if (programs.size() != bindings.size())
    DT_THROW(ValueError) << programs.size() << " programs but " << bindings.size() << " binding sets";
  if (programs.empty()) DT_THROW(ValueError) << "launch needs at least one program";
  std::vector<RankResult> results(programs.size());
  LaunchOptions rank_options = options;
  // One arena for all ranks when their programs agree on the offsets (plan_symmetric_comm_buffers);
  // otherwise (ranks of different groups issue different collectives) each rank gets its own.
  if (options.comm_arena && !options.arena && passes::same_arena_layout(programs)) {
    size_t bytes = 0;
    for (const ir::Graph* p : programs) bytes = std::max(bytes, passes::check_comm_buffer_plan(*p));
    if (bytes > 0) rank_options.arena = std::make_shared<SymmetricArena>(int(programs.size()), bytes);
  }
  run_ranks(
      int(programs.size()),
      [&](ProcessGroup& world) {
        const size_t r = size_t(world.rank());
        results[r] = run_rank(*programs[r], bindings[r], world, rank_options);
      },
      options.comm);
  return results;
}

}  // namespace dt::runtime
