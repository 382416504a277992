// `dtensor profile MODEL --weights W --inputs I [--mesh M --plan P] [--repeat 3] [--threads N]
// [--no-fuse] [--json]`: where a forward spends its time.
//
// The model runs once to warm up, then --repeat times; the fastest run's per-node times (the
// interpreter's node hook) give the time per op kind and the 20 slowest nodes. A linear fused
// with its activation (runtime/interpreter_fusion.h) is one kind, "linear+gelu"; --no-fuse runs
// the nodes separately (the before/after of the fusion in one binary). Every matmul-like node gets
// its FLOP count and achieved GFLOP/s (the registry's OpDef::gemm_shape and flops), set against a
// plain GEMM of the same [m, k] x [k, n] shape timed in the same process on the same threads
// (fastest of 3), and attention its GFLOP/s. "overall" is all matmul FLOPs over the whole
// forward's time against the time those GEMMs alone would take: the fraction of the GEMM rate the
// forward reaches. Peak memory is the interpreter's peak of live intermediates. Per timed run the
// process's wall and CPU time, its context switches and its page faults are reported too
// (runtime/process_usage.h): time lost to waiting, spinning or oversubscribed threads shows as wall
// above CPU per core, and buffers not recycled between runs as faults in the steady state.
//
// With --mesh/--plan the model is compiled and sharded as `dtensor run` does (default pass
// pipeline, threads backend, every rank in this process) and each rank's program is profiled: rank
// 0's tables in full, then per rank its time, the time its nodes spent issuing collectives and
// blocked in wait_tensor, and its peak memory, and per op kind the spread (min/max ms) over ranks.
// A rank's time runs from its first node's start to its last node's end in its fastest run.
// A pipeline plan runs its forward-only stage programs (what `run` runs: every micro-batch through
// every stage); per rank its stages, sends and receives, and its bubble: the time it spent blocked
// on receives (waiting for the previous stage), as a fraction of its time, next to the schedule's
// theoretical bubble.
//
// With --train (one device) the model's loss (autodiff::find_loss) is trained instead: the whole
// step graph (autodiff/train_step.h: forward, backward, one SGD update per parameter, lr 0.1, no
// momentum) is profiled, and its time is also split by phase: the forward nodes (the step graph's
// nodes up to the loss), the backward, and the optimizer updates, so a step/forward ratio can be
// read per op kind.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>

#include "dtensor/autodiff/autodiff.h"
#include "dtensor/autodiff/train_step.h"
#include "dtensor/core/blas_kernels.h"
#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/core/error.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/ir/op_kind.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/layout/device_mesh.h"
#include "dtensor/runtime/interpreter.h"
#include "dtensor/runtime/launcher.h"
#include "dtensor/runtime/process_usage.h"
#include "dtensor/sharding/compiler.h"
#include "dtensor/sharding/parallel_plan.h"
#include "dtensor/sharding/tensor_sharding.h"
#include "tools/command.h"
#include "dtensor/runtime/gemm_reference.h"
#include "tools/load_program.h"
#include "dtensor/job/job.h"
#include "dtensor/job/train_pipeline.h"
#include "dtensor/pipeline/schedule.h"
#include "tools/mesh_options.h"
#include "tools/threads_option.h"

namespace dt::tools {
namespace {

struct ProfileOptions {
  ModelFiles files;     // MODEL, --weights, --inputs
  MeshCliOptions mesh;  // --mesh, --plan (no --backend: threads only)
  int repeat = 3;
  bool json = false, no_fuse = false, train = false;
  std::optional<int> threads;
};

// One rank's fastest run: per-node seconds and the run's stats.
struct RankRun {
  int rank = 0;
  std::vector<double> node_seconds;
  double seconds = std::numeric_limits<double>::infinity();
  size_t peak_bytes = 0;
};

// Keeps the per-node times of the fastest of the runs a node hook sees (a run ends at the last node).
class FastestRun {
 public:
  explicit FastestRun(size_t nodes) : cur_(nodes) {}
  runtime::NodeHook hook() {
    return [this](const ir::Node&, size_t i, runtime::Clock::time_point s, runtime::Clock::time_point e) {
      if (i == 0) start_ = s;
      cur_[i] = std::chrono::duration<double>(e - s).count();
      if (i + 1 == cur_.size()) {
        const double t = std::chrono::duration<double>(e - start_).count();
        if (t < best_.seconds) {
          best_.seconds = t;
          best_.node_seconds = cur_;
        }
      }
    };
  }
  RankRun& best() { return best_; }

 private:
  std::vector<double> cur_;
  runtime::Clock::time_point start_;
  RankRun best_;
};

double gflops(double flops, double seconds) { return seconds > 0 ? flops / seconds / 1e9 : 0; }

// The process's wall and CPU time, context switches and page faults over `runs` timed runs, per run.
nlohmann::json usage_per_run(const runtime::ProcessUsage& u, int runs) {
  const double n = double(runs);
  return {{"runs", runs},
          {"wall_ms", u.wall_s * 1e3 / n},
          {"cpu_ms", u.cpu_s * 1e3 / n},
          {"cores_busy", u.wall_s > 0 ? u.cpu_s / u.wall_s : 0.0},
          {"voluntary_switches", double(u.voluntary_switches) / n},
          {"involuntary_switches", double(u.involuntary_switches) / n},
          {"minor_faults", double(u.minor_faults) / n},
          {"major_faults", double(u.major_faults) / n}};
}

// The op-kind label of every node: "linear+gelu" for a fused head, "" for a fused tail (its few
// nanoseconds are added to its head), else the op's name.
std::vector<std::string> kind_labels(const ir::Graph& g, const std::vector<runtime::EpilogueFusion>& fusions) {
  std::vector<std::string> label;
  for (const ir::Node* n : g.nodes()) label.emplace_back(ir::op_name(n->op));
  for (const runtime::EpilogueFusion& f : fusions) {
    label[size_t(f.head)] += "+" + label[size_t(f.tail)];
    label[size_t(f.tail)].clear();
  }
  return label;
}

// The tables of one rank's run: op kinds, top nodes, matmuls, overall and communication.
nlohmann::json rank_tables(const ir::Graph& g, const std::vector<runtime::EpilogueFusion>& fusions, RankRun run,
                           const runtime::GemmTimes& gemm_seconds) {
  const auto& nodes = g.nodes();
  for (const runtime::EpilogueFusion& f : fusions) {
    run.node_seconds[size_t(f.head)] += run.node_seconds[size_t(f.tail)];
    run.node_seconds[size_t(f.tail)] = 0;
  }
  const std::vector<double>& best = run.node_seconds;
  const std::vector<std::string> label = kind_labels(g, fusions);
  const double total = run.seconds;
  auto pct = [&](double s) { return total > 0 ? 100.0 * s / total : 0.0; };
  nlohmann::json j;
  j["rank"] = run.rank;
  j["time_ms"] = total * 1e3;
  j["peak_bytes"] = run.peak_bytes;

  std::map<std::string, std::pair<int, double>> kinds;
  double collective = 0, wait = 0, recv_wait = 0;  // recv_wait: blocked on a point-to-point receive
  int sends = 0, recvs = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (ir::op_def(nodes[i]->op).is_collective()) collective += best[i];
    sends += nodes[i]->op == ir::OpKind::send;
    recvs += nodes[i]->op == ir::OpKind::recv;
    if (nodes[i]->op == ir::OpKind::wait_tensor) {
      wait += best[i];
      const ir::Node* posted = nodes[i]->operands[0]->producer;
      if (posted && posted->op == ir::OpKind::recv) recv_wait += best[i];
    }
    if (label[i].empty()) continue;
    auto& [count, sec] = kinds[label[i]];
    ++count;
    sec += best[i];
  }
  j["collective_ms"] = collective * 1e3;
  j["wait_ms"] = wait * 1e3;
  j["recv_wait_ms"] = recv_wait * 1e3;
  j["sends"] = sends;
  j["recvs"] = recvs;
  std::vector<std::pair<std::string, std::pair<int, double>>> kv(kinds.begin(), kinds.end());
  std::sort(kv.begin(), kv.end(), [](const auto& x, const auto& y) { return x.second.second > y.second.second; });
  j["op_kinds"] = nlohmann::json::array();
  for (const auto& [op, cs] : kv)
    j["op_kinds"].push_back({{"op", op}, {"nodes", cs.first}, {"ms", cs.second * 1e3}, {"percent", pct(cs.second)}});

  std::vector<size_t> order;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!label[i].empty()) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return best[x] > best[y]; });
  j["top_nodes"] = nlohmann::json::array();
  for (size_t r = 0; r < std::min<size_t>(20, order.size()); ++r) {
    const ir::Node& n = *nodes[order[r]];
    j["top_nodes"].push_back({{"node", n.result()->name}, {"op", label[order[r]]}, {"ms", best[order[r]] * 1e3},
                              {"percent", pct(best[order[r]])}});
  }

  double mm_flops = 0, gemm_only = 0, attn_flops = 0;
  j["matmuls"] = nlohmann::json::array();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& n = *nodes[i];
    const ir::OpDef& def = ir::op_def(n.op);
    if (!def.flops) continue;
    nlohmann::json e = {{"node", n.result()->name}, {"op", label[i]}, {"ms", best[i] * 1e3}};
    const double f = def.flops(n);
    if (def.gemm_shape) {
      const ir::GemmShape g = def.gemm_shape(n);
      if (f <= 0) continue;
      const double ref = gemm_seconds.at({g.m, g.k, g.n}) * double(g.batch);
      mm_flops += f;
      gemm_only += ref;
      e.update({{"batch", g.batch}, {"m", g.m}, {"k", g.k}, {"n", g.n}, {"gflop", f / 1e9},
                {"gflops", gflops(f, best[i])}, {"gemm_gflops", gflops(f, ref)},
                {"ratio", best[i] > 0 ? ref / best[i] : 0.0}});
    } else {
      attn_flops += f;
      e.update({{"gflop", f / 1e9}, {"gflops", gflops(f, best[i])}, {"gemm_gflops", nullptr}, {"ratio", nullptr}});
    }
    j["matmuls"].push_back(e);
  }
  j["overall"] = {{"matmul_gflop", mm_flops / 1e9},
                  {"attention_gflop", attn_flops / 1e9},
                  {"gflops", gflops(mm_flops, total)},
                  {"gemm_gflops", gflops(mm_flops, gemm_only)},
                  {"gemm_only_ms", gemm_only * 1e3},
                  {"ratio", total > 0 ? gemm_only / total : 0.0}};
  return j;
}

nlohmann::json header(const ProfileOptions& opt, int threads) {
  return {{"model", opt.files.model}, {"threads", threads}, {"repeat", opt.repeat}, {"fusion", !opt.no_fuse},
          {"train", opt.train}};
}

// The phase of every node of a train step graph: its nodes up to the loss's producer are the
// forward, the optimizer updates (OpDef::optimizer_update) the optimizer, the rest the backward.
std::vector<std::string> step_phases(const ir::Graph& step) {
  const ir::Value* loss = autodiff::find_loss(step);
  std::vector<std::string> phase;
  bool forward = true;
  for (const ir::Node* n : step.nodes()) {
    const bool opt = ir::op_def(n->op).optimizer_update;
    phase.emplace_back(opt ? "optimizer" : forward ? "forward" : "backward");
    if (n == loss->producer) forward = false;
  }
  return phase;
}

// ms per phase and, per phase, per op kind (fused pairs keep their head's label).
nlohmann::json phase_tables(const ir::Graph& g, const std::vector<runtime::EpilogueFusion>& fusions,
                            const RankRun& run) {
  const std::vector<std::string> phase = step_phases(g), label = kind_labels(g, fusions);
  std::map<std::string, double> total;
  std::map<std::string, std::map<std::string, std::pair<int, double>>> kinds;
  for (size_t i = 0; i < phase.size(); ++i) {
    total[phase[i]] += run.node_seconds[i];
    const std::string& k = label[i].empty() ? label[size_t(std::find_if(fusions.begin(), fusions.end(), [&](const auto& f) {
                                                                      return size_t(f.tail) == i;
                                                                    })->head)]
                                            : label[i];
    auto& [count, sec] = kinds[phase[i]][k];
    ++count;
    sec += run.node_seconds[i];
  }
  nlohmann::json j = nlohmann::json::array();
  for (const char* ph : {"forward", "backward", "optimizer"}) {
    nlohmann::json list = nlohmann::json::array();
    std::vector<std::pair<std::string, std::pair<int, double>>> kv(kinds[ph].begin(), kinds[ph].end());
    std::sort(kv.begin(), kv.end(), [](const auto& x, const auto& y) { return x.second.second > y.second.second; });
    for (const auto& [op, cs] : kv) list.push_back({{"op", op}, {"nodes", cs.first}, {"ms", cs.second * 1e3}});
    j.push_back({{"phase", ph}, {"ms", total[ph] * 1e3}, {"op_kinds", list}});
  }
  return j;
}

nlohmann::json profile_one_device(const ProfileOptions& opt, int threads) {
  LoadedProgram p = load_program(opt.files);
  if (opt.train) {
    autodiff::TrainStep step = autodiff::make_train_step(std::move(p.graph), autodiff::OptimizerConfig{});
    for (auto& [k, v] : autodiff::fresh_state(step)) p.bindings[k] = v;
    p.graph = std::move(step.graph);
  }
  FastestRun fastest(p.graph.nodes().size());
  runtime::GemmTimes gemm_seconds;
  std::vector<runtime::EpilogueFusion> fusions;
  runtime::ProcessUsage usage;
  run_ranks(1, [&](ProcessGroup& world) {
    const runtime::GroupMap groups = runtime::make_groups(p.graph, world);
    runtime::Interpreter interp(p.graph);
    interp.set_fusion(!opt.no_fuse);
    if (interp.fusion()) fusions = interp.fusions();
    interp.set_node_hook(fastest.hook());
    runtime::ProcessUsage start;
    for (int r = 0; r <= opt.repeat; ++r) {  // run 0 warms up; the fastest is kept
      if (r == 1) start = runtime::ProcessUsage::now();
      runtime::RunStats s;
      interp.run(p.bindings, groups, &s);
      fastest.best().peak_bytes = s.peak_bytes;
    }
    usage = runtime::ProcessUsage::now() - start;
    runtime::time_gemms(p.graph, gemm_seconds);  // on this same thread (and so the same pool)
  });
  nlohmann::json j = header(opt, threads);
  j["ranks"] = 1;
  j.update(rank_tables(p.graph, fusions, fastest.best(), gemm_seconds));
  j["usage"] = usage_per_run(usage, opt.repeat);
  if (opt.train) j["phases"] = phase_tables(p.graph, fusions, fastest.best());
  return j;
}

// A pipeline's schedule, and per rank (added to per_rank, by rank) its stages, its sends and
// receives and its bubble: the time its nodes spent blocked waiting for a receive (an activation
// from the previous stage), as a fraction of its run, next to the schedule's theory
// (pipeline/schedule.h; a forward-only run idles more: no backwards fill the gaps).
nlohmann::json pipeline_table(const job::PipelinePrograms& pipe, const sharding::PipelinePlan& plan,
                              const std::vector<nlohmann::json>& tables, nlohmann::json& per_rank) {
  const int p = pipe.split.ranks(), m = pipe.split.microbatches, v = pipe.split.virtual_stages;
  for (const pipeline::StageProgram& sp : pipe.programs) {
    const nlohmann::json& t = tables[size_t(sp.rank)];
    nlohmann::json& r = per_rank[size_t(sp.rank)];
    const double ms = t["time_ms"].get<double>(), idle = t["recv_wait_ms"].get<double>();
    r.update({{"stages", sp.stages}, {"place", sp.place}, {"sends", t["sends"]}, {"recvs", t["recvs"]},
              {"recv_wait_ms", idle}, {"bubble", ms > 0 ? idle / ms : 0.0}});
  }
  return {{"schedule", plan.schedule}, {"pipeline_ranks", p}, {"stages", pipe.split.stages},
          {"virtual_stages", v}, {"microbatches", m}, {"theoretical_bubble", pipeline::theoretical_bubble(p, m, v)}};
}

nlohmann::json profile_mesh(const ProfileOptions& opt, int threads) {
  if (opt.mesh.mesh.empty() || opt.mesh.plan.empty())
    DT_THROW(ValueError) << "profile needs both --mesh and --plan (or neither)";
  if (opt.no_fuse) DT_THROW(ValueError) << "--no-fuse applies to one device only: profile without --mesh/--plan";
  if (opt.train) DT_THROW(ValueError) << "--train profiles one device only: profile without --mesh/--plan";
  const LoadedProgram p = load_program(opt.files);
  job::JobOptions jo = job_options(opt.mesh, PassCliOptions{}, p.graph);
  jo.backend = runtime::Backend::threads;  // every rank in this process, timed node by node
  const job::Job job = job::Job::compile(p.graph, std::move(jo));
  const DeviceMesh& mesh = job.mesh();
  const int n = mesh.size();
  const job::PipelinePrograms* pipe = job.pipeline();
  const std::vector<const ir::Graph*> programs = pipe ? pipe->programs_by_rank(n) : job.programs_by_rank();
  std::vector<FastestRun> fastest;
  for (int r = 0; r < n; ++r) fastest.emplace_back(programs[size_t(r)]->nodes().size());
  const auto hook = [&](int rank) { return fastest[size_t(rank)].hook(); };
  // Runs every rank --repeat times after one warm-up run (the hook keeps the fastest of all runs);
  // returns each rank's peak memory.
  std::vector<size_t> peak(static_cast<size_t>(n));
  runtime::ProcessUsage usage;
  if (pipe) {
    // A pipeline's ranks run stage programs bound per micro-batch (job/train_pipeline.h): Job::run
    // binds and launches them.
    const job::Weights weights = job::Weights::full(p.bindings);
    job::RunOptions ro;
    ro.node_hook = hook;
    job.run(weights, p.bindings, ro);
    ro.repeat = opt.repeat;
    const runtime::ProcessUsage start = runtime::ProcessUsage::now();
    const job::RunResult res = job.run(weights, p.bindings, ro);
    usage = runtime::ProcessUsage::now() - start;
    for (int r = 0; r < n; ++r) peak[size_t(r)] = res.ranks[size_t(r)].peak_bytes;
  } else {
    // The loaded bindings hold the parameters and the data inputs: each rank takes its shards.
    const std::vector<runtime::Bindings> bindings = job.bindings_by_rank(job::Weights::full(p.bindings), p.bindings);
    // One launch: run 0 warms the ranks' interpreters up (packing, first allocations) and the
    // usage covers runs 1..repeat, as on one device.
    runtime::LaunchOptions lo;
    lo.node_hook = hook;
    lo.repeat = opt.repeat + 1;
    runtime::ProcessUsage start;
    lo.before_run = [&](int run) {
      if (run == 1) start = runtime::ProcessUsage::now();
    };
    const std::vector<runtime::RankResult> results = runtime::launch(programs, bindings, lo);
    usage = runtime::ProcessUsage::now() - start;
    for (int r = 0; r < n; ++r) peak[size_t(r)] = results[size_t(r)].stats.peak_bytes;
  }
  runtime::GemmTimes gemm_seconds;
  for (const ir::Graph* g : programs) runtime::time_gemms(*g, gemm_seconds);

  nlohmann::json j = header(opt, threads);
  j["mesh"] = mesh.str();
  j["plan"] = opt.mesh.plan;
  j["ranks"] = n;
  std::vector<nlohmann::json> per_rank;
  for (int r = 0; r < n; ++r) {
    RankRun run = fastest[size_t(r)].best();
    run.rank = r;
    run.peak_bytes = peak[size_t(r)];
    per_rank.push_back(rank_tables(*programs[size_t(r)], runtime::find_epilogue_fusions(*programs[size_t(r)]), run,
                                   gemm_seconds));
  }
  j.update(per_rank[0]);  // rank 0's tables in full
  j["usage"] = usage_per_run(usage, opt.repeat);  // the whole process: every rank's threads
  j["per_rank"] = nlohmann::json::array();
  for (const nlohmann::json& t : per_rank)
    j["per_rank"].push_back({{"rank", t["rank"]}, {"time_ms", t["time_ms"]}, {"collective_ms", t["collective_ms"]},
                             {"wait_ms", t["wait_ms"]}, {"peak_bytes", t["peak_bytes"]},
                             {"gemm_rate_ratio", t["overall"]["ratio"]}});
  if (pipe) j["pipeline"] = pipeline_table(*pipe, *job.options().plan.pipeline, per_rank, j["per_rank"]);
  // Per op kind: min and max ms over the ranks (a kind a rank lacks counts 0 there).
  std::map<std::string, std::vector<double>> spread;
  for (size_t r = 0; r < per_rank.size(); ++r)
    for (const auto& e : per_rank[r]["op_kinds"]) {
      auto& v = spread[e["op"].get<std::string>()];
      v.resize(per_rank.size(), 0.0);
      v[r] = e["ms"].get<double>();
    }
  j["op_kind_spread"] = nlohmann::json::array();
  for (const auto& e : per_rank[0]["op_kinds"]) {
    const auto& v = spread[e["op"].get<std::string>()];
    j["op_kind_spread"].push_back(
        {{"op", e["op"]}, {"min_ms", *std::min_element(v.begin(), v.end())}, {"max_ms", *std::max_element(v.begin(), v.end())}});
  }
  return j;
}

void print_text(const nlohmann::json& j) {
  const bool mesh = j.contains("mesh");
  std::printf("model %s on %s, %d thread(s) per rank%s: %.3f ms (fastest of %d), peak memory %.2f MiB\n",
              j["model"].get<std::string>().c_str(),
              mesh ? fmt::format("mesh {} ({} ranks), rank 0", j["mesh"].get<std::string>(), j["ranks"].get<int>()).c_str()
                   : "1 device",
              j["threads"].get<int>(), j["fusion"].get<bool>() ? "" : ", fusion off", j["time_ms"].get<double>(),
              j["repeat"].get<int>(), double(j["peak_bytes"].get<size_t>()) / (1 << 20));
  std::printf("BLAS kernels: OpenBLAS %s\n", j["blas_kernels"].get<std::string>().c_str());
  const auto& u = j["usage"];
  std::printf("per run (mean of %d): wall %.3f ms, CPU %.3f ms (%.2f cores busy), context switches %.1f voluntary, "
              "%.1f involuntary, page faults %.1f minor, %.1f major\n",
              u["runs"].get<int>(), u["wall_ms"].get<double>(), u["cpu_ms"].get<double>(), u["cores_busy"].get<double>(),
              u["voluntary_switches"].get<double>(), u["involuntary_switches"].get<double>(),
              u["minor_faults"].get<double>(), u["major_faults"].get<double>());
  std::printf("\n%-34s %6s %10s %7s\n", "op kind", "nodes", "ms", "%");
  for (const auto& e : j["op_kinds"])
    std::printf("%-34s %6d %10.3f %6.1f%%\n", e["op"].get<std::string>().c_str(), e["nodes"].get<int>(),
                e["ms"].get<double>(), e["percent"].get<double>());
  std::printf("\n%-34s %-30s %10s %7s\n", "top nodes", "op", "ms", "%");
  for (const auto& e : j["top_nodes"])
    std::printf("%-34s %-30s %10.3f %6.1f%%\n", e["node"].get<std::string>().c_str(), e["op"].get<std::string>().c_str(),
                e["ms"].get<double>(), e["percent"].get<double>());
  std::printf("\n%-34s %-30s %8s %10s %10s %7s\n", "matmul-like node", "op", "GFLOP", "GFLOP/s", "GEMM GF/s", "ratio");
  for (const auto& e : j["matmuls"]) {
    std::string ref = e["gemm_gflops"].is_null() ? "-" : fmt::format("{:.1f}", e["gemm_gflops"].get<double>());
    std::string ratio = e["ratio"].is_null() ? "-" : fmt::format("{:.2f}", e["ratio"].get<double>());
    std::printf("%-34s %-30s %8.3f %10.1f %10s %7s\n", e["node"].get<std::string>().c_str(),
                e["op"].get<std::string>().c_str(), e["gflop"].get<double>(), e["gflops"].get<double>(), ref.c_str(),
                ratio.c_str());
  }
  const auto& o = j["overall"];
  std::printf("\noverall: %.2f GFLOP of matmuls at %.1f GFLOP/s over the whole forward; the same GEMMs alone run at "
              "%.1f GFLOP/s (%.3f ms): the forward reaches %.0f%% of the GEMM rate\n",
              o["matmul_gflop"].get<double>(), o["gflops"].get<double>(), o["gemm_gflops"].get<double>(),
              o["gemm_only_ms"].get<double>(), 100 * o["ratio"].get<double>());
  if (j.contains("phases")) {
    for (const auto& ph : j["phases"]) {
      std::printf("\nphase %-28s %6s %10.3f %6.1f%%\n", ph["phase"].get<std::string>().c_str(), "",
                  ph["ms"].get<double>(), 100 * ph["ms"].get<double>() / j["time_ms"].get<double>());
      for (const auto& e : ph["op_kinds"])
        std::printf("  %-32s %6d %10.3f\n", e["op"].get<std::string>().c_str(), e["nodes"].get<int>(),
                    e["ms"].get<double>());
    }
  }
  if (!mesh) return;
  std::printf("\n%-6s %10s %14s %10s %12s %10s\n", "rank", "ms", "collectives ms", "wait ms", "peak MiB", "GEMM rate");
  for (const auto& r : j["per_rank"])
    std::printf("%-6d %10.3f %14.3f %10.3f %12.2f %9.0f%%\n", r["rank"].get<int>(), r["time_ms"].get<double>(),
                r["collective_ms"].get<double>(), r["wait_ms"].get<double>(),
                double(r["peak_bytes"].get<size_t>()) / (1 << 20), 100 * r["gemm_rate_ratio"].get<double>());
  if (j.contains("pipeline")) {
    const auto& pl = j["pipeline"];
    std::printf("\npipeline %s: %d ranks along it, %d stages, %d micro-batches; theoretical bubble %.1f%%\n",
                pl["schedule"].get<std::string>().c_str(), pl["pipeline_ranks"].get<int>(), pl["stages"].get<int>(),
                pl["microbatches"].get<int>(), 100 * pl["theoretical_bubble"].get<double>());
    std::printf("%-6s %-12s %6s %6s %14s %8s\n", "rank", "stages", "sends", "recvs", "recv wait ms", "bubble");
    for (const auto& r : j["per_rank"]) {
      std::string stages;
      for (const auto& x : r["stages"]) stages += (stages.empty() ? "" : ",") + std::to_string(x.get<int>());
      std::printf("%-6d %-12s %6d %6d %14.3f %7.1f%%\n", r["rank"].get<int>(), stages.c_str(), r["sends"].get<int>(),
                  r["recvs"].get<int>(), r["recv_wait_ms"].get<double>(), 100 * r["bubble"].get<double>());
    }
  }
  std::printf("\n%-34s %10s %10s\n", "op kind over ranks", "min ms", "max ms");
  for (const auto& e : j["op_kind_spread"])
    std::printf("%-34s %10.3f %10.3f\n", e["op"].get<std::string>().c_str(), e["min_ms"].get<double>(),
                e["max_ms"].get<double>());
}

void profile_command(const ProfileOptions& opt) {
  if (opt.repeat < 1) DT_THROW(ValueError) << "--repeat must be >= 1, got " << opt.repeat;
  const bool mesh = opt.mesh.sharded();
  int ranks = 1;
  if (!opt.mesh.mesh.empty()) ranks = int(DeviceMesh::parse(opt.mesh.mesh).size());
  const int threads = apply_threads_option(opt.threads, ranks);
  nlohmann::json j = mesh ? profile_mesh(opt, threads) : profile_one_device(opt, threads);
  j["blas_kernels"] = blas_kernels();  // OpenBLAS's core: a slow choice shows here (blas_kernels.h)
  if (opt.json)
    std::printf("%s\n", j.dump(2).c_str());
  else
    print_text(j);
}

void setup(CLI::App& app) {
  static ProfileOptions opt;
  CLI::App* cmd = app.add_subcommand("profile", "Time a model per op kind and node; GFLOP/s of its matmuls against plain GEMMs");
  add_model_options(cmd, opt.files);
  cmd->add_option("--repeat", opt.repeat, "timed runs after one warm-up; the fastest is reported")->capture_default_str();
  add_mesh_options(cmd, opt.mesh, {.what = "profile every rank's program (threads backend)", .with_backend = false});
  cmd->add_flag("--no-fuse", opt.no_fuse, "run fused linear + activation pairs as separate nodes (one device)");
  cmd->add_flag("--train", opt.train,
                "profile the training step of the model's loss (forward, backward, SGD update; one device), "
                "with the time per phase");
  cmd->add_flag("--json", opt.json, "print the profile as JSON");
  add_threads_option(cmd, opt.threads);
  cmd->callback([] { profile_command(opt); });
}

CommandRegistrar reg("profile", setup);

}  // namespace
}  // namespace dt::tools
