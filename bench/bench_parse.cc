// `dtensor bench parse [--json]`: parse + verify time of generated mlp models (96 layers and a
// 10x larger one), to check the text front end stays well under 1 ms per thousand nodes and
// grows linearly.
#include <fmt/format.h>

#include <time.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "dtensor/ir/example_models.h"
#include "dtensor/ir/parser.h"
#include "dtensor/ir/printer.h"
#include "dtensor/ir/verifier.h"
#include "bench/bench_registry.h"

namespace dt::bench {
namespace {

struct ParseBenchOptions {
  bool json = false;
  std::vector<int64_t> layers{96, 960};
  int repeat = 5;
};

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Wall and CPU time of the fastest of `repeat` runs. CPU time is the figure to compare on a
// loaded machine: wall time of a run longer than a scheduler slice includes time spent
// descheduled, which makes big inputs look superlinear when the machine is busy.
struct Timing {
  double wall = 1e30;
  double cpu = 1e30;
};

template <typename F>
Timing fastest(int repeat, F&& fn) {
  Timing best;
  for (int i = 0; i < repeat; ++i) {
    const double c0 = thread_cpu_seconds();
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best.wall = std::min(best.wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    best.cpu = std::min(best.cpu, thread_cpu_seconds() - c0);
  }
  return best;
}

void run_bench(const ParseBenchOptions& opt) {
  nlohmann::json rows = nlohmann::json::array();
  if (!opt.json)
    std::printf("%-8s %8s %10s %12s %12s %12s %12s %10s\n", "layers", "nodes", "bytes", "parse cpu ms", "verify cpu ms",
                "total cpu ms", "total wall ms", "us/node");
  for (int64_t layers : opt.layers) {
    ir::Graph g = ir::build_mlp({.hidden = 64, .layers = layers, .batch = 8});
    const std::string text = ir::print(g);
    const size_t nodes = g.nodes().size();
    // Graphs are destroyed outside the timed region.
    std::vector<ir::Graph> keep;
    keep.reserve(size_t(opt.repeat) * 2);
    Timing parse_t = fastest(opt.repeat, [&] { keep.push_back(ir::parse(text, "bench.dt", {.verify = false})); });
    Timing verify_t = fastest(opt.repeat, [&] { ir::verify(keep.front()); });
    Timing total_t = fastest(opt.repeat, [&] { keep.push_back(ir::parse(text, "bench.dt")); });
    keep.clear();
    const double us_per_node = total_t.cpu * 1e6 / double(nodes);
    rows.push_back({{"layers", layers},
                    {"nodes", nodes},
                    {"lines", nodes + g.params().size() + g.inputs().size() + 3},
                    {"bytes", text.size()},
                    {"parse_cpu_ms", parse_t.cpu * 1e3},
                    {"verify_cpu_ms", verify_t.cpu * 1e3},
                    {"total_cpu_ms", total_t.cpu * 1e3},
                    {"total_wall_ms", total_t.wall * 1e3},
                    {"us_per_node", us_per_node},
                    {"ms_per_1000_nodes", us_per_node}});
    if (!opt.json)
      std::printf("%-8lld %8zu %10zu %12.3f %12.3f %12.3f %12.3f %10.3f\n", (long long)layers, nodes, text.size(),
                  parse_t.cpu * 1e3, verify_t.cpu * 1e3, total_t.cpu * 1e3, total_t.wall * 1e3, us_per_node);
  }
  if (opt.json) {
    std::printf("%s\n", nlohmann::json{{"bench", "parse"}, {"repeat", opt.repeat}, {"results", rows}}.dump(2).c_str());
  } else {
    const double a = rows.front()["us_per_node"], b = rows.back()["us_per_node"];
    std::printf("growth: %.2fx cpu time per node from %lld to %lld layers (1.00 = linear); goal < 1 ms per 1000 nodes\n",
                b / a, (long long)opt.layers.front(), (long long)opt.layers.back());
  }
}

void setup(CLI::App& bench) {
  static ParseBenchOptions opt;
  CLI::App* cmd = add_bench(bench, "parse", "Parse + verify time of generated mlp IR (96 and 960 layers)", opt.json,
                            [] { run_bench(opt); });
  cmd->add_option("--layers", opt.layers, "model sizes in layers")->capture_default_str();
  cmd->add_option("--repeat", opt.repeat, "repetitions (the fastest is reported)")->capture_default_str();
}

BenchRegistrar reg("parse", setup);

}  // namespace
}  // namespace dt::bench
