// The --mesh / --plan / --backend option block of the commands that run a model sharded (run,
// train), declared once, and the one rule choosing the backend.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "dtensor/runtime/launcher.h"

namespace dt::tools {

struct MeshCliOptions {
  std::string mesh, plan;  // both empty: a single-device run
  std::string backend;     // threads | mpi; empty: mpi when started by mpirun, else threads
  bool sharded() const { return !mesh.empty() || !plan.empty(); }
};

// Adds --mesh, --plan and --backend to `cmd`; `what` names the action in the help ("run", "train").
void add_mesh_options(CLI::App* cmd, MeshCliOptions& opt, const char* what);
// Returns --backend, or mpi when this process was started by mpirun (threads otherwise).
runtime::Backend chosen_backend(const MeshCliOptions& opt);
// True when this process was started by mpirun (always false without Open MPI).
bool under_mpirun();

}  // namespace dt::tools
