#include "tools/passes_cli.h"

#include <cstdio>
#include <iostream>

#include "dtensor/passes/buffer_planner.h"
#include "dtensor/passes/pass_manager.h"

namespace dt::tools {

void add_pass_options(CLI::App* cmd, PassCliOptions& opt, bool with_print) {
  cmd->add_option("--passes", opt.passes, "collective passes on each rank's program: default | none | a,b,c")
      ->capture_default_str();
  cmd->add_option("--bucket-cap-mb", opt.bucket_cap_mb, "bucket cap in MiB per bucket index, e.g. 1,4")
      ->capture_default_str();
  cmd->add_option("--one-shot-threshold", opt.one_shot_threshold, "all_reduce bytes at or under: blocking one-shot")
      ->capture_default_str();
  cmd->add_option("--memory-budget", opt.memory_budget,
                  "peak live bytes per rank that bucketing and overlap scheduling may reach (0: input peak + 2 x largest gather)")
      ->capture_default_str();
  if (with_print) cmd->add_flag("--print-after-all", opt.print_after_all, "print each rank's IR after every pass (stderr)");
}

void run_pass_pipeline(ir::Graph& program, const PassCliOptions& opt, int rank) {
  passes::PassOptions po;
  po.bucket_cap_mb = passes::parse_bucket_caps(opt.bucket_cap_mb);
  po.one_shot_threshold_bytes = opt.one_shot_threshold;
  po.memory_budget_bytes = opt.memory_budget;
  passes::PassManager pm;
  pm.add(passes::parse_pipeline(opt.passes, po));
  if (pm.size() == 0) return;
  if (opt.print_after_all) {
    std::cerr << "// ===== rank " << rank << " =====\n";
    pm.enable_print_after_all(std::cerr);
  }
  pm.run(program);
}

void run_pass_pipelines(std::vector<ir::Graph>& programs, const std::vector<int>& ranks, const PassCliOptions& opt) {
  bool placed = false;
  for (size_t i = 0; i < programs.size(); ++i) {
    run_pass_pipeline(programs[i], opt, ranks[i]);
    placed = placed || passes::check_comm_buffer_plan(programs[i]) > 0;
  }
  if (!placed || programs.size() < 2) return;
  std::vector<ir::Graph*> all;
  for (ir::Graph& g : programs) all.push_back(&g);
  // Programs whose comm buffers do not correspond (groups issuing different collectives) keep
  // their own plans; launch() then gives each rank a private arena.
  passes::plan_symmetric_comm_buffers(all);
}

}  // namespace dt::tools
