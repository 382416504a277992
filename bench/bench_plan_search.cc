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
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "dtensor/autoplan/search.h"
#include "dtensor/core/error.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/job/job.h"
#include "dtensor/job/train.h"
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
                      {"train", opt.train},       {"search_s", best},          {"candidates_costed", r.evaluated}, {"method", r.method},
                      {"mesh_dims", r.plan.mesh_dims}, {"estimated_step_us", r.estimate.step_us},
                      {"lower_bound_us", r.lower_bound_us}};
  if (opt.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("gpt %lld layers, hidden %lld, %lld heads, vocab %lld (%zu nodes) on mesh %s%s: search %.3f s, "
              "%d candidates costed (method %s)\nchosen mesh dims %s, estimated step %.1f ms (lower bound %.1f ms)\n",
              (long long)opt.gpt.layers, (long long)opt.gpt.hidden, (long long)opt.gpt.heads, (long long)opt.gpt.vocab,
              g.nodes().size(), mesh.str().c_str(), opt.train ? " (training step)" : "", best, r.evaluated,
              r.method.c_str(), j["mesh_dims"].dump().c_str(), r.estimate.step_us / 1e3, r.lower_bound_us / 1e3);
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

// `dtensor bench auto-vs-hand [--vocab 4096 --hidden 512 --heads 8 --layers 4 --batch 4 --seq 256]
//  [--ranks 4] [--examples examples] [--train] [--rounds 3] [--repeat 5] [--json]`: the measured
// forward of the example gpt under --plan auto and under every hand plan of examples/ (gpt_*.json;
// a 1-d plan on --ranks, a 2-d one on 2 x ranks/2) on the threads backend. Each figure is the
// slowest rank's fastest of --repeat forwards, the fastest over rounds that alternate the plans (a
// busy spell of the shared machine hits them all); the ratio is auto / the best hand plan (goal
// <= 1.05), printed with the load average over the run. --train: the training step instead (the
// gpt with its cross-entropy loss, SGD; the search run with --train; each hand plan shards the
// target like the input): each figure is the fastest of --repeat steps after a first one (which
// warms the allocator), the fastest over the rounds.
struct AutoVsHandOptions {
  ir::GptConfig gpt{.vocab = 4096, .hidden = 512, .heads = 8, .layers = 4, .batch = 4, .seq = 256};
  int ranks = 4, rounds = 3, repeat = 5;
  std::string examples = "examples";
  bool train = false, json = false;
};

struct Contender {
  std::string name;
  job::JobOptions options;
  std::optional<job::Job> job;  // the forward's compiled job (--train compiles per measurement)
  double estimate_us = 0, best_ms = 1e30;
};

// The fastest forward (slowest rank) or training step of one measurement.
double measure(Contender& c, const ir::Graph& g, const job::Weights& weights, const job::TensorMap& full_weights,
               const job::TensorMap& inputs, const AutoVsHandOptions& o) {
  if (!o.train) {
    job::RunOptions ro;
    ro.repeat = o.repeat;
    const job::RunResult r = c.job->run(weights, inputs, ro);
    double ms = 0;
    for (const job::RankStats& s : r.ranks) ms = std::max(ms, s.time_ms);
    return ms;
  }
  job::TrainOptions to;
  to.steps = o.repeat + 1;
  job::ShardedTrainOptions so;
  so.job = c.options;
  const job::TrainResult r = job::train_sharded(g.clone(), full_weights, inputs, to, so);
  return *std::min_element(r.step_ms.begin() + 1, r.step_ms.end());
}

void auto_vs_hand(const AutoVsHandOptions& o) {
  if (o.ranks < 2 || o.rounds < 1 || o.repeat < 1) DT_THROW(ValueError) << "--ranks >= 2, --rounds and --repeat >= 1";
  ir::GptConfig cfg = fitted_max_seq(o.gpt);
  cfg.loss = o.train;
  const ir::Graph g = ir::build_gpt(cfg);
  const job::TensorMap full_weights = ir::random_weights(g, 0);
  const job::Weights weights = job::Weights::full(full_weights);
  Generator gen(1);
  job::TensorMap inputs = {{"input", randint({cfg.batch, cfg.seq}, 0, cfg.vocab, gen)}};
  if (o.train) inputs["target"] = randint({cfg.batch, cfg.seq}, 0, cfg.vocab, gen);
  std::vector<Contender> plans;
  {
    Contender c{"auto", {}, {}, 0};
    c.options.mesh = DeviceMesh(Shape{o.ranks});
    autoplan::SearchOptions so;
    so.train = o.train;
    const autoplan::SearchResult r = autoplan::search(g, c.options.mesh, so);
    c.options.plan = r.plan;
    c.options.passes.options = r.pass_options;
    c.estimate_us = r.estimate.step_us;
    plans.push_back(std::move(c));
  }
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(o.examples)) {
    const std::string f = e.path().filename().string();
    if (f.starts_with("gpt_") && f.ends_with(".json")) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) DT_THROW(IoError) << "no hand plans gpt_*.json in " << o.examples << " (pass --examples)";
  for (const auto& f : files) {
    Contender c{f.filename().string(), {}, {}, 0};
    c.options.plan = sharding::ParallelPlan::load(f.string());
    const size_t dims = c.options.plan.mesh_dims.size();
    if (dims > 2 || (dims == 2 && o.ranks % 2)) continue;
    c.options.mesh = dims == 2 ? DeviceMesh(Shape{2, o.ranks / 2}) : DeviceMesh(Shape{o.ranks});
    if (o.train && c.options.plan.inputs.count("input")) c.options.plan.inputs["target"] = c.options.plan.inputs["input"];
    plans.push_back(std::move(c));
  }
  // Compile each (the forward keeps its job; a training step is tried for one step, which also
  // warms up); a plan that does not apply to this model is skipped.
  AutoVsHandOptions warm = o;
  warm.repeat = 1;
  std::erase_if(plans, [&](Contender& c) {
    try {
      if (!o.train) c.job.emplace(job::Job::compile(g, c.options));
      else measure(c, g, weights, full_weights, inputs, warm);
      return false;
    } catch (const dt::Error& e) {
      if (c.name == "auto") throw;
      std::fprintf(stderr, "bench auto-vs-hand: skipping %s: %s\n", c.name.c_str(), e.what());
      return true;
    }
  });
  for (int round = 0; round < o.rounds; ++round)
    for (Contender& c : plans) c.best_ms = std::min(c.best_ms, measure(c, g, weights, full_weights, inputs, o));
  double load[3] = {-1, -1, -1};
  if (getloadavg(load, 3) < 0) load[0] = -1;
  const Contender* hand = nullptr;
  for (size_t k = 1; k < plans.size(); ++k)
    if (!hand || plans[k].best_ms < hand->best_ms) hand = &plans[k];
  const char* what = o.train ? "step_ms" : "forward_ms";
  nlohmann::json j = {{"ranks", o.ranks},      {"rounds", o.rounds},           {"repeat", o.repeat},
                      {"train", o.train},      {"load_average_1min", load[0]},
                      {"auto_plan", nlohmann::json::parse(plans[0].options.plan.to_json())}};
  for (const Contender& c : plans) j[what][c.name] = c.best_ms;
  if (hand) {
    j["best_hand"] = hand->name;
    j["auto_over_best_hand"] = plans[0].best_ms / hand->best_ms;
  }
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("gpt hidden %lld, %lld layers, batch %lld x seq %lld on %d ranks (threads): fastest of %d %s, %d rounds\n",
              (long long)o.gpt.hidden, (long long)o.gpt.layers, (long long)o.gpt.batch, (long long)o.gpt.seq, o.ranks,
              o.repeat, o.train ? "training steps (SGD)" : "forwards", o.rounds);
  for (const Contender& c : plans) std::printf("  %-20s %8.2f ms\n", c.name.c_str(), c.best_ms);
  if (hand)
    std::printf("auto / best hand (%s): %.3f (goal <= 1.05); load average %.2f over the last minute\n", hand->name.c_str(),
                plans[0].best_ms / hand->best_ms, load[0]);
}

BenchRegistrar reg_vs("auto-vs-hand", [](CLI::App& app) {
  static AutoVsHandOptions opt;
  CLI::App* cmd = app.add_subcommand("auto-vs-hand", "Measured forward or training step: --plan auto against the hand plans of examples/");
  add_gpt_options(cmd, opt.gpt);
  cmd->add_option("--ranks", opt.ranks, "ranks (threads backend)")->capture_default_str();
  cmd->add_option("--examples", opt.examples, "directory of the hand plans (gpt_*.json)")->capture_default_str();
  cmd->add_flag("--train", opt.train, "the training step (loss, backward, SGD update) instead of the forward");
  cmd->add_option("--rounds", opt.rounds, "alternating rounds")->capture_default_str();
  cmd->add_option("--repeat", opt.repeat, "forwards (or steps after the first) per measurement (the fastest counts)")->capture_default_str();
  cmd->add_flag("--json", opt.json, "print JSON");
  cmd->callback([] { auto_vs_hand(opt); });
});

}  // namespace
}  // namespace dt::bench
