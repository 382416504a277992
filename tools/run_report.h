// `dtensor run`'s options (one struct, filled by the CLI flags directly) and the report of a
// sharded run (--mesh / --plan): the outputs assembled by the job, compared with --expect (or with
// a single-device run of the same model when no --expect is given), saved, and printed as text or
// JSON. The run itself is the job library's (dtensor/job/job.h).
#pragma once

#include <string>

#include "dtensor/comm/process_group.h"
#include "dtensor/job/job.h"
#include "tools/load_program.h"
#include "tools/mesh_options.h"
#include "tools/passes_cli.h"

namespace dt::tools {

struct RunOptions {
  ModelFiles files;     // MODEL, --weights (a file, or with --mesh a checkpoint directory), --inputs
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

// Compares, saves and prints the result of a sharded run of `job` (on the mpi backend: called on
// every process inside the world; rank 0 prints). Returns whether every output matched.
bool report_sharded_run(const RunOptions& opt, const job::Job& job, const job::RunResult& result,
                        const job::Weights& weights, const job::TensorMap& inputs);

}  // namespace dt::tools
