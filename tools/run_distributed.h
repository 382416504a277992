// `dtensor run`'s options (one struct, filled by the CLI flags directly) and its multi-rank path
// (--mesh / --plan): compile with the plan, shard the weights and inputs, run every rank's program
// (threads backend: all ranks in this process; mpi backend: this process's rank only, under
// mpirun), assemble the outputs and compare them with --expect (or with a single-device run of the
// same model when no --expect is given).
#pragma once

#include <string>

#include "dtensor/comm/process_group.h"
#include "dtensor/runtime/launcher.h"
#include "tools/load_program.h"
#include "tools/mesh_options.h"
#include "tools/passes_cli.h"

namespace dt::tools {

struct RunOptions {
  ModelFiles files;     // MODEL, --weights (a file, or with --mesh a shard-weights directory), --inputs
  MeshCliOptions mesh;  // --mesh, --plan, --backend; none: a single-device run
  std::string expect;   // safetensors file of expected outputs, by name
  std::string save_outputs;  // FILE.safetensors of full outputs, or with `sharded_outputs` a directory
  bool sharded_outputs = false;  // --sharded: save each rank's local outputs (DIR/rank<r>.safetensors)
  std::string trace;    // Chrome trace JSON (every --repeat run), one track per rank
  bool json = false;
  double rtol = 1e-5, atol = 1e-5;
  int repeat = 1;
  PassCliOptions passes;  // pipeline run on every rank's program before launch (--mesh runs)
  CommOptions comm;       // --timeout-s, --check-collectives
  bool comm_arena = true;  // place planned comm buffers in the symmetric arena (--no-comm-arena: off)
};

// Runs sharded and prints the report (on the mpi backend: rank 0 prints, every rank returns the
// same result); returns false when the comparison failed.
bool run_distributed(const RunOptions& options);

}  // namespace dt::tools
