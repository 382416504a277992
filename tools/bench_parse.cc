// `dtensor bench parse [--json]`: parse + verify time of generated mlp models (96 layers and a
// 10x larger one), to check the text front end stays well under 1 ms per thousand nodes and
// grows linearly.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "dtensor/ir/example_models.h"
#include "dtensor/ir/parser.h"
#include "dtensor/ir/printer.h"
#include "dtensor/ir/verifier.h"
#include "tools/command.h"

namespace dt::tools {
namespace {

struct ParseBenchOptions {
  bool json = false;
  std::vector<int64_t> layers{96, 960};
  int repeat = 5;
};

// Returns the fastest of `repeat` runs of fn, in seconds.
template <typename F>
double fastest(int repeat, F&& fn) {
  double best = 1e30;
  for (int i = 0; i < repeat; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

void run_bench(const ParseBenchOptions& opt) {
  nlohmann::json rows = nlohmann::json::array();
  if (!opt.json)
    std::printf("%-8s %8s %10s %10s %10s %10s %12s\n", "layers", "nodes", "bytes", "parse ms", "verify ms", "total ms",
                "us/node");
  for (int64_t layers : opt.layers) {
    ir::Graph g = ir::build_mlp({.hidden = 64, .layers = layers, .batch = 8});
    const std::string text = ir::print(g);
    size_t nodes = 0;
    double parse_s = fastest(opt.repeat, [&] { nodes = ir::parse(text, "bench.dt", {.verify = false}).nodes().size(); });
    ir::Graph parsed = ir::parse(text, "bench.dt", {.verify = false});
    double verify_s = fastest(opt.repeat, [&] { ir::verify(parsed); });
    double total_s = fastest(opt.repeat, [&] { ir::parse(text, "bench.dt"); });
    double us_per_node = total_s * 1e6 / double(nodes);
    rows.push_back({{"layers", layers},
                    {"nodes", nodes},
                    {"bytes", text.size()},
                    {"parse_ms", parse_s * 1e3},
                    {"verify_ms", verify_s * 1e3},
                    {"total_ms", total_s * 1e3},
                    {"us_per_node", us_per_node},
                    {"ms_per_1000_nodes", us_per_node}});
    if (!opt.json)
      std::printf("%-8lld %8zu %10zu %10.3f %10.3f %10.3f %12.3f\n", (long long)layers, nodes, text.size(), parse_s * 1e3,
                  verify_s * 1e3, total_s * 1e3, us_per_node);
  }
  if (opt.json) {
    std::printf("%s\n", nlohmann::json{{"bench", "parse"}, {"repeat", opt.repeat}, {"results", rows}}.dump(2).c_str());
  } else {
    const double a = rows.front()["us_per_node"], b = rows.back()["us_per_node"];
    std::printf("growth: %.2fx time per node from %lld to %lld layers (1.00 = linear); goal < 1 ms per 1000 nodes\n",
                b / a, (long long)opt.layers.front(), (long long)opt.layers.back());
  }
}

void setup(CLI::App& bench) {
  static ParseBenchOptions opt;
  CLI::App* cmd = bench.add_subcommand("parse", "Parse + verify time of generated mlp IR (96 and 960 layers)");
  cmd->add_flag("--json", opt.json, "print JSON");
  cmd->add_option("--layers", opt.layers, "model sizes in layers")->capture_default_str();
  cmd->add_option("--repeat", opt.repeat, "repetitions (the fastest is reported)")->capture_default_str();
  cmd->callback([] { run_bench(opt); });
}

BenchRegistrar reg("parse", setup);

}  // namespace
}  // namespace dt::tools
