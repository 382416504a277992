// `dtensor bench passes`: time of the bucketing passes on graphs of N independent all_gathers and
// N independent reduce_scatters of 128x64 f32 inputs on a group of 2 ranks, cap 4 MiB (the
// Inductor anchor: PyTorch 2.11 takes 13.1 s / 14.2 s at N = 2,048). Each size is measured at
// N and 10*N to show the growth; the figures are the median and the minimum (the machine may be shared) of --iters runs of the pass alone
// (each on a fresh copy of the graph; building the graph is not timed).
#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dtensor/ir/builder.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/passes/pass_manager.h"
#include "bench/bench_registry.h"

namespace dt::bench {
namespace {

struct PassesBenchOptions {
  int collectives = 2048;
  int iters = 5;
  double cap_mb = 4.0;
  bool json = false;
};

// Returns a graph of n independent collectives of kind `op` on f32[128, 64] inputs, each waited.
ir::Graph independent_collectives(ir::OpKind op, int n) {
  ir::Graph g("bench");
  ir::Builder b(g);
  b.group("g", {0, 1});
  std::vector<ir::Value*> outs;
  std::vector<ir::Value*> colls;
  for (int i = 0; i < n; ++i) {
    ir::Value* x = b.input(fmt::format("x{}", i), DType::f32, {128, 64});
    colls.push_back(op == ir::OpKind::all_gather_into_tensor ? b.all_gather_into_tensor(x, "g")
                                                             : b.reduce_scatter_tensor(x, "g"));
  }
  for (ir::Value* c : colls) outs.push_back(b.wait_tensor(c));
  b.outputs(outs);
  return g;
}

struct Result {
  std::string kind;
  int collectives = 0;
  double seconds = 0, min_seconds = 0;
  size_t nodes_before = 0, nodes_after = 0, collectives_after = 0;
};

Result measure(ir::OpKind op, int n, const PassesBenchOptions& o) {
  passes::PassOptions po;
  po.bucket_cap_mb = {o.cap_mb};
  const char* pass = op == ir::OpKind::all_gather_into_tensor ? "bucket-all-gather" : "bucket-reduce-scatter";
  ir::Graph base = independent_collectives(op, n);
  Result r{op == ir::OpKind::all_gather_into_tensor ? "all_gather" : "reduce_scatter", n};
  r.nodes_before = base.nodes().size();
  std::vector<double> times;
  for (int it = 0; it < std::max(1, o.iters); ++it) {
    ir::Graph g = base.clone();
    auto passes = passes::parse_pipeline(pass, po);
    auto t0 = std::chrono::steady_clock::now();
    passes[0]->run(g);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (it == 0) {
      r.nodes_after = g.nodes().size();
      for (const auto& node : g.nodes()) r.collectives_after += ir::op_def(node->op).needs_wait;
    }
  }
  std::sort(times.begin(), times.end());
  r.seconds = times[times.size() / 2];
  r.min_seconds = times.front();
  return r;
}

void run_passes_bench(const PassesBenchOptions& o) {
  std::vector<Result> results;
  for (ir::OpKind op : {ir::OpKind::all_gather_into_tensor, ir::OpKind::reduce_scatter_tensor})
    for (int n : {o.collectives, o.collectives * 10}) results.push_back(measure(op, n, o));
  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const Result& r : results)
      j.push_back({{"kind", r.kind}, {"collectives", r.collectives}, {"pass_ms", r.seconds * 1e3}, {"pass_min_ms", r.min_seconds * 1e3},
                   {"nodes_before", r.nodes_before}, {"nodes_after", r.nodes_after},
                   {"collectives_after", r.collectives_after}, {"cap_mb", o.cap_mb}});
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("{:<15} {:>12} {:>10} {:>10} {:>13} {:>12} {:>18}\n", "kind", "collectives", "pass_ms", "min_ms", "nodes_before",
             "nodes_after", "collectives_after");
  for (const Result& r : results)
    fmt::print("{:<15} {:>12} {:>10.3f} {:>10.3f} {:>13} {:>12} {:>18}\n", r.kind, r.collectives, r.seconds * 1e3, r.min_seconds * 1e3,
               r.nodes_before, r.nodes_after, r.collectives_after);
  fmt::print("PyTorch 2.11 anchor at 2048 (cap 4 MiB): all_gather 13.1 s, reduce_scatter 14.2 s\n");
}

BenchRegistrar reg("passes", [](CLI::App& bench) {
  static PassesBenchOptions opt;
  CLI::App* cmd = add_bench(bench, "passes", "Bucketing pass time on N and 10N independent collectives", opt.json,
                            [] { run_passes_bench(opt); });
  cmd->add_option("--collectives", opt.collectives, "Collectives per graph (also run at 10x)")->capture_default_str();
  cmd->add_option("--iters", opt.iters, "Runs per size (median reported)")->capture_default_str();
  cmd->add_option("--bucket-cap-mb", opt.cap_mb, "Bucket cap in MiB")->capture_default_str();
});

}  // namespace
}  // namespace dt::bench
