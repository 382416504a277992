// The multi-rank path of `dtensor run` (--mesh / --plan): compile with the plan, shard the weights
// and inputs, run every rank's program (threads backend: all ranks in this process; mpi backend:
// this process's rank only, under mpirun), assemble the outputs and compare them with --expect
// (or with a single-device run of the same model when no --expect is given).
#pragma once

#include <string>

#include "dtensor/comm/process_group.h"
#include "dtensor/runtime/launcher.h"
#include "tools/passes_cli.h"

namespace dt::tools {

struct DistributedRunOptions {
  std::string model, weights, inputs, expect, mesh = "1", plan;
  bool json = false;
  double rtol = 1e-4, atol = 1e-5;
  int repeat = 1;
  PassCliOptions passes;  // pipeline run on every rank's program before launch
  std::string trace;     // Chrome trace JSON (every --repeat run), one track per rank
  runtime::Backend backend = runtime::Backend::threads;
  CommOptions comm;  // --timeout-s, --check-collectives
  bool comm_arena = true;  // place planned comm buffers in the symmetric arena (--no-comm-arena: off)
  std::string save_outputs;  // write the assembled outputs, by name, to this safetensors file
};

// Runs and prints the report (on the mpi backend: rank 0 prints, every rank returns the same
// result); returns false when the comparison failed.
bool run_distributed(const DistributedRunOptions& options);

}  // namespace dt::tools
