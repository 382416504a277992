// `dtensor bench plan-search [--layers 32 --hidden 4096 --heads 32 --vocab 128256 ...] [--mesh 8x8]
//  [--train] [--iters 3] [--json]`: the time of `--plan auto`'s search (dtensor/autoplan/search.h)
// on the example gpt, by default at Llama-3-8B's shape (32 layers, hidden 4096, 32 heads, vocab
// 128256) on an 8x8 mesh: compile only, no weights. The goal is 1 s (PyTorch's
// AutoParallel publishes 15.1 s to build its ILP and 36.5 s to solve it for that size). Each
// iteration searches from scratch (a fresh planner cache); the fastest is kept.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "dtensor/autoplan/search.h"
#include "dtensor/ir/example_models.h"
#include "bench/bench_registry.h"
#include "bench/gpt_options.h"

namespace dt::bench {
namespace {

struct BenchPlanSearchOptions {
  ir::GptConfig gpt{.vocab = 128256, .hidden = 4096, .heads = 32, .layers = 32, .max_seq = 1024, .batch = 8, .seq = 1024};
  std::string mesh = "8x8";
  int iters = 3;
  bool train = false, json = false;
};

void bench(const BenchPlanSearchOptions& opt) {
  const ir::Graph g = ir::build_gpt(fitted_max_seq(opt.gpt));
  const DeviceMesh mesh = DeviceMesh::parse(opt.mesh);
  autoplan::SearchOptions so;
  so.train = opt.train;
  double best = 1e30;
  autoplan::SearchResult r;
  for (int i = 0; i < std::max(opt.iters, 1); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    r = autoplan::search(g, mesh, so);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  nlohmann::json j = {{"layers", opt.gpt.layers}, {"hidden", opt.gpt.hidden}, {"heads", opt.gpt.heads},
                      {"vocab", opt.gpt.vocab},   {"nodes", g.nodes().size()}, {"mesh", mesh.str()},
                      {"train", opt.train},       {"search_s", best},          {"candidates_costed", r.evaluated},
                      {"mesh_dims", r.plan.mesh_dims}, {"estimated_step_us", r.estimate.step_us},
                      {"lower_bound_us", r.lower_bound_us}};
  if (opt.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("gpt %lld layers, hidden %lld, %lld heads, vocab %lld (%zu nodes) on mesh %s%s: search %.3f s, "
              "%d candidates costed\nchosen mesh dims %s, estimated step %.1f ms (lower bound %.1f ms)\n",
              (long long)opt.gpt.layers, (long long)opt.gpt.hidden, (long long)opt.gpt.heads, (long long)opt.gpt.vocab,
              g.nodes().size(), mesh.str().c_str(), opt.train ? " (training step)" : "", best, r.evaluated,
              j["mesh_dims"].dump().c_str(), r.estimate.step_us / 1e3, r.lower_bound_us / 1e3);
}

BenchRegistrar reg("plan-search", [](CLI::App& app) {
  static BenchPlanSearchOptions opt;
  CLI::App* cmd = add_bench(app, "plan-search", "Time of --plan auto's search (Llama-3-8B-shaped gpt, 8x8 mesh)",
                            opt.json, [] { bench(opt); });
  add_gpt_options(cmd, opt.gpt);
  cmd->add_option("--mesh", opt.mesh, "device mesh")->capture_default_str();
  cmd->add_option("--iters", opt.iters, "searches (fastest kept)")->capture_default_str();
  cmd->add_flag("--train", opt.train, "search for the training step");
});

}  // namespace
}  // namespace dt::bench
