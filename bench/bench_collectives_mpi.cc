// `mpirun -np 4 dtensor bench collectives-mpi`: bandwidth of each collective on the mpi backend
// (NCCL-tests conventions, as `dtensor bench collectives` for the threads backend), next to the
// raw Open MPI call on the same buffers, so the backend's overhead is a ratio from one run.
//
// --bytes S is the per-rank buffer: all_reduce and broadcast move S, all_gather gathers into an
// S-byte output (S/n per rank), reduce_scatter reduces an S-byte input, all_to_all exchanges S.
// Every timed call starts after an MPI_Barrier and its time is the slowest rank's; time_ms is the
// median over --iters calls (the median, not the mean, because CI machines are shared and noisy).
// For all_reduce and all_gather, ours and raw (blocking MPI_Allreduce / MPI_Allgather) alternate
// call by call, and ours_over_raw is the median of the per-pair ratios.
#include "bench/bench_collectives_mpi.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "dtensor/comm/mpi/mpi_process_group.h"
#include "dtensor/comm/mpi/mpi_runtime.h"
#include "bench/bench_registry.h"

namespace dt::bench {
namespace {

struct Row {
  std::string name;
  std::string algorithm;
  double busbw_factor = 1;
  std::vector<double> ours;  // seconds per call, slowest rank
  std::string raw_call;      // "" when there is no raw counterpart
  std::vector<double> raw;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Returns the slowest rank's seconds for one call of fn started after a barrier.
double time_call(const std::function<void()>& fn) {
  MPI_Barrier(MPI_COMM_WORLD);
  double start = MPI_Wtime();
  fn();
  double mine = MPI_Wtime() - start, slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

double time_memcpy(size_t bytes, int iters) {
  std::vector<std::byte> src(bytes, std::byte{1}), dst(bytes);
  std::memcpy(dst.data(), src.data(), bytes);
  double start = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    std::memcpy(dst.data(), src.data(), bytes);
    asm volatile("" : : "r"(dst.data()) : "memory");
  }
  return (MPI_Wtime() - start) / iters;
}

}  // namespace

void run_collectives_bench_mpi(size_t bytes, int iters, bool json) {
  if (iters < 1) DT_THROW(ValueError) << "bench collectives-mpi: --iters must be >= 1, got " << iters;
  std::unique_ptr<mpi::MpiRuntime> runtime;
  if (mpi::MpiRuntime::current() == nullptr) runtime = std::make_unique<mpi::MpiRuntime>();
  ProcessGroupPtr world = mpi::MpiRuntime::current()->world();
  int n = world->size(), me = world->rank();
  size_t count = bytes / sizeof(float);
  size_t block = count / size_t(n);
  std::vector<float> in(count), out(count);

  // Correctness: all_reduce sum of rank+1 is n(n+1)/2 everywhere, for ours and for raw MPI.
  std::fill(in.begin(), in.end(), float(me + 1));
  std::fill(out.begin(), out.end(), float(me + 1));
  world->all_reduce(in.data(), count, DType::f32, ReduceOp::sum)->wait();
  MPI_Allreduce(MPI_IN_PLACE, out.data(), int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  float want = float(n * (n + 1) / 2);
  int ok = count == 0 || (in[0] == want && in[count / 2] == want && in[count - 1] == want &&
                          out[count - 1] == want);
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  std::fill(in.begin(), in.end(), 0.0f);  // sums of zeros stay finite across iterations

  std::vector<size_t> splits(size_t(n), block);
  std::vector<Row> rows = {
      {"all_reduce", static_cast<mpi::MpiProcessGroup&>(*world).all_reduce_algorithm(bytes), 2.0 * (n - 1) / n, {},
       "MPI_Allreduce", {}},
      {"all_gather", "mpi:iallgather", double(n - 1) / n, {}, "MPI_Allgather", {}},
      {"reduce_scatter", "mpi:ialltoall+reduce", double(n - 1) / n, {}, "", {}},
      {"all_to_all", "mpi:ialltoallv", double(n - 1) / n, {}, "", {}},
      {"broadcast", "mpi:ibcast", 1.0, {}, "", {}},
  };
  for (Row& r : rows) {
    auto ours = [&] {
      WorkPtr w;
      if (r.name == "all_reduce") w = world->all_reduce(in.data(), count, DType::f32, ReduceOp::sum);
      else if (r.name == "all_gather") w = world->all_gather(in.data(), out.data(), block, DType::f32);
      else if (r.name == "reduce_scatter") w = world->reduce_scatter(in.data(), out.data(), block, DType::f32, ReduceOp::sum);
      else if (r.name == "all_to_all") w = world->all_to_all(in.data(), splits, out.data(), splits, DType::f32);
      else w = world->broadcast(in.data(), count, DType::f32, /*root=*/0);
      w->wait();
    };
    auto raw = [&] {
      if (r.name == "all_reduce")
        MPI_Allreduce(MPI_IN_PLACE, in.data(), int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else
        MPI_Allgather(in.data(), int(block), MPI_FLOAT, out.data(), int(block), MPI_FLOAT, MPI_COMM_WORLD);
    };
    ours();  // warm-up
    if (!r.raw_call.empty()) raw();
    for (int i = 0; i < iters; ++i) {
      r.ours.push_back(time_call(ours));
      if (!r.raw_call.empty()) r.raw.push_back(time_call(raw));
    }
  }
  double memcpy_gbs = double(bytes) / time_memcpy(bytes, iters) / 1e9;
  if (!all_ok) bench_exit_code() = 1;
  if (me != 0) return;

  const char* nbc_alg = std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");
  nlohmann::json table = nlohmann::json::array();
  for (const Row& r : rows) {
    double t = median(r.ours), algbw = double(bytes) / t / 1e9;
    nlohmann::json row = {{"collective", r.name},
                          {"algorithm", r.algorithm},
                          {"time_ms", t * 1e3},
                          {"algbw_gbs", algbw},
                          {"busbw_gbs", algbw * r.busbw_factor},
                          {"busbw_over_memcpy", algbw * r.busbw_factor / memcpy_gbs}};
    if (!r.raw_call.empty()) {
      std::vector<double> ratios;
      for (size_t i = 0; i < r.ours.size(); ++i) ratios.push_back(r.ours[i] / r.raw[i]);
      row["raw_mpi"] = {{"call", r.raw_call}, {"time_ms", median(r.raw) * 1e3}};
      row["ours_over_raw"] = median(ratios);
    }
    table.push_back(row);
  }
  if (json) {
    nlohmann::json doc = {{"backend", "mpi"},
                          {"ranks", n},
                          {"bytes", bytes},
                          {"dtype", "f32"},
                          {"iters", iters},
                          {"memcpy_gbs", memcpy_gbs},
                          {"correct", bool(all_ok)},
                          {"libnbc_iallreduce_algorithm", nbc_alg ? nbc_alg : "default"},
                          {"collectives", table}};
    fmt::print("{}\n", doc.dump(2));
    return;
  }
  fmt::print("collectives on {} ranks (mpi backend), {} bytes f32 per rank, median of {} calls\n", n, bytes, iters);
  fmt::print("memcpy (1 thread): {:.2f} GB/s\n", memcpy_gbs);
  fmt::print("{:<15} {:<26} {:>9} {:>9} {:>9} {:>13} {:>14} {:>9}\n", "collective", "algorithm", "time_ms",
             "algbw_gbs", "busbw_gbs", "busbw/memcpy", "raw_mpi_ms", "ours/raw");
  for (const nlohmann::json& row : table) {
    std::string raw_ms = row.contains("raw_mpi") ? fmt::format("{:.3f}", row["raw_mpi"]["time_ms"].get<double>()) : "-";
    std::string ratio = row.contains("ours_over_raw") ? fmt::format("{:.3f}", row["ours_over_raw"].get<double>()) : "-";
    fmt::print("{:<15} {:<26} {:>9.3f} {:>9.2f} {:>9.2f} {:>13.2f} {:>14} {:>9}\n", row["collective"].get<std::string>(),
               row["algorithm"].get<std::string>(), row["time_ms"].get<double>(), row["algbw_gbs"].get<double>(),
               row["busbw_gbs"].get<double>(), row["busbw_over_memcpy"].get<double>(), raw_ms, ratio);
  }
  if (!all_ok) fmt::print("all_reduce correctness check FAILED\n");
}

namespace {

BenchRegistrar reg("collectives-mpi", [](CLI::App& bench) {
  struct Options {
    size_t bytes = size_t(64) << 20;
    int iters = 10;
    bool json = false;
  };
  static Options opt;
  CLI::App* cmd = add_bench(bench, "collectives-mpi",
                            "Under mpirun: mpi backend collectives vs raw MPI_Allreduce/MPI_Allgather (ours/raw)",
                            opt.json, [] { run_collectives_bench_mpi(opt.bytes, opt.iters, opt.json); });
  cmd->add_option("--bytes", opt.bytes, "Buffer bytes per rank (f32)")->capture_default_str();
  cmd->add_option("--iters", opt.iters, "Timed calls per collective (median reported)")->capture_default_str();
});

}  // namespace
}  // namespace dt::bench
