#include "tools/mesh_options.h"

#include <fmt/format.h>

#ifdef DTENSOR_WITH_MPI
#include "dtensor/comm/mpi/mpi_runtime.h"
#endif

namespace dt::tools {

void add_mesh_options(CLI::App* cmd, MeshCliOptions& opt, const char* what) {
  cmd->add_option("--mesh", opt.mesh, fmt::format("{} sharded on this device mesh (e.g. 4, 2x2)", what));
  cmd->add_option("--plan", opt.plan, "parallel plan for --mesh (docs/plans.md)");
  cmd->add_option("--backend", opt.backend,
                  "backend of a --mesh run: threads (one thread per rank) or mpi (one process per rank, under "
                  "mpirun -np <mesh size>); default: mpi when started by mpirun, else threads")
      ->check(CLI::IsMember({"threads", "mpi"}));
}

bool under_mpirun() {
#ifdef DTENSOR_WITH_MPI
  return mpi::launched_by_mpi_launcher();
#else
  return false;
#endif
}

runtime::Backend chosen_backend(const MeshCliOptions& opt) {
  if (!opt.backend.empty()) return runtime::parse_backend(opt.backend);
  return under_mpirun() ? runtime::Backend::mpi : runtime::Backend::threads;
}

}  // namespace dt::tools
