// The multi-rank path of `dtensor run` (--mesh / --plan): compile with the plan, shard the weights
// and inputs, run every rank's program on the threads backend, assemble the outputs and compare
// them with --expect (or with a single-device run of the same model when no --expect is given).
#pragma once

#include <string>

#include "tools/passes_cli.h"

namespace dt::tools {

struct DistributedRunOptions {
  std::string model, weights, inputs, expect, mesh = "1", plan;
  bool json = false;
  double rtol = 1e-4, atol = 1e-5;
  int repeat = 1;
  PassCliOptions passes;  // pipeline run on every rank's program before launch
  std::string trace;     // Chrome trace JSON (every --repeat run), one track per rank
};

// Runs and prints the report; returns false when the comparison failed.
bool run_distributed(const DistributedRunOptions& options);

}  // namespace dt::tools
