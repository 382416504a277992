#include "bench/bench_registry.h"

namespace dt::bench {

CLI::App* add_bench(CLI::App& bench, const std::string& name, const std::string& summary, bool& json,
                    std::function<void()> run) {
  CLI::App* cmd = bench.add_subcommand(name, summary);
  cmd->add_flag("--json", json, "print the results as JSON");
  cmd->callback(std::move(run));
  return cmd;
}

int& bench_exit_code() {
  static int code = 0;
  return code;
}

}  // namespace dt::bench
