// The pass-pipeline flags shared by `dtensor compile` and `dtensor run`: --passes,
// --print-after-all, --bucket-cap-mb, --one-shot-threshold, --memory-budget.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "dtensor/ir/graph.h"

namespace dt::tools {

struct PassCliOptions {
  std::string passes = "default";  // default | none | a,b,c
  std::string bucket_cap_mb = "4";
  size_t one_shot_threshold = 256 * 1024;
  size_t memory_budget = 0;  // bytes; 0: the passes' default (see PassOptions)
  bool print_after_all = false;
};

// Adds the flags to `cmd` (--print-after-all only when `with_print` is set).
void add_pass_options(CLI::App* cmd, PassCliOptions& opt, bool with_print);
// Runs the pipeline on `program` (printing the IR after each pass to stderr when asked; the
// header names the rank). Throws ValueError for unknown pass names.
void run_pass_pipeline(ir::Graph& program, const PassCliOptions& opt, int rank);
// Runs the pipeline on every rank's program; when it placed comm buffers (plan-comm-buffers),
// plans them again over all the programs together so that each buffer has the same arena offset
// on every rank (uneven shards make per-rank plans differ), when the programs' buffers correspond.
// programs[i] is rank ranks[i]'s.
void run_pass_pipelines(std::vector<ir::Graph>& programs, const std::vector<int>& ranks, const PassCliOptions& opt);

}  // namespace dt::tools
