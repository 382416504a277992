// `dtensor bench compile --model mlp|gpt --layers 1,4,16,48,96,960 [--mesh 4] [--json]`: the time
// of the tensor-parallel transform (plan resolution + propagation, then partitioning every rank's
// program), the anchor's TP-transform measurement (PyTorch 2.11: 3.79 s for the 96-layer MLP).
// The mlp is the anchor's model: LayerNorm -> Linear(64->256) colwise -> ReLU -> Linear(256->64)
// rowwise, residual, per block. Each size is timed --iters times after one warm-up (which fills the
// planner cache, as a long-running compiler would have it) and the fastest is kept; verification of
// the programs is reported separately.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dtensor/ir/example_models.h"
#include "dtensor/ir/verifier.h"
#include "dtensor/sharding/compiler.h"
#include "tools/command.h"

namespace dt::tools {
namespace {

struct BenchCompileOptions {
  std::string model = "mlp", layers = "1,4,16,48,96,960", mesh = "4";
  int iters = 5;
  bool json = false;
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void bench(const BenchCompileOptions& opt) {
  const DeviceMesh mesh = DeviceMesh::parse(opt.mesh);
  const sharding::ParallelPlan plan = sharding::ParallelPlan::parse(
      opt.model == "mlp"
          ? R"({"modules": [{"pattern": "layers.*.fc1", "style": "colwise"}, {"pattern": "layers.*.fc2", "style": "rowwise"}]})"
          : R"({"modules": [{"pattern": "h.*.attn.[qkv]_proj", "style": "colwise"}, {"pattern": "h.*.attn.o_proj", "style": "rowwise"},
               {"pattern": "h.*.mlp.fc_in", "style": "colwise"}, {"pattern": "h.*.mlp.fc_out", "style": "rowwise"},
               {"pattern": "lm_head", "style": "colwise"}]})");
  nlohmann::json rows = nlohmann::json::array();
  std::stringstream ss(opt.layers);
  std::string item;
  if (!opt.json)
    std::printf("%-8s %8s %10s %10s %12s %12s %10s %10s\n", "layers", "nodes", "out/rank", "all_reduce", "propagate_ms",
                "partition_ms", "total_ms", "verify_ms");
  while (std::getline(ss, item, ',')) {
    const int64_t layers = std::stoll(item);
    ir::Graph g = opt.model == "mlp" ? ir::build_mlp({.hidden = 64, .layers = layers, .batch = 8})
                                     : ir::build_gpt({.layers = layers});
    sharding::CompiledModel c;
    double best_prop = 1e30, best_part = 1e30;
    for (int i = 0; i <= std::max(opt.iters, 1); ++i) {
      c = sharding::compile(g, plan, mesh, {.ranks = {}, .verify = false, .adjust_plan = {}});
      if (i == 0) continue;  // warm-up
      best_prop = std::min(best_prop, c.propagate_ms);
      best_part = std::min(best_part, c.partition_ms);
    }
    auto t0 = std::chrono::steady_clock::now();
    for (const ir::Graph& p : c.programs) ir::verify(p);
    const double verify_ms = ms_since(t0);
    int all_reduce = 0;
    for (const auto& n : c.programs[0].nodes()) all_reduce += n->op == ir::OpKind::all_reduce;
    nlohmann::json row = {{"model", opt.model},          {"layers", layers},
                          {"mesh", mesh.str()},          {"nodes_in", g.nodes().size()},
                          {"nodes_out_per_rank", c.programs[0].nodes().size()},
                          {"all_reduce_per_rank", all_reduce},
                          {"propagate_ms", best_prop},   {"partition_ms", best_part},
                          {"total_ms", best_prop + best_part}, {"verify_ms", verify_ms}};
    rows.push_back(row);
    if (!opt.json)
      std::printf("%-8lld %8zu %10zu %10d %12.3f %12.3f %10.3f %10.3f\n", (long long)layers, g.nodes().size(),
                  c.programs[0].nodes().size(), all_reduce, best_prop, best_part, best_prop + best_part, verify_ms);
  }
  if (opt.json) std::printf("%s\n", rows.dump(2).c_str());
}

BenchRegistrar reg("compile", [](CLI::App& app) {
  static BenchCompileOptions opt;
  CLI::App* cmd = app.add_subcommand("compile", "Tensor-parallel transform time (propagation + partition of every rank)");
  cmd->add_option("--model", opt.model, "mlp (the anchor's model) or gpt")->check(CLI::IsMember({"mlp", "gpt"}))->capture_default_str();
  cmd->add_option("--layers", opt.layers, "comma-separated block counts")->capture_default_str();
  cmd->add_option("--mesh", opt.mesh, "device mesh (1-d: the tp plan)")->capture_default_str();
  cmd->add_option("--iters", opt.iters, "timed runs per size (fastest kept)")->capture_default_str();
  cmd->add_flag("--json", opt.json, "print JSON");
  cmd->callback([] { bench(opt); });
});

}  // namespace
}  // namespace dt::tools
