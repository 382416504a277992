// The --mesh / --plan / --backend option block of the commands that shard a model (run, train,
// profile, compile, shard-weights), declared once, and the one rule choosing the backend.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "dtensor/job/job.h"
#include "dtensor/runtime/launcher.h"
#include "tools/passes_cli.h"

namespace dt::tools {

struct MeshCliOptions {
  std::string mesh = {}, plan = {};  // both empty: a single-device run
  std::string backend = {};          // threads | mpi; empty: mpi when started by mpirun, else threads
  bool sharded() const { return !mesh.empty() || !plan.empty(); }
};

// How a command declares the block. A command that always shards (compile, shard-weights) sets
// plan_required and gives MeshCliOptions::mesh a default ("1"), shown in the help; one that runs
// only on the threads backend (profile) leaves out --backend.
struct MeshOptionSpec {
  const char* what;  // the action the help names: "run sharded", "shard the weights", ...
  bool plan_required = false;
  bool with_backend = true;
};

// Adds --mesh, --plan and (unless spec.with_backend is false) --backend to `cmd`.
void add_mesh_options(CLI::App* cmd, MeshCliOptions& opt, const MeshOptionSpec& spec);
// Returns --backend, or mpi when this process was started by mpirun (threads otherwise).
runtime::Backend chosen_backend(const MeshCliOptions& opt);
// True when this process was started by mpirun (always false without Open MPI).
bool under_mpirun();
// Returns the job the flags describe: --mesh (default 1), the plan --plan names, the backend and
// the pass pipeline; the caller adds what else it has (comm options, the ranks to keep).
job::JobOptions job_options(const MeshCliOptions& mesh, const PassCliOptions& passes);

}  // namespace dt::tools
