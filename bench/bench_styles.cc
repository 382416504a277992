// `dtensor bench styles [--hidden 1024] [--layers 4] [--meshes 4,2x2] [--repeat 3] [--json]`: what
// each parallel style costs on the example gpt (vocab 4096, batch 2, seq 128 by default), per plan
// and mesh: bytes each rank sends and collectives it issues (static, from rank 0's program after
// the default passes), stored parameter bytes per rank, the run-time peak of live node results per
// rank (activations plus gathered parameters), and the run time on the threads backend (fastest of
// --repeat). On a 2-d mesh the tp-style plans put data parallelism on dp (batch sharded) and
// `fsdp` is FSDP over TP (examples/gpt_fsdp_tp.json).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dtensor/core/rng.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/runtime/launcher.h"
#include "dtensor/sharding/compiler.h"
#include "bench/bench_registry.h"
#include "bench/gpt_options.h"
#include "dtensor/job/job.h"
#include "dtensor/sharding/tensor_sharding.h"

namespace dt::bench {
namespace {

struct BenchStylesOptions {
  ir::GptConfig gpt = {.vocab = 4096, .hidden = 1024, .heads = 16, .layers = 4, .batch = 2, .seq = 128};
  std::string meshes = "4,2x2", examples = "examples";
  int repeat = 3;
  bool json = false;
};

sharding::ParallelPlan plan_for(const std::string& style, const DeviceMesh& mesh, const std::string& dir) {
  const std::string file = style == "tp" ? "gpt_tp.json" : style == "tp_vocab" ? "gpt_tp_vocab.json"
                           : style == "sp" ? "gpt_sp.json" : "gpt_fsdp_tp.json";
  sharding::ParallelPlan p = sharding::ParallelPlan::load(dir + "/" + file);
  if (style != "fsdp_tp" && mesh.ndim() == 2) {
    p.mesh_dims = {"dp", "tp"};
    p.inputs["input"]["dp"] = Placement::shard(0);
  }
  return p;
}

void bench(const BenchStylesOptions& opt) {
  const ir::GptConfig& m = opt.gpt;
  ir::Graph g = ir::build_gpt(fitted_max_seq(m));
  sharding::TensorMap full = ir::random_weights(g, /*seed=*/0);
  Generator gen(1);
  full["input"] = randint({m.batch, m.seq}, 0, m.vocab, gen);
  nlohmann::json rows = nlohmann::json::array();
  if (!opt.json)
    std::printf("%-6s %-9s %12s %6s %14s %14s %10s\n", "mesh", "plan", "bytes/rank", "colls", "param B/rank",
                "peak B/rank", "time_ms");
  std::stringstream ss(opt.meshes);
  std::string mesh_text;
  while (std::getline(ss, mesh_text, ',')) {
    const DeviceMesh mesh = DeviceMesh::parse(mesh_text);
    for (const char* style : {"tp", "tp_vocab", "sp", "fsdp_tp"}) {
      if (std::string(style) == "fsdp_tp" && mesh.ndim() != 2) continue;
      job::JobOptions jo;
      jo.mesh = mesh;
      jo.plan = plan_for(style, mesh, opt.examples);
      const job::Job job = job::Job::compile(g, std::move(jo));
      const sharding::CompiledModel& c = job.compiled();
      runtime::LaunchOptions lo;
      lo.repeat = opt.repeat;
      std::vector<runtime::RankResult> results =
          runtime::launch(job.programs_by_rank(), job.bindings_by_rank(job::Weights::full(full), full), lo);
      const sharding::CollectiveStats stats = sharding::collective_stats(c.programs[0], c.ranks[0]);
      double time_ms = 0;
      size_t peak = 0;
      for (const auto& r : results) {
        time_ms = std::max(time_ms, r.stats.seconds * 1e3);
        peak = std::max(peak, r.stats.peak_bytes);
      }
      const int64_t params = sharding::param_bytes(c.programs[0]);
      rows.push_back({{"mesh", mesh.str()}, {"plan", style}, {"bytes_sent_per_rank", stats.total_bytes},
                      {"collectives_per_rank", stats.total}, {"collectives", stats.count},
                      {"param_bytes_per_rank", params}, {"peak_bytes_per_rank", peak}, {"time_ms", time_ms},
                      {"warnings", c.sharding.warnings}});
      if (!opt.json)
        std::printf("%-6s %-9s %12lld %6d %14lld %14zu %10.2f\n", mesh.str().c_str(), style,
                    (long long)stats.total_bytes, stats.total, (long long)params, peak, time_ms);
    }
  }
  if (opt.json) std::printf("%s\n", nlohmann::json({{"model", {{"vocab", m.vocab}, {"hidden", m.hidden},
                                                              {"heads", m.heads}, {"layers", m.layers},
                                                              {"batch", m.batch}, {"seq", m.seq}}},
                                                    {"rows", rows}})
                                        .dump(2)
                                        .c_str());
}

BenchRegistrar reg("styles", [](CLI::App& app) {
  static BenchStylesOptions opt;
  CLI::App* cmd = add_bench(app, "styles", "Bytes, collectives, memory and time per parallel style on the gpt",
                            opt.json, [] { bench(opt); });
  add_gpt_options(cmd, opt.gpt);
  cmd->add_option("--meshes", opt.meshes, "comma-separated meshes")->capture_default_str();
  cmd->add_option("--examples", opt.examples, "folder of the example plans")->capture_default_str();
  cmd->add_option("--repeat", opt.repeat, "runs per plan (fastest kept)")->capture_default_str();
});

}  // namespace
}  // namespace dt::bench
