// `dtensor bench train [--hidden 512 --layers 4 --heads 8 --vocab 4096 --batch 4 --seq 256]
// [--steps 3] [--meshes 2,2x2] [--json]`: the training step of the example gpt with its
// cross-entropy loss (the anchor config by default), measured in one run: the one-device forward
// time (the forward graph alone) and step time (forward + backward + SGD update), their ratio
// (PyTorch's is about 3), and per mesh the step time, bytes each rank sends per step and the peak
// of live results per rank, against the one-device step. Steps after the first are timed (the
// fastest of --steps - 1; the first warms the allocator).
//
// The memory goal (--fsdp 2,4; SGD with momentum 0.9, so the optimizer state is one buffer per
// parameter): a rank's peak under fsdp on n ranks (its parameter and state shards plus the peak of
// its live results) against 1/n of the one-device parameter + gradient + optimizer-state bytes
// plus one layer's gathered parameters and its activations (on 1/n of the batch). One layer's
// activations are counted in the step graph: the forward results the backward reads, with the
// configured layers minus with one layer fewer (views of other results count their own bytes;
// tests/support/train_memory.h). Each fsdp run is made without and with the blocks' activations
// recomputed in the backward (--recompute blocks, autodiff/recompute.h): without it every layer's
// activations stay saved until the backward, so the run also reports the goal with all layers'
// activations on 1/n of the batch, which sharding alone can reach. The one-device step is also
// timed with recomputation (its step/forward and peak). --peak-breakdown K lists the K largest values live at
// each fsdp run's estimated peak on rank 0 (passes/memory_estimate.h): what dominates it.
//
// --vs-torch [--rounds R]: when /usr/bin/python3 can import torch, the same model's training step in
// PyTorch (bench/torch_gpt.py train: one thread, mean cross-entropy, plain SGD), alternating with
// dtensor's one-device step for R rounds; the fastest of each is set against the other. The forward
// is timed again in each round, so step/forward is the fastest step over the fastest forward. Both use
// the process's OpenBLAS: Debian's torch gets the narrow core OpenBLAS detects on some AVX-512 hosts
// (core/blas_kernels.h), dtensor the wide one; OPENBLAS_CORETYPE=<core> in the environment gives
// both the same kernels.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "dtensor/core/rng.h"
#include "tests/support/train_memory.h"
#include "dtensor/autodiff/train_step.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/passes/memory_estimate.h"
#include "dtensor/runtime/interpreter.h"
#include "dtensor/job/train.h"
#include "bench/bench_registry.h"
#include "bench/gpt_options.h"
#include "bench/torch_reference.h"

namespace dt::bench {
namespace {

struct BenchTrainOptions {
  ir::GptConfig gpt = {.vocab = 4096, .hidden = 512, .heads = 8, .layers = 4, .batch = 4, .seq = 256, .loss = true};
  int steps = 3;
  std::string meshes = "2,2x2", examples = "examples";
  std::string fsdp = "2,4";  // ranks of the fsdp memory-goal runs ("" to skip)
  int peak_breakdown = 0;  // list this many of the largest values live at each fsdp run's peak
  int rounds = 3;          // --vs-torch: alternating rounds
  bool vs_torch = false, json = false;
  TorchScript torch;
};

double fastest_after_first(const std::vector<double>& ms) {
  if (ms.size() < 2) return ms.empty() ? 0 : ms[0];
  return *std::min_element(ms.begin() + 1, ms.end());
}

int64_t bytes_of(const std::map<std::string, Tensor>& m, const std::string& prefix = "") {
  int64_t b = 0;
  for (const auto& [name, t] : m)
    if (name.rfind(prefix, 0) == 0) b += t.numel() * int64_t(itemsize(t.dtype()));
  return b;
}

// The values live at the estimated peak of `program` (passes/memory_estimate.h), the `top`
// largest of them: what dominates a rank's peak.
nlohmann::json peak_breakdown(const ir::Graph& program, int top) {
  const std::vector<int64_t> live = passes::live_bytes_profile(program);
  if (live.empty()) return nlohmann::json::object();
  const size_t at = size_t(std::max_element(live.begin(), live.end()) - live.begin());
  const std::vector<passes::LiveValue> values = passes::live_values_at(program, at);
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < values.size() && int(i) < top; ++i) {
    const passes::LiveValue& v = values[i];
    list.push_back({{"name", v.value->name},
                    {"op", std::string(ir::op_name(v.value->producer->op))},
                    {"bytes", v.bytes},
                    {"def", v.def},
                    {"last_use", v.last}});
  }
  return {{"estimated_peak_bytes", live[at]},
          {"position", at},
          {"nodes", program.nodes().size()},
          {"live_values", values.size()},
          {"peak_node", std::string(ir::op_name(program.nodes()[at]->op))},
          {"largest", list}};
}

nlohmann::json fsdp_memory_goal(const BenchTrainOptions& opt, const ir::GptConfig& cfg, const ir::Graph& g,
                                const std::map<std::string, Tensor>& weights, const std::map<std::string, Tensor>& data) {
  job::TrainOptions to;
  to.steps = 2;
  to.optimizer.momentum = 0.9;
  const autodiff::FsdpMemoryTerms terms = autodiff::fsdp_memory_terms(cfg, to.optimizer);
  nlohmann::json runs = nlohmann::json::array();
  std::stringstream ss(opt.fsdp);
  std::string text;
  while (std::getline(ss, text, ','))
    for (const autodiff::Recompute recompute : {autodiff::Recompute::none, autodiff::Recompute::blocks}) {
      to.recompute = recompute;
      job::ShardedTrainOptions so;
      so.job.mesh = DeviceMesh::parse(text);
      if (so.job.mesh.ndim() != 1) DT_THROW(ValueError) << "--fsdp takes rank counts (1-d meshes), got " << text;
      so.job.plan = sharding::ParallelPlan::parse(R"json({"mesh_dims": ["dp"],
        "inputs": {"input": {"dp": "S(0)"}, "target": {"dp": "S(0)"}},
        "modules": [{"pattern": "*", "style": "fsdp", "mesh_dim": "dp"}]})json");
      nlohmann::json breakdown;
      so.on_compiled = [&](const job::Job& job) {
        if (opt.peak_breakdown > 0) breakdown = peak_breakdown(job.program(0), opt.peak_breakdown);
      };
      const job::TrainResult r = job::train_sharded(g.clone(), weights, data, to, so);
      const int64_t n = so.job.mesh.size();
      int64_t held = 0;  // the largest rank's parameter and state shards (bound, not results)
      for (const auto& rank_state : r.rank_state) held = std::max(held, bytes_of(rank_state));
      const int64_t peak = held + int64_t(r.peak_bytes);
      const int64_t goal = terms.goal(n), goal_all = terms.goal_keeping_activations(n);
      runs.push_back({{"ranks", n},
                      {"recompute", std::string(autodiff::recompute_name(recompute))},
                      {"held_bytes_per_rank", held},
                      {"peak_result_bytes_per_rank", r.peak_bytes},
                      {"rank_peak_bytes", peak},
                      {"goal_bytes", goal},
                      {"holds", peak <= goal},
                      {"goal_keeping_activations_bytes", goal_all},
                      {"holds_keeping_activations", peak <= goal_all}});
      if (opt.peak_breakdown > 0) runs.back()["peak_breakdown"] = breakdown;
    }
  return {{"param_bytes", terms.params},
          {"grad_bytes", terms.grads},
          {"state_bytes", terms.state},
          {"layer_param_bytes", terms.layer_params},
          {"layer_activation_bytes", terms.layer_activations},
          {"activation_bytes", terms.activations},
          {"runs", runs}};
}

void bench(const BenchTrainOptions& opt) {
  if (opt.steps < 2) DT_THROW(ValueError) << "--steps must be >= 2 (the first step is not timed)";
  const ir::GptConfig cfg = fitted_max_seq(opt.gpt);
  ir::Graph g = ir::build_gpt(cfg);
  const std::map<std::string, Tensor> weights = ir::random_weights(g, /*seed=*/0);
  Generator gen(1);
  const std::map<std::string, Tensor> data = {{"input", randint({cfg.batch, cfg.seq}, 0, cfg.vocab, gen)},
                                              {"target", randint({cfg.batch, cfg.seq}, 0, cfg.vocab, gen)}};
  // Forward alone.
  runtime::Bindings fb(weights.begin(), weights.end());
  for (auto& [k, v] : data) fb[k] = v;
  runtime::Interpreter fwd(g);
  size_t fwd_peak = 0;
  // The forward's fastest of --steps runs after the first. Timed again in every --vs-torch round
  // beside the step, so that step/forward compares the fastest of each over the same rounds.
  auto time_forward = [&] {
    std::vector<double> fwd_ms;
    for (int i = 0; i < opt.steps; ++i) {
      runtime::RunStats st;
      fwd.run(fb, {}, &st);
      fwd_ms.push_back(st.seconds * 1e3);
      fwd_peak = std::max(fwd_peak, st.peak_bytes);
    }
    return fastest_after_first(fwd_ms);
  };
  double f = time_forward();
  job::TrainOptions to;
  to.steps = opt.steps;
  job::TrainResult one = job::train_single_device(g.clone(), weights, data, to);
  to.recompute = autodiff::Recompute::blocks;
  const job::TrainResult one_rec = job::train_single_device(g.clone(), weights, data, to);
  to.recompute = autodiff::Recompute::none;
  const double s1r = fastest_after_first(one_rec.step_ms);
  double s1 = fastest_after_first(one.step_ms);
  // PyTorch's step, alternating with ours: the first round's dtensor step is the one above.
  const std::string torch_note = opt.vs_torch ? torch_unavailable(opt.torch, "bench train") : "";
  nlohmann::json vs_torch = nlohmann::json::array();
  double torch_step = std::numeric_limits<double>::infinity();
  for (int round = 0; opt.vs_torch && torch_note.empty() && round < opt.rounds; ++round) {
    const double ours = round == 0 ? s1 : fastest_after_first(job::train_single_device(g.clone(), weights, data, to).step_ms);
    if (round > 0) f = std::min(f, time_forward());
    const std::optional<double> theirs = torch_min_ms(opt.torch, "train", cfg, opt.steps - 1);
    if (!theirs) break;
    s1 = std::min(s1, ours);
    torch_step = std::min(torch_step, *theirs);
    vs_torch.push_back({{"dtensor_step_ms", ours}, {"torch_step_ms", *theirs}});
  }
  nlohmann::json j = {{"config", {{"hidden", cfg.hidden}, {"layers", cfg.layers}, {"heads", cfg.heads},
                                  {"vocab", cfg.vocab}, {"batch", cfg.batch}, {"seq", cfg.seq}}},
                      {"forward_ms", f},
                      {"step_ms", s1},
                      {"step_over_forward", s1 / f},
                      {"forward_peak_bytes", fwd_peak},
                      {"step_peak_bytes", one.peak_bytes},
                      {"recompute_step_ms", s1r},
                      {"recompute_step_over_forward", s1r / f},
                      {"recompute_step_peak_bytes", one_rec.peak_bytes}};
  if (!torch_note.empty()) j["torch"] = torch_note;
  if (!vs_torch.empty()) {
    j["torch_rounds"] = vs_torch;
    j["torch_step_ms"] = torch_step;
    j["torch_step_over_dtensor_step"] = torch_step / s1;
  }
  nlohmann::json meshes = nlohmann::json::array();
  std::stringstream ss(opt.meshes);
  std::string mesh_text;
  while (std::getline(ss, mesh_text, ',')) {
    job::ShardedTrainOptions so;
    so.job.mesh = DeviceMesh::parse(mesh_text);
    so.job.plan =
        sharding::ParallelPlan::load(opt.examples + (so.job.mesh.ndim() == 2 ? "/gpt_fsdp_tp.json" : "/gpt_tp.json"));
    if (so.job.mesh.ndim() == 2) so.job.plan.inputs["target"]["dp"] = Placement::shard(0);
    job::TrainResult r = job::train_sharded(g.clone(), weights, data, to, so);
    const double s = fastest_after_first(r.step_ms);
    meshes.push_back({{"mesh", mesh_text},
                      {"plan", so.job.mesh.ndim() == 2 ? "gpt_fsdp_tp" : "gpt_tp"},
                      {"step_ms", s},
                      {"speedup_vs_one_device", s1 / s},
                      {"bytes_sent_per_step", r.bytes_sent_per_step.front()},
                      {"peak_bytes_per_rank", r.peak_bytes},
                      {"peak_vs_one_device", double(r.peak_bytes) / double(one.peak_bytes)},
                      {"loss_diff_vs_one_device", std::abs(r.losses.back() - one.losses.back())}});
  }
  j["meshes"] = meshes;
  if (!opt.fsdp.empty()) j["fsdp_memory"] = fsdp_memory_goal(opt, cfg, g, weights, data);
  if (opt.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("gpt hidden %lld, %lld layers, %lld heads, vocab %lld, batch %lld, seq %lld\n", (long long)cfg.hidden,
              (long long)cfg.layers, (long long)cfg.heads, (long long)cfg.vocab, (long long)cfg.batch,
              (long long)cfg.seq);
  std::printf("one device: forward %.1f ms, step %.1f ms (step/forward %.2f), peak %.1f MiB\n", f, s1, s1 / f,
              double(one.peak_bytes) / (1 << 20));
  if (!torch_note.empty()) std::printf("%s\n", torch_note.c_str());
  if (!vs_torch.empty())
    std::printf("PyTorch one thread, %zu alternating rounds: step %.1f ms: dtensor's step is %.2fx PyTorch's speed\n",
                vs_torch.size(), torch_step, torch_step / s1);
  std::printf("one device, recompute blocks: step %.1f ms (step/forward %.2f), peak %.1f MiB\n", s1r, s1r / f,
              double(one_rec.peak_bytes) / (1 << 20));
  std::printf("%-6s %-12s %10s %9s %16s %14s %10s\n", "mesh", "plan", "step_ms", "speedup", "bytes/rank/step",
              "peak MiB/rank", "peak/one");
  for (const auto& m : meshes)
    std::printf("%-6s %-12s %10.1f %9.2f %16lld %14.1f %10.2f\n", m["mesh"].get<std::string>().c_str(),
                m["plan"].get<std::string>().c_str(), m["step_ms"].get<double>(),
                m["speedup_vs_one_device"].get<double>(), (long long)m["bytes_sent_per_step"].get<int64_t>(),
                m["peak_bytes_per_rank"].get<double>() / (1 << 20), m["peak_vs_one_device"].get<double>());
  if (!j.contains("fsdp_memory")) return;
  const auto& fm = j["fsdp_memory"];
  auto mib = [](const nlohmann::json& v) { return v.get<double>() / (1 << 20); };
  std::printf("fsdp memory goal (sgd momentum 0.9): one device params %.1f MiB, grads %.1f MiB, state %.1f MiB; "
              "one layer: params %.1f MiB, activations %.1f MiB; all layers' activations %.1f MiB\n",
              mib(fm["param_bytes"]), mib(fm["grad_bytes"]), mib(fm["state_bytes"]), mib(fm["layer_param_bytes"]),
              mib(fm["layer_activation_bytes"]), mib(fm["activation_bytes"]));
  std::printf("%-6s %-9s %14s %12s %14s %10s %9s %6s %14s %6s\n", "ranks", "recompute", "held MiB/rank",
              "peak results", "rank peak MiB", "goal MiB", "peak/goal", "holds", "goal(all) MiB", "holds");
  for (const auto& r : fm["runs"])
    std::printf("%-6d %-9s %14.1f %12.1f %14.1f %10.1f %9.2f %6s %14.1f %6s\n", r["ranks"].get<int>(),
                r["recompute"].get<std::string>().c_str(), mib(r["held_bytes_per_rank"]),
                mib(r["peak_result_bytes_per_rank"]), mib(r["rank_peak_bytes"]),
                mib(r["goal_bytes"]), r["rank_peak_bytes"].get<double>() / r["goal_bytes"].get<double>(),
                r["holds"].get<bool>() ? "yes" : "no", mib(r["goal_keeping_activations_bytes"]),
                r["holds_keeping_activations"].get<bool>() ? "yes" : "no");
  for (const auto& r : fm["runs"]) {
    if (!r.contains("peak_breakdown") || r["peak_breakdown"].empty()) continue;
    const auto& b = r["peak_breakdown"];
    std::printf("fsdp %d, recompute %s, rank 0: estimated peak %.1f MiB at node %lld of %lld (%s), %lld values "
                "live; largest:\n",
                r["ranks"].get<int>(), r["recompute"].get<std::string>().c_str(), mib(b["estimated_peak_bytes"]),
                (long long)b["position"].get<int64_t>(),
                (long long)b["nodes"].get<int64_t>(), b["peak_node"].get<std::string>().c_str(),
                (long long)b["live_values"].get<int64_t>());
    for (const auto& v : b["largest"])
      std::printf("  %8.2f MiB  %-28s %-24s def %6lld last use %6lld\n", mib(v["bytes"]),
                  v["name"].get<std::string>().c_str(), v["op"].get<std::string>().c_str(),
                  (long long)v["def"].get<int64_t>(), (long long)v["last_use"].get<int64_t>());
  }
}

void setup(CLI::App& bench_app) {
  static BenchTrainOptions opt;
  CLI::App* cmd = add_bench(bench_app, "train", "Training step time, step/forward ratio, sharded steps", opt.json,
                            [] { bench(opt); });
  add_gpt_options(cmd, opt.gpt);
  cmd->add_option("--steps", opt.steps, "steps per configuration (the first is not timed)")->capture_default_str();
  cmd->add_option("--meshes", opt.meshes, "comma list of meshes (1-d: gpt_tp.json, 2-d: gpt_fsdp_tp.json)")
      ->capture_default_str();
  cmd->add_option("--fsdp", opt.fsdp, "comma list of rank counts for the fsdp memory goal (\"\" skips it)")
      ->capture_default_str();
  cmd->add_option("--peak-breakdown", opt.peak_breakdown,
                  "list this many of the largest values live at the estimated peak of each fsdp run (rank 0)")
      ->capture_default_str();
  cmd->add_option("--examples", opt.examples, "directory of the example plans")->capture_default_str();
  cmd->add_flag("--vs-torch", opt.vs_torch, "time the same step in PyTorch (/usr/bin/python3), alternating rounds");
  cmd->add_option("--rounds", opt.rounds, "--vs-torch: alternating rounds")->capture_default_str()->check(CLI::Range(1, 100));
  cmd->add_option("--torch-script", opt.torch.script, "the PyTorch side")->capture_default_str();
  cmd->add_option("--python", opt.torch.python, "the Python that runs it")->capture_default_str();
}

BenchRegistrar reg("train", setup);

}  // namespace
}  // namespace dt::bench
