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

// `dtensor bench auto-vs-hand [--vocab 4096 --hidden 512 --heads 8 --layers 4 --batch 4 --seq 256]
//  [--ranks 4] [--examples examples] [--rounds 3] [--repeat 5] [--json]`: the measured forward of
// the example gpt under --plan auto and under every hand plan of examples/ (gpt_*.json; a 1-d
// plan on --ranks, a 2-d one on 2 x ranks/2) on the threads backend. Each figure is the slowest
// rank's fastest of --repeat forwards, the fastest over rounds that alternate the plans (a busy
// spell of the shared machine hits them all); the ratio is auto / the best hand plan (goal <= 1.05),
// printed with the load average over the run.
struct AutoVsHandOptions {
  ir::GptConfig gpt{.vocab = 4096, .hidden = 512, .heads = 8, .layers = 4, .batch = 4, .seq = 256};
  int ranks = 4, rounds = 3, repeat = 5;
  std::string examples = "examples";
  bool json = false;
};

struct Contender {
  std::string name;
  std::optional<job::Job> job;
  double estimate_us = 0, best_ms = 1e30;
};

void auto_vs_hand(const AutoVsHandOptions& o) {
  if (o.ranks < 2 || o.rounds < 1 || o.repeat < 1) DT_THROW(ValueError) << "--ranks >= 2, --rounds and --repeat >= 1";
  const ir::Graph g = ir::build_gpt(fitted_max_seq(o.gpt));
  const job::Weights weights = job::Weights::full(ir::random_weights(g, 0));
  Generator gen(1);
  const job::TensorMap inputs = {{"input", randint({o.gpt.batch, o.gpt.seq}, 0, o.gpt.vocab, gen)}};
  std::vector<Contender> plans;
  {
    job::JobOptions jo;
    jo.mesh = DeviceMesh(Shape{o.ranks});
    const autoplan::SearchResult r = autoplan::search(g, jo.mesh);
    jo.plan = r.plan;
    jo.passes.options = r.pass_options;
    plans.push_back({"auto", job::Job::compile(g, std::move(jo)), r.estimate.step_us});
  }
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(o.examples)) {
    const std::string f = e.path().filename().string();
    if (f.starts_with("gpt_") && f.ends_with(".json")) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) DT_THROW(IoError) << "no hand plans gpt_*.json in " << o.examples << " (pass --examples)";
  for (const auto& f : files) {
    job::JobOptions jo;
    jo.plan = sharding::ParallelPlan::load(f.string());
    if (jo.plan.mesh_dims.size() > 2 || (jo.plan.mesh_dims.size() == 2 && o.ranks % 2)) continue;
    jo.mesh = jo.plan.mesh_dims.size() == 2 ? DeviceMesh(Shape{2, o.ranks / 2}) : DeviceMesh(Shape{o.ranks});
    try {
      job::Job j = job::Job::compile(g, std::move(jo));
      plans.push_back({f.filename().string(), std::move(j), 0});
    } catch (const dt::Error& e) {
      std::fprintf(stderr, "bench auto-vs-hand: skipping %s: %s\n", f.string().c_str(), e.what());
    }
  }
  job::RunOptions ro;
  ro.repeat = o.repeat;
  for (int round = 0; round < o.rounds; ++round)
    for (Contender& c : plans) {
      const job::RunResult r = c.job->run(weights, inputs, ro);
      double ms = 0;
      for (const job::RankStats& s : r.ranks) ms = std::max(ms, s.time_ms);
      c.best_ms = std::min(c.best_ms, ms);
    }
  double load[3] = {-1, -1, -1};
  if (getloadavg(load, 3) < 0) load[0] = -1;
  const Contender* hand = nullptr;
  for (size_t k = 1; k < plans.size(); ++k)
    if (!hand || plans[k].best_ms < hand->best_ms) hand = &plans[k];
  nlohmann::json j = {{"ranks", o.ranks}, {"rounds", o.rounds}, {"repeat", o.repeat}, {"load_average_1min", load[0]},
                      {"auto_plan", nlohmann::json::parse(plans[0].job->options().plan.to_json())}};
  for (const Contender& c : plans) j["forward_ms"][c.name] = c.best_ms;
  if (hand) {
    j["best_hand"] = hand->name;
    j["auto_over_best_hand"] = plans[0].best_ms / hand->best_ms;
  }
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("gpt hidden %lld, %lld layers, batch %lld x seq %lld on %d ranks (threads): fastest of %d forwards, %d rounds\n",
              (long long)o.gpt.hidden, (long long)o.gpt.layers, (long long)o.gpt.batch, (long long)o.gpt.seq, o.ranks,
              o.repeat, o.rounds);
  for (const Contender& c : plans) std::printf("  %-20s %8.2f ms\n", c.name.c_str(), c.best_ms);
  if (hand)
    std::printf("auto / best hand (%s): %.3f (goal <= 1.05); load average %.2f over the last minute\n", hand->name.c_str(),
                plans[0].best_ms / hand->best_ms, load[0]);
}

BenchRegistrar reg_vs("auto-vs-hand", [](CLI::App& app) {
  static AutoVsHandOptions opt;
  CLI::App* cmd = app.add_subcommand("auto-vs-hand", "Measured forward: --plan auto against the hand plans of examples/");
  add_gpt_options(cmd, opt.gpt);
  cmd->add_option("--ranks", opt.ranks, "ranks (threads backend)")->capture_default_str();
  cmd->add_option("--examples", opt.examples, "directory of the hand plans (gpt_*.json)")->capture_default_str();
  cmd->add_option("--rounds", opt.rounds, "alternating rounds")->capture_default_str();
  cmd->add_option("--repeat", opt.repeat, "forwards per measurement (the fastest counts)")->capture_default_str();
  cmd->add_flag("--json", opt.json, "print JSON");
  cmd->callback([] { auto_vs_hand(opt); });
});

}  // namespace
}  // namespace dt::bench
