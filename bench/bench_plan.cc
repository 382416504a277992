// `dtensor bench plan`: how fast the redistribution planner plans (uncached and cached), how
// fast a no-op redistribute dispatches, the wall time of two 64 MiB redistributions on 4 threads
// ranks, and the bytes per rank of our plans against PyTorch's greedy order on the anchor cases
// (anchors/: meshes [8] and [2,4], shapes 1024x1024 and 1023x517, f32).
//
// Planning times are means over many calls after a warm-up (uncached: plan_uncached; cached:
// RedistributePlanner::plan on a warm cache). Redistribution times are medians over --iters
// calls, each between two barriers, on rank 0; the same move in PyTorch's greedy order (all_gather
// then chunk for S(0) -> S(1)) runs through our executor for comparison.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/eager/dtensor.h"
#include "dtensor/redistribute/executor.h"
#include "dtensor/redistribute/pytorch_greedy.h"
#include "bench/bench_registry.h"

namespace dt::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct PlanBenchOptions {
  bool json = false;
  int iters = 10;
  int64_t side = 4096;  // 4096 x 4096 f32 = 64 MiB
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct PlanningCase {
  std::string name;
  Shape mesh;
  const char* src;
  const char* dst;
};

nlohmann::json bench_planning() {
  const std::vector<PlanningCase> cases = {
      {"1d", {8}, "S(0)", "S(1)"},
      {"2d", {2, 4}, "S(0),S(1)", "S(1),S(0)"},
      {"3d", {2, 2, 2}, "S(0),S(1),P(sum)", "S(1),R,S(0)"},
  };
  nlohmann::json out = nlohmann::json::array();
  for (const PlanningCase& c : cases) {
    Placements src = parse_placements(c.src), dst = parse_placements(c.dst);
    Shape shape{1023, 517};
    RedistributePlanner planner;
    int64_t steps = int64_t(planner.plan_uncached(c.mesh, src, dst, shape, DType::f32).steps.size());
    const int uncached_iters = 2000;
    auto t0 = Clock::now();
    int64_t sink = 0;
    for (int i = 0; i < uncached_iters; ++i) sink += planner.plan_uncached(c.mesh, src, dst, shape, DType::f32).total_bytes;
    double uncached_us = seconds_since(t0) / uncached_iters * 1e6;
    planner.plan(c.mesh, src, dst, shape, DType::f32);
    const int cached_iters = 1000000;
    t0 = Clock::now();
    for (int i = 0; i < cached_iters; ++i) sink += planner.plan(c.mesh, src, dst, shape, DType::f32)->total_bytes;
    double cached_us = seconds_since(t0) / cached_iters * 1e6;
    asm volatile("" : : "r"(sink) : "memory");
    out.push_back({{"mesh", c.mesh}, {"name", c.name}, {"from", c.src}, {"to", c.dst}, {"steps", steps},
                   {"uncached_us", uncached_us}, {"cached_us", cached_us}});
  }
  return out;
}

// Returns the mean microseconds of DTensor::redistribute to its own placements (no plan, no
// communication), measured on rank 0 of 4 threads.
double bench_noop_dispatch() {
  double us = 0;
  run_ranks(4, [&](ProcessGroup& world) {
    auto groups = MeshGroups::create(world, DeviceMesh({4}));
    DTensor x = distribute_tensor(Tensor::zeros({64, 64}), groups, parse_placements("S(0)"));
    Placements same = parse_placements("S(0)");
    const int iters = 1000000;
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      DTensor y = x.redistribute(same);
      asm volatile("" : : "r"(&y) : "memory");
    }
    if (world.rank() == 0) us = seconds_since(t0) / iters * 1e6;
  });
  return us;
}

nlohmann::json bench_redistribution(const PlanBenchOptions& opt) {
  nlohmann::json out = nlohmann::json::array();
  const int n = 4;
  Shape shape{opt.side, opt.side};
  Tensor full = Tensor::uninitialized(shape, DType::f32);
  {
    float* p = full.data<float>();
    for (int64_t i = 0; i < full.numel(); ++i) p[i] = float(i % 1000);
  }
  // memcpy of the tensor, for scale.
  Tensor copy = Tensor::uninitialized(shape, DType::f32);
  std::memcpy(copy.raw_data(), full.raw_data(), full.nbytes());
  auto t0 = Clock::now();
  std::memcpy(copy.raw_data(), full.raw_data(), full.nbytes());
  double memcpy_ms = seconds_since(t0) * 1e3;
  for (auto [src, dst] : {std::pair{"S(0)", "R"}, std::pair{"S(0)", "S(1)"}}) {
    auto plan = default_planner().plan({n}, parse_placements(src), parse_placements(dst), shape, DType::f32);
    // PyTorch's order for the same move (all_gather then chunk for S(0) -> S(1)), run by our executor.
    auto greedy = pytorch_greedy_plan({n}, plan->src, plan->dst, shape, DType::f32);
    std::vector<double> times, greedy_times;
    bool ok = true;
    run_ranks(n, [&](ProcessGroup& world) {
      auto groups = MeshGroups::create(world, DeviceMesh({n}));
      DTensor x = distribute_tensor(full, groups, parse_placements(src));
      DTensor y = x.redistribute(parse_placements(dst));  // warm-up
      for (int i = 0; i < opt.iters; ++i) {
        world.barrier()->wait();
        auto start = Clock::now();
        y = x.redistribute(parse_placements(dst));
        world.barrier()->wait();
        if (world.rank() == 0) times.push_back(seconds_since(start) * 1e3);
      }
      if (greedy && greedy->steps != plan->steps) {
        Tensor g = execute_plan(*greedy, x.to_local(), *groups);  // warm-up
        for (int i = 0; i < opt.iters; ++i) {
          world.barrier()->wait();
          auto start = Clock::now();
          g = execute_plan(*greedy, x.to_local(), *groups);
          world.barrier()->wait();
          if (world.rank() == 0) greedy_times.push_back(seconds_since(start) * 1e3);
        }
        if (g.shape() != y.to_local().shape() || g.to_doubles() != y.to_local().to_doubles()) ok = false;
      }
      // Spot-check the result: the first element of the local shard.
      Shape off = y.spec().global_offset(groups->global_rank());
      if (y.to_local().numel() > 0 && y.to_local().at(Shape(size_t(2), 0)) != full.at(off)) ok = false;
    });
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0.0 : v[v.size() / 2];
    };
    double ms = median(times);
    nlohmann::json r = {{"from", src}, {"to", dst}, {"ranks", n}, {"tensor_bytes", full.nbytes()},
                        {"bytes_per_rank", plan->total_bytes}, {"collectives", plan->collective_counts()},
                        {"median_ms", ms}, {"gbs_per_rank", double(plan->total_bytes) / (ms * 1e-3) / 1e9},
                        {"memcpy_tensor_ms", memcpy_ms}, {"correct", ok}};
    if (greedy && greedy->steps != plan->steps) {
      r["pytorch_order_ms"] = median(greedy_times);
      r["pytorch_order_bytes_per_rank"] = greedy->total_bytes;
    }
    out.push_back(r);
    if (!ok) bench_exit_code() = 1;
  }
  return out;
}

// The anchor cases: every pair of {S(0), S(1), R, P(sum)} on [8]; the [2,4] sources and targets
// PyTorch was measured on.
nlohmann::json bench_anchor_bytes(int64_t& ours_total, int64_t& torch_total) {
  std::vector<std::pair<Shape, std::pair<std::string, std::string>>> cases;
  for (const char* a : {"S(0)", "S(1)", "R", "P(sum)"})
    for (const char* b : {"S(0)", "S(1)", "R", "P(sum)"}) cases.push_back({{8}, {a, b}});
  for (const char* a : {"S(0),S(1)", "S(0),S(0)", "R,S(0)", "P(sum),S(1)", "S(1),P(sum)", "P(sum),P(sum)"})
    for (const char* b : {"R,R", "S(1),S(0)", "S(0),S(1)", "R,S(1)", "S(0),R"}) cases.push_back({{2, 4}, {a, b}});
  nlohmann::json out = nlohmann::json::array();
  RedistributePlanner planner;
  for (Shape shape : {Shape{1024, 1024}, Shape{1023, 517}})
    for (const auto& [mesh, pair] : cases) {
      Placements src = parse_placements(pair.first), dst = parse_placements(pair.second);
      // PyTorch refuses a public redistribution to Partial (anchors: RuntimeError).
      bool refused = false;
      for (size_t m = 0; m < src.size(); ++m) refused |= dst[m].is_partial() && src[m] != dst[m];
      if (refused) continue;
      auto ours = planner.plan(mesh, src, dst, shape, DType::f32);
      auto torch = pytorch_greedy_plan(mesh, src, dst, shape, DType::f32, planner.cost_model());
      if (!torch) continue;
      ours_total += ours->total_bytes;
      torch_total += torch->total_bytes;
      out.push_back({{"mesh", mesh}, {"shape", shape}, {"from", pair.first}, {"to", pair.second},
                     {"bytes", ours->total_bytes}, {"pytorch_bytes", torch->total_bytes},
                     {"collectives", ours->collective_counts()}, {"pytorch_collectives", torch->collective_counts()},
                     {"time_us", ours->total_time_us}, {"pytorch_time_us", torch->total_time_us}});
    }
  return out;
}

void run_bench(const PlanBenchOptions& opt) {
  nlohmann::json planning = bench_planning();
  double noop_us = bench_noop_dispatch();
  nlohmann::json redist = bench_redistribution(opt);
  int64_t ours_total = 0, torch_total = 0;
  nlohmann::json anchors = bench_anchor_bytes(ours_total, torch_total);
  if (opt.json) {
    nlohmann::json j = {{"planning", planning}, {"noop_redistribute_us", noop_us}, {"redistribute", redist},
                        {"anchors", anchors}, {"anchor_bytes_total", ours_total},
                        {"anchor_pytorch_bytes_total", torch_total}};
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("planning (1023x517 f32):\n");
  for (const auto& p : planning)
    fmt::print("  {:<3} mesh {:<10} {:>18} -> {:<14} {} steps  uncached {:8.2f} us  cached {:6.3f} us\n",
               p["name"].get<std::string>(), p["mesh"].dump(), p["from"].get<std::string>(), p["to"].get<std::string>(),
               p["steps"].get<int64_t>(), p["uncached_us"].get<double>(), p["cached_us"].get<double>());
  fmt::print("no-op redistribute dispatch: {:.3f} us\n", noop_us);
  fmt::print("redistribution of {}x{} f32 on 4 threads ranks (median of {}):\n", opt.side, opt.side, opt.iters);
  for (const auto& r : redist)
    fmt::print("  {:>5} -> {:<5} {:>10} bytes/rank  {:8.2f} ms  {:6.2f} GB/s per rank  (memcpy of the tensor: {:.2f} ms){}\n",
               r["from"].get<std::string>(), r["to"].get<std::string>(), r["bytes_per_rank"].get<int64_t>(),
               r["median_ms"].get<double>(), r["gbs_per_rank"].get<double>(), r["memcpy_tensor_ms"].get<double>(),
               r["correct"].get<bool>() ? "" : "  WRONG RESULT");
  for (const auto& r : redist)
    if (r.contains("pytorch_order_ms"))
      fmt::print("  {:>5} -> {:<5} in PyTorch's order: {:>10} bytes/rank  {:8.2f} ms\n", r["from"].get<std::string>(),
                 r["to"].get<std::string>(), r["pytorch_order_bytes_per_rank"].get<int64_t>(),
                 r["pytorch_order_ms"].get<double>());
  fmt::print("anchor cases (bytes per rank, ours vs PyTorch's greedy order):\n");
  for (const auto& a : anchors) {
    int64_t b = a["bytes"], t = a["pytorch_bytes"];
    if (b == t) continue;
    fmt::print("  {:<7} {:<12} {:>14} -> {:<10} {:>10} vs {:>10}  ({:+.1f}%)\n", a["mesh"].dump(), a["shape"].dump(),
               a["from"].get<std::string>(), a["to"].get<std::string>(), b, t, t ? 100.0 * double(b - t) / double(t) : 0.0);
  }
  fmt::print("  ({} cases, the others equal) total: {} vs {} bytes ({:+.1f}%)\n", anchors.size(), ours_total,
             torch_total, torch_total ? 100.0 * double(ours_total - torch_total) / double(torch_total) : 0.0);
}

BenchRegistrar reg("plan", [](CLI::App& bench) {
  static PlanBenchOptions opt;
  CLI::App* cmd = add_bench(bench, "plan",
                            "Redistribution planner: planning time, 64 MiB redistributions, bytes vs PyTorch", opt.json,
                            [] { run_bench(opt); });
  cmd->add_option("--iters", opt.iters, "Timed redistributions per case")->capture_default_str();
  cmd->add_option("--side", opt.side, "Side of the square f32 tensor redistributed")->capture_default_str();
});

}  // namespace
}  // namespace dt::bench
