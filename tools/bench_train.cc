// `dtensor bench train [--hidden 512 --layers 4 --heads 8 --vocab 4096 --batch 4 --seq 256]
// [--steps 3] [--meshes 2,2x2] [--json]`: the training step of the example gpt with its
// cross-entropy loss (the anchor config by default), measured in one run: the one-device forward
// time (the forward graph alone) and step time (forward + backward + SGD update), their ratio
// (PyTorch's is about 3), and per mesh the step time, bytes each rank sends per step and the peak
// of live results per rank, against the one-device step. Steps after the first are timed (the
// fastest of --steps - 1; the first warms the allocator).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dtensor/core/rng.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/runtime/interpreter.h"
#include "dtensor/runtime/train_loop.h"
#include "tools/command.h"
#include "tools/passes_cli.h"

namespace dt::tools {
namespace {

struct BenchTrainOptions {
  int64_t hidden = 512, layers = 4, heads = 8, vocab = 4096, batch = 4, seq = 256;
  int steps = 3;
  std::string meshes = "2,2x2", examples = "examples";
  bool json = false;
};

double fastest_after_first(const std::vector<double>& ms) {
  if (ms.size() < 2) return ms.empty() ? 0 : ms[0];
  return *std::min_element(ms.begin() + 1, ms.end());
}

void bench(const BenchTrainOptions& opt) {
  if (opt.steps < 2) DT_THROW(ValueError) << "--steps must be >= 2 (the first step is not timed)";
  const ir::GptConfig cfg{.vocab = opt.vocab, .hidden = opt.hidden, .heads = opt.heads, .layers = opt.layers,
                          .max_seq = opt.seq, .batch = opt.batch, .seq = opt.seq, .loss = true};
  ir::Graph g = ir::build_gpt(cfg);
  const std::map<std::string, Tensor> weights = ir::random_weights(g, /*seed=*/0);
  Generator gen(1);
  const std::map<std::string, Tensor> data = {{"input", randint({opt.batch, opt.seq}, 0, opt.vocab, gen)},
                                              {"target", randint({opt.batch, opt.seq}, 0, opt.vocab, gen)}};
  // Forward alone.
  runtime::Bindings fb(weights.begin(), weights.end());
  for (auto& [k, v] : data) fb[k] = v;
  runtime::Interpreter fwd(g);
  std::vector<double> fwd_ms;
  size_t fwd_peak = 0;
  for (int i = 0; i < opt.steps; ++i) {
    runtime::RunStats st;
    fwd.run(fb, {}, &st);
    fwd_ms.push_back(st.seconds * 1e3);
    fwd_peak = std::max(fwd_peak, st.peak_bytes);
  }
  runtime::TrainOptions to;
  to.steps = opt.steps;
  runtime::TrainResult one = runtime::train_single_device(g.clone(), weights, data, to);
  const double f = fastest_after_first(fwd_ms), s1 = fastest_after_first(one.step_ms);
  nlohmann::json j = {{"config", {{"hidden", opt.hidden}, {"layers", opt.layers}, {"heads", opt.heads},
                                  {"vocab", opt.vocab}, {"batch", opt.batch}, {"seq", opt.seq}}},
                      {"forward_ms", f},
                      {"step_ms", s1},
                      {"step_over_forward", s1 / f},
                      {"forward_peak_bytes", fwd_peak},
                      {"step_peak_bytes", one.peak_bytes}};
  nlohmann::json meshes = nlohmann::json::array();
  std::stringstream ss(opt.meshes);
  std::string mesh_text;
  while (std::getline(ss, mesh_text, ',')) {
    runtime::ShardedTrainOptions so;
    so.mesh = DeviceMesh::parse(mesh_text);
    so.plan = sharding::ParallelPlan::load(opt.examples + (so.mesh.ndim() == 2 ? "/gpt_fsdp_tp.json" : "/gpt_tp.json"));
    if (so.mesh.ndim() == 2) so.plan.inputs["target"]["dp"] = Placement::shard(0);
    so.run_passes = [](std::vector<ir::Graph>& programs, const std::vector<int>& ranks) {
      run_pass_pipelines(programs, ranks, PassCliOptions{});
    };
    runtime::TrainResult r = runtime::train_sharded(g.clone(), weights, data, to, so);
    const double s = fastest_after_first(r.step_ms);
    meshes.push_back({{"mesh", mesh_text},
                      {"plan", so.mesh.ndim() == 2 ? "gpt_fsdp_tp" : "gpt_tp"},
                      {"step_ms", s},
                      {"speedup_vs_one_device", s1 / s},
                      {"bytes_sent_per_step", r.bytes_sent_per_step.front()},
                      {"peak_bytes_per_rank", r.peak_bytes},
                      {"peak_vs_one_device", double(r.peak_bytes) / double(one.peak_bytes)},
                      {"loss_diff_vs_one_device", std::abs(r.losses.back() - one.losses.back())}});
  }
  j["meshes"] = meshes;
  if (opt.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("gpt hidden %lld, %lld layers, %lld heads, vocab %lld, batch %lld, seq %lld\n", (long long)opt.hidden,
              (long long)opt.layers, (long long)opt.heads, (long long)opt.vocab, (long long)opt.batch,
              (long long)opt.seq);
  std::printf("one device: forward %.1f ms, step %.1f ms (step/forward %.2f), peak %.1f MiB\n", f, s1, s1 / f,
              double(one.peak_bytes) / (1 << 20));
  std::printf("%-6s %-12s %10s %9s %16s %14s %10s\n", "mesh", "plan", "step_ms", "speedup", "bytes/rank/step",
              "peak MiB/rank", "peak/one");
  for (const auto& m : meshes)
    std::printf("%-6s %-12s %10.1f %9.2f %16lld %14.1f %10.2f\n", m["mesh"].get<std::string>().c_str(),
                m["plan"].get<std::string>().c_str(), m["step_ms"].get<double>(),
                m["speedup_vs_one_device"].get<double>(), (long long)m["bytes_sent_per_step"].get<int64_t>(),
                m["peak_bytes_per_rank"].get<double>() / (1 << 20), m["peak_vs_one_device"].get<double>());
}

void setup(CLI::App& bench_app) {
  static BenchTrainOptions opt;
  CLI::App* cmd = bench_app.add_subcommand("train", "Training step time, step/forward ratio, sharded steps");
  cmd->add_option("--hidden", opt.hidden)->capture_default_str();
  cmd->add_option("--layers", opt.layers)->capture_default_str();
  cmd->add_option("--heads", opt.heads)->capture_default_str();
  cmd->add_option("--vocab", opt.vocab)->capture_default_str();
  cmd->add_option("--batch", opt.batch)->capture_default_str();
  cmd->add_option("--seq", opt.seq)->capture_default_str();
  cmd->add_option("--steps", opt.steps, "steps per configuration (the first is not timed)")->capture_default_str();
  cmd->add_option("--meshes", opt.meshes, "comma list of meshes (1-d: gpt_tp.json, 2-d: gpt_fsdp_tp.json)")
      ->capture_default_str();
  cmd->add_option("--examples", opt.examples, "directory of the example plans")->capture_default_str();
  cmd->add_flag("--json", opt.json, "print JSON");
  cmd->callback([] { bench(opt); });
}

BenchRegistrar reg("train", setup);

}  // namespace
}  // namespace dt::tools
