// `dtensor bench compile --model mlp|gpt --layers 1,4,16,48,96,960 [--mesh 4] [--json]`: the time
// of the tensor-parallel transform (plan resolution + propagation, then partitioning every rank's
// program), the anchor's TP-transform measurement (PyTorch 2.11: 3.79 s for the 96-layer MLP).
// The mlp is the anchor's model: LayerNorm -> Linear(64->256) colwise -> ReLU -> Linear(256->64)
// rowwise, residual, per block. Each size is timed --iters times after one warm-up (which fills the
// planner cache, as a long-running compiler would have it) and the fastest is kept; verification of
// the programs is reported separately.
//
// `dtensor bench compile --growth [--meshes 2x2,...,256x256] [--layers 8]`: how one rank's compile
// grows with the mesh (issue: cluster scale), printed as JSON: per mesh, the time and the peak
// resident memory of compiling rank 0 as `dtensor compile --rank 0` does (propagation, the
// partition of rank 0 and the orbit representatives, the default passes and the cross-rank check),
// and how many programs the passes and the check looked at. The model is the issue's gpt (vocab
// 32000, hidden 1024, 16 heads, seq 128, batch 64) with the fsdp x tp plan; the batch grows with dp
// (max(64, dp)) so that every dp rank has rows. Each mesh runs in a child process (fork) so that
// its peak memory is its own; run it under `ulimit -v` to be safe.
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dtensor/core/error.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/ir/verifier.h"
#include "dtensor/passes/pass_manager.h"
#include "dtensor/passes/rank_pipeline.h"
#include "dtensor/sharding/compiler.h"
#include "bench/bench_registry.h"

namespace dt::bench {
namespace {

struct BenchCompileOptions {
  std::string model = "mlp", layers = "1,4,16,48,96,960", mesh = "4";
  int iters = 5;
  bool json = false;
  bool growth = false;
  std::string meshes = "2x2,4x4,8x8,16x16,32x32,64x128,128x128,256x256";
  int64_t growth_layers = 8;
};

// The fsdp x tp plan of examples/gpt_fsdp_tp.json.
constexpr const char* kFsdpTpPlan = R"json({"mesh_dims": ["dp", "tp"], "inputs": {"input": {"dp": "S(0)"}},
  "modules": [{"pattern": "*", "style": "fsdp", "mesh_dim": "dp"},
    {"pattern": "h.*.attn.q_proj", "style": "colwise", "mesh_dim": "tp"},
    {"pattern": "h.*.attn.k_proj", "style": "colwise", "mesh_dim": "tp"},
    {"pattern": "h.*.attn.v_proj", "style": "colwise", "mesh_dim": "tp"},
    {"pattern": "h.*.attn.o_proj", "style": "rowwise", "mesh_dim": "tp"},
    {"pattern": "h.*.mlp.fc_in", "style": "colwise", "mesh_dim": "tp"},
    {"pattern": "h.*.mlp.fc_out", "style": "rowwise", "mesh_dim": "tp"},
    {"pattern": "lm_head", "style": "colwise", "mesh_dim": "tp"}]})json";

// Compiles rank 0 of the gpt on `mesh` (in this process) and returns the row of the growth table
// without the peak memory.
nlohmann::json compile_rank0(const std::string& mesh_text, int64_t layers) {
  const DeviceMesh mesh = DeviceMesh::parse(mesh_text);
  const int64_t dp = mesh.size(0);
  ir::Graph g = ir::build_gpt(
      {.vocab = 32000, .hidden = 1024, .heads = 16, .layers = layers, .max_seq = 128, .batch = std::max<int64_t>(64, dp),
       .seq = 128});
  const sharding::ParallelPlan plan = sharding::ParallelPlan::parse(kFsdpTpPlan);
  auto t0 = std::chrono::steady_clock::now();
  sharding::CompiledModel c = sharding::compile(g, plan, mesh, {.ranks = {0}, .verify = true, .orbits = true, .adjust_plan = {}});
  passes::PassManager pm;
  pm.add(passes::parse_pipeline("default"));
  const passes::RankPipelineStats st = passes::run_rank_pipelines(pm, c.programs, c.ranks, {.orbits = &c.orbits});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {{"mesh", mesh.str()},
          {"ranks", mesh.size()},
          {"batch", std::max<int64_t>(64, dp)},
          {"seconds", seconds},
          {"propagate_ms", c.propagate_ms},
          {"partition_ms", c.partition_ms},
          {"orbits", st.orbits},
          {"programs_partitioned", c.orbits.orbits.size()},  // rank 0 is orbit 0's representative
          {"distinct_programs", c.programs.size()},
          {"programs_transformed", st.programs_transformed},
          {"programs_checked", st.programs_checked},
          {"rank0_nodes", c.programs[0].nodes().size()}};
}

// Runs compile_rank0 in a child process; adds the child's peak resident memory.
nlohmann::json measure_in_child(const std::string& mesh, int64_t layers) {
  int fds[2];
  if (pipe(fds) != 0) DT_THROW(IoError) << "pipe failed";
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string out;
    try {
      out = compile_rank0(mesh, layers).dump();
    } catch (const std::exception& e) {
      out = nlohmann::json{{"mesh", mesh}, {"error", e.what()}}.dump();
    }
    size_t off = 0;
    while (off < out.size()) {
      const ssize_t w = write(fds[1], out.data() + off, out.size() - off);
      if (w <= 0) break;
      off += size_t(w);
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t r; (r = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, size_t(r));
  close(fds[0]);
  int status = 0;
  struct rusage ru {};
  wait4(pid, &status, 0, &ru);
  nlohmann::json row = text.empty() ? nlohmann::json{{"mesh", mesh}, {"error", "the child died (out of memory?)"}}
                                    : nlohmann::json::parse(text);
  row["peak_rss_mb"] = double(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
  return row;
}

void bench_growth(const BenchCompileOptions& opt) {
  nlohmann::json rows = nlohmann::json::array();
  std::stringstream ss(opt.meshes);
  std::string mesh;
  while (std::getline(ss, mesh, ',')) rows.push_back(measure_in_child(mesh, opt.growth_layers));
  std::printf("%s\n", rows.dump(2).c_str());
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void bench(const BenchCompileOptions& opt) {
  if (opt.growth) return bench_growth(opt);
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
      c = sharding::compile(g, plan, mesh, {.ranks = {}, .verify = false, .orbits = false, .adjust_plan = {}});
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
  CLI::App* cmd = add_bench(app, "compile", "Tensor-parallel transform time (propagation + partition of every rank)",
                            opt.json, [] { bench(opt); });
  cmd->add_option("--model", opt.model, "mlp (the anchor's model) or gpt")->check(CLI::IsMember({"mlp", "gpt"}))->capture_default_str();
  cmd->add_option("--layers", opt.layers, "comma-separated block counts")->capture_default_str();
  cmd->add_option("--mesh", opt.mesh, "device mesh (1-d: the tp plan)")->capture_default_str();
  cmd->add_option("--iters", opt.iters, "timed runs per size (fastest kept)")->capture_default_str();
  cmd->add_flag("--growth", opt.growth,
                "instead: time and peak memory of compiling rank 0 of the gpt (fsdp x tp, default passes, check on) per mesh, as JSON");
  cmd->add_option("--meshes", opt.meshes, "meshes of --growth")->capture_default_str();
  cmd->add_option("--growth-layers", opt.growth_layers, "gpt layers of --growth")->capture_default_str();
});

}  // namespace
}  // namespace dt::bench
