// The pass-pipeline flags shared by `dtensor compile` and `dtensor run`: --passes,
// --print-after-all, --bucket-cap-mb, --one-shot-threshold, --memory-budget,
// --no-check-ranks.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "dtensor/ir/graph.h"
#include "dtensor/ir/rank_orbits.h"
#include "dtensor/passes/rank_pipeline.h"

namespace dt::tools {

struct PassCliOptions {
  std::string passes = "default";  // default | none | a,b,c
  std::string bucket_cap_mb = "4";
  size_t one_shot_threshold = 256 * 1024;
  size_t memory_budget = 0;  // bytes; 0: the passes' default (see PassOptions)
  bool print_after_all = false;
  bool check_ranks = true;  // cross-rank consistency after partitioning and every pass
};

// Adds the flags to `cmd` (--print-after-all only when `with_print` is set).
void add_pass_options(CLI::App* cmd, PassCliOptions& opt, bool with_print);
// The flags add_pass_options declares, --print-after-all aside: what run and train refuse
// without --mesh (refuse_unless).
const std::vector<std::string>& pass_flag_names();
// Runs the pipeline on every rank's program, pass by pass, proving after partitioning and after
// each pass that every process group's members issue the same collectives (unless
// --no-check-ranks), then plans comm buffers across the programs (passes/rank_pipeline.h).
// programs[i] is rank ranks[i]'s. With the job's orbits (sharding::CompileOptions::orbits) the
// programs need only hold the wanted ranks' and the orbit representatives'.
passes::RankPipelineStats run_pass_pipelines(std::vector<ir::Graph>& programs, const std::vector<int>& ranks,
                                             const PassCliOptions& opt, const ir::RankOrbits* orbits = nullptr);

}  // namespace dt::tools
