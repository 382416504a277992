// The pass-pipeline flags shared by `dtensor compile`, `run` and `train`: --passes,
// --print-after-all, --bucket-cap-mb, --one-shot-threshold, --memory-budget,
// --tp-overlap, --tp-overlap-chunks, --pass-log, --no-check-ranks.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "dtensor/job/job.h"

namespace dt::tools {

struct PassCliOptions {
  std::string passes = "default";  // default | none | a,b,c
  std::string bucket_cap_mb = "4";
  size_t one_shot_threshold = 256 * 1024;
  size_t memory_budget = 0;  // bytes; 0: the passes' default (see PassOptions)
  bool bucket_mixed_dtypes = false;
  std::string tp_overlap = "auto";  // auto | on | off (PassOptions::tp_overlap)
  int tp_overlap_chunks = 0;
  bool pass_log = false;  // the cost-model passes' decisions, on stderr
  bool print_after_all = false;
  bool check_ranks = true;  // cross-rank consistency after partitioning and every pass
};

// Adds the flags to `cmd` (--print-after-all only when `with_print` is set).
void add_pass_options(CLI::App* cmd, PassCliOptions& opt, bool with_print);
// The flags add_pass_options declares, --print-after-all aside: what run and train refuse
// without --mesh (refuse_unless).
const std::vector<std::string>& pass_flag_names();
// Returns the job's pass settings from the flags (ValueError for a bad --bucket-cap-mb).
job::PassSettings pass_settings(const PassCliOptions& opt);

}  // namespace dt::tools
