#include "tools/passes_cli.h"

#include <iostream>

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
  cmd->add_flag("--bucket-mixed-dtypes", opt.bucket_mixed_dtypes,
                "bucket all_gathers of different dtypes together (one byte buffer, pieces read back at their dtype)");
  cmd->add_option("--tp-overlap", opt.tp_overlap,
                  "split rowwise GEMMs into chunks whose all_reduce overlaps the next chunk: auto (cost model) | on | off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_option("--tp-overlap-chunks", opt.tp_overlap_chunks, "--tp-overlap: this many chunks (0: the cost model's)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--pass-log", opt.pass_log, "print the cost-model passes' decisions and their reasons (stderr)");
  cmd->add_flag("!--no-check-ranks", opt.check_ranks,
                "skip the proof that every process group's members issue the same collectives");
  if (with_print) cmd->add_flag("--print-after-all", opt.print_after_all, "print each rank's IR after every pass (stderr)");
}

const std::vector<std::string>& pass_flag_names() {
  static const std::vector<std::string> names = {"--passes", "--bucket-cap-mb", "--one-shot-threshold",
                                                 "--memory-budget", "--bucket-mixed-dtypes", "--tp-overlap",
                                                 "--tp-overlap-chunks", "--pass-log", "--no-check-ranks"};
  return names;
}

job::PassSettings pass_settings(const PassCliOptions& opt) {
  job::PassSettings s;
  s.pipeline = opt.passes;
  s.options.bucket_cap_mb = passes::parse_bucket_caps(opt.bucket_cap_mb);
  s.options.one_shot_threshold_bytes = opt.one_shot_threshold;
  s.options.memory_budget_bytes = opt.memory_budget;
  s.options.bucket_mixed_dtypes = opt.bucket_mixed_dtypes;
  using Mode = passes::PassOptions::TpOverlap;
  s.options.tp_overlap = opt.tp_overlap == "on" ? Mode::on : opt.tp_overlap == "off" ? Mode::off : Mode::automatic;
  s.options.tp_overlap_chunks = opt.tp_overlap_chunks;
  if (opt.pass_log) s.options.log = &std::cerr;
  s.check_ranks = opt.check_ranks;
  if (opt.print_after_all) s.print_after = &std::cerr;
  return s;
}

}  // namespace dt::tools
