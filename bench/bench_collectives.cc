// `dtensor bench collectives`: bandwidth of each collective on the threads backend, with NCCL-tests
// conventions, next to a single-thread memcpy of the same size measured in the same run.
//
// --bytes S is the per-rank buffer size: all_reduce and broadcast move S, all_gather gathers into
// an S-byte output (S/n per rank), reduce_scatter reduces an S-byte input (S/n out), all_to_all
// exchanges S. For each: time t per call (median over --iters calls, each started after a
// barrier, timed on rank 0, after one warm-up call; the median because the machine is shared and
// a preempted call says nothing about the algorithm), algbw = S / t,
// busbw = algbw * factor with factor 2(n-1)/n for all_reduce, (n-1)/n for all_gather,
// reduce_scatter and all_to_all, 1 for broadcast. memcpy_gbs = S / (median time of one
// single-thread memcpy of S bytes). A correctness pass (all_reduce sum of rank+1) runs first; a wrong result sets exit 1.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <vector>

#include "dtensor/comm/all_reduce_algos.h"
#include "dtensor/comm/threads/run_ranks.h"
#include "bench/bench_registry.h"
#ifdef DTENSOR_WITH_MPI
#include "bench/bench_collectives_mpi.h"
#endif

namespace dt::bench {
namespace {

using BenchClock = std::chrono::steady_clock;

struct BenchOptions {
  int ranks = 4;
  size_t bytes = size_t(64) << 20;
  int iters = 10;
  size_t one_shot_threshold = CommOptions{}.one_shot_threshold;
  std::string backend = "threads";
  bool json = false;
};

struct CollectiveResult {
  std::string name;
  std::string algorithm;
  double seconds = 0;  // per call
  double busbw_factor = 1;
};

// Returns the median of `times`.
double median(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Returns the median seconds of one memcpy of `bytes` (after a warm-up that faults the pages in).
double time_memcpy(size_t bytes, int iters) {
  std::vector<std::byte> src(bytes, std::byte{1}), dst(bytes);
  std::memcpy(dst.data(), src.data(), bytes);
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    auto start = BenchClock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    // Keep the copies observable so the compiler cannot drop them.
    asm volatile("" : : "r"(dst.data()) : "memory");
    times.push_back(std::chrono::duration<double>(BenchClock::now() - start).count());
  }
  return median(times);
}

// Runs every collective on every rank; rank 0 times `iters` calls between two barriers.
std::vector<CollectiveResult> time_collectives(const BenchOptions& opt, bool& correct) {
  CommOptions comm;
  comm.one_shot_threshold = opt.one_shot_threshold;
  int n = opt.ranks;
  size_t count = opt.bytes / sizeof(float);  // f32 elements per S bytes
  size_t block = count / size_t(n);          // all_gather input / reduce_scatter output
  std::vector<CollectiveResult> results = {
      {"all_reduce", std::string(all_reduce_algo_name(choose_all_reduce_algo(AllReduceAlgo::automatic, count * sizeof(float), comm))), 0, 2.0 * (n - 1) / n},
      {"all_gather", "direct", 0, double(n - 1) / n},
      {"reduce_scatter", "direct", 0, double(n - 1) / n},
      {"all_to_all", "direct", 0, double(n - 1) / n},
      {"broadcast", "direct", 0, 1.0},
  };
  correct = true;
  run_ranks(n, [&](ProcessGroup& pg) {
    std::vector<float> in(count), out(count);
    // Correctness pass: all_reduce sum of rank+1 is n(n+1)/2 everywhere.
    std::fill(in.begin(), in.end(), float(pg.rank() + 1));
    std::fill(out.begin(), out.end(), 0.0f);  // fault the pages in before timing
    pg.all_reduce(in.data(), count, DType::f32, ReduceOp::sum)->wait();
    float want = float(n * (n + 1) / 2);
    if (count > 0 && (in[0] != want || in[count / 2] != want || in[count - 1] != want)) correct = false;
    std::fill(in.begin(), in.end(), 0.0f);  // sums of zeros stay finite across iterations

    std::vector<size_t> splits(static_cast<size_t>(n), block);
    for (CollectiveResult& r : results) {
      auto issue = [&] {
        if (r.name == "all_reduce") return pg.all_reduce(in.data(), count, DType::f32, ReduceOp::sum);
        if (r.name == "all_gather") return pg.all_gather(in.data(), out.data(), block, DType::f32);
        if (r.name == "reduce_scatter") return pg.reduce_scatter(in.data(), out.data(), block, DType::f32, ReduceOp::sum);
        if (r.name == "all_to_all") return pg.all_to_all(in.data(), splits, out.data(), splits, DType::f32);
        return pg.broadcast(in.data(), count, DType::f32, /*root=*/0);
      };
      issue()->wait();  // warm-up
      std::vector<double> times;
      for (int i = 0; i < opt.iters; ++i) {
        pg.barrier()->wait();
        auto start = BenchClock::now();
        issue()->wait();
        times.push_back(std::chrono::duration<double>(BenchClock::now() - start).count());
      }
      if (pg.rank() == 0) r.seconds = median(times);
    }
  }, comm);
  return results;
}

void run_bench(const BenchOptions& opt) {
  if (opt.backend == "mpi") {
    // Under mpirun: one rank per process (the world size is -np; --ranks does not apply).
#ifdef DTENSOR_WITH_MPI
    if (opt.iters < 1) DT_THROW(ValueError) << "bench collectives: --iters must be >= 1, got " << opt.iters;
    run_collectives_bench_mpi(opt.bytes, opt.iters, opt.json);
    return;
#else
    DT_THROW(ValueError) << "bench collectives: --backend mpi requested, but this dtensor was built without Open MPI "
                            "(DTENSOR_WITH_MPI off)";
#endif
  }
  if (opt.backend != "threads")
    DT_THROW(ValueError) << "bench collectives: unknown backend '" << opt.backend << "' (expected threads or mpi)";
  if (opt.ranks < 1) DT_THROW(ValueError) << "bench collectives: --ranks must be >= 1, got " << opt.ranks;
  if (opt.iters < 1) DT_THROW(ValueError) << "bench collectives: --iters must be >= 1, got " << opt.iters;
  double memcpy_s = time_memcpy(opt.bytes, opt.iters);
  double memcpy_gbs = double(opt.bytes) / memcpy_s / 1e9;
  bool correct = false;
  std::vector<CollectiveResult> results = time_collectives(opt, correct);
  if (!correct) bench_exit_code() = 1;

  if (opt.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const CollectiveResult& r : results) {
      double algbw = double(opt.bytes) / r.seconds / 1e9;
      rows.push_back({{"collective", r.name},
                      {"algorithm", r.algorithm},
                      {"time_ms", r.seconds * 1e3},
                      {"algbw_gbs", algbw},
                      {"busbw_gbs", algbw * r.busbw_factor},
                      {"busbw_over_memcpy", algbw * r.busbw_factor / memcpy_gbs}});
    }
    nlohmann::json out = {{"backend", opt.backend}, {"ranks", opt.ranks},       {"bytes", opt.bytes},
                          {"dtype", "f32"},         {"iters", opt.iters},       {"memcpy_gbs", memcpy_gbs},
                          {"correct", correct},     {"collectives", rows}};
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("collectives on {} ranks ({} backend), {} bytes f32 per rank, {} iters\n", opt.ranks, opt.backend,
             opt.bytes, opt.iters);
  fmt::print("memcpy (1 thread): {:.2f} GB/s\n", memcpy_gbs);
  fmt::print("{:<15} {:<9} {:>10} {:>10} {:>10} {:>14}\n", "collective", "algorithm", "time_ms", "algbw_gbs",
             "busbw_gbs", "busbw/memcpy");
  for (const CollectiveResult& r : results) {
    double algbw = double(opt.bytes) / r.seconds / 1e9;
    fmt::print("{:<15} {:<9} {:>10.3f} {:>10.2f} {:>10.2f} {:>14.2f}\n", r.name, r.algorithm, r.seconds * 1e3, algbw,
               algbw * r.busbw_factor, algbw * r.busbw_factor / memcpy_gbs);
  }
  if (!correct) fmt::print("all_reduce correctness check FAILED\n");
}

BenchRegistrar reg("collectives", [](CLI::App& bench) {
  static BenchOptions opt;
  CLI::App* cmd = add_bench(bench, "collectives", "Bandwidth of each collective vs memcpy (NCCL-tests busbw)", opt.json,
                            [] { run_bench(opt); });
  cmd->add_option("--ranks", opt.ranks, "Number of ranks")->capture_default_str();
  cmd->add_option("--bytes", opt.bytes, "Buffer bytes per rank (f32)")->capture_default_str();
  cmd->add_option("--iters", opt.iters, "Timed calls per collective")->capture_default_str();
  cmd->add_option("--one-shot-threshold", opt.one_shot_threshold, "all_reduce bytes at or under: one-shot")
      ->capture_default_str();
  cmd->add_option("--backend", opt.backend, "Collective backend: threads, or mpi (under mpirun, one rank per process)")
      ->capture_default_str();
});

}  // namespace
}  // namespace dt::bench
