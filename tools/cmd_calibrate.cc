// `dtensor calibrate [--backend threads|mpi] [--ranks N] -o machine.json`: measures this machine's
// constants of the step-time estimate (autoplan/estimate.h) and writes them as a machine file
// (autoplan/machine.h) that `--machine` feeds to the plan search and to `dtensor plan`:
//
//   gemm_gflops  one rank's f32 GEMM rate (a --gemm-size cube through the runtime's matmul)
//   mem_gbs      one thread's memcpy bandwidth (the model's rate of a non-GEMM op's result)
//   collectives  α–β per collective kind and group size: on a world of N ranks, for each divisor
//                g >= 2 of N the ranks form N/g groups of g consecutive ranks that run the
//                collective at the same time (as the groups of one mesh dim do); rank 0 times
//                --iters calls (median: the machine may be shared) at two per-rank buffer sizes,
//                and α–β is the line through the two points, in the planner's units (the bytes
//                the busiest rank sends: redistribute_plan.h's table).
//   alpha_us, beta_gbs  the fallback for a kind or size not listed: all_reduce at the largest g.
//
// The file's "calibration" object says what was measured: backend, ranks, sizes, iters, the number
// of timed calls, and the machine's load average (a busy machine gives slow figures).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "dtensor/autoplan/machine.h"
#include "dtensor/comm/process_group.h"
#include "dtensor/core/atomic_file.h"
#include "dtensor/core/error.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/runtime/launcher.h"
#include "tools/command.h"

namespace dt::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct CalibrateOptions {
  std::string output, backend = "threads";
  int ranks = 0;  // 0: 4 on threads, the job's size under mpirun
  int iters = 5;
  size_t small_bytes = 4096, large_bytes = size_t(1) << 20;
  int gemm_size = 256;
};

const char* const kKinds[] = {"all_gather", "all_reduce", "reduce_scatter", "all_to_all"};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The bytes the busiest rank sends for a per-rank buffer of `s` bytes over `g` ranks (the
// planner's convention: all_reduce 2(g-1)/g·s, all_gather and reduce_scatter (g-1)·s/g of the
// gathered / reduced buffer s, all_to_all (g-1)/g·s).
double sent_bytes(std::string_view kind, double s, int g) {
  return (kind == "all_reduce" ? 2.0 : 1.0) * double(g - 1) / double(g) * s;
}

// One call of `kind` with a per-rank buffer of `bytes` (f32) over `pg`.
WorkPtr issue(ProcessGroup& pg, std::string_view kind, std::vector<float>& in, std::vector<float>& out, size_t count) {
  const size_t g = size_t(pg.size()), block = count / g;
  if (kind == "all_reduce") return pg.all_reduce(in.data(), count, DType::f32, ReduceOp::sum);
  if (kind == "all_gather") return pg.all_gather(in.data(), out.data(), block, DType::f32);
  if (kind == "reduce_scatter") return pg.reduce_scatter(in.data(), out.data(), block, DType::f32, ReduceOp::sum);
  std::vector<size_t> splits(g, block);
  return pg.all_to_all(in.data(), splits, out.data(), splits, DType::f32);
}

struct Measured {
  std::map<std::string, std::map<int64_t, AlphaBeta>> fits;
  int64_t timed_calls = 0;
};

// Runs on every rank of `world`; rank 0's result holds the fits.
Measured measure_collectives(ProcessGroup& world, const CalibrateOptions& opt) {
  Measured m;
  const int n = world.size();
  const size_t sizes[2] = {opt.small_bytes, opt.large_bytes};
  for (int g = 2; g <= n; ++g) {
    if (n % g != 0) continue;
    std::vector<int> members;
    for (int r = world.rank() / g * g; r < world.rank() / g * g + g; ++r) members.push_back(r);
    ProcessGroupPtr pg = world.new_group(members);
    for (const char* kind : kKinds) {
      double t[2] = {0, 0}, b[2] = {0, 0};
      for (int k = 0; k < 2; ++k) {
        const size_t count = std::max<size_t>(size_t(g), sizes[k] / sizeof(float) / size_t(g) * size_t(g));
        std::vector<float> in(count, 0.0f), out(count, 0.0f);
        issue(*pg, kind, in, out, count)->wait();  // warm-up
        std::vector<double> times;
        for (int i = 0; i < opt.iters; ++i) {
          world.barrier()->wait();
          const auto start = Clock::now();
          issue(*pg, kind, in, out, count)->wait();
          times.push_back(seconds_since(start));
          ++m.timed_calls;
        }
        t[k] = median(times) * 1e6;
        b[k] = sent_bytes(kind, double(count * sizeof(float)), g);
      }
      // The line through the two points; noise can make the large call no slower than the small
      // one: then the latency is the small call's time and the bandwidth the large call's average.
      AlphaBeta ab;
      if (t[1] > t[0] && b[1] > b[0]) {
        const double us_per_byte = (t[1] - t[0]) / (b[1] - b[0]);
        ab.beta_gbs = 1e-3 / us_per_byte;
        ab.alpha_us = std::max(0.0, t[0] - b[0] * us_per_byte);
      } else {
        ab.alpha_us = t[0];
        ab.beta_gbs = b[1] / std::max(t[1], 1e-3) * 1e-3;
      }
      m.fits[kind][g] = ab;
    }
  }
  return m;
}

double measure_gemm_gflops(int size, int iters) {
  const Shape s{size, size};
  const Tensor a = Tensor::full(s, 0.5), b = Tensor::full(s, 0.25);
  (void)matmul(a, b);  // warm-up
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    const Tensor c = matmul(a, b);
    times.push_back(seconds_since(start));
  }
  return 2.0 * std::pow(double(size), 3) / median(times) / 1e9;
}

double measure_memcpy_gbs(size_t bytes, int iters) {
  std::vector<std::byte> src(bytes, std::byte{1}), dst(bytes);
  std::memcpy(dst.data(), src.data(), bytes);
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    asm volatile("" : : "r"(dst.data()) : "memory");  // keep the copy
    times.push_back(seconds_since(start));
  }
  return double(bytes) / median(times) / 1e9;
}

void calibrate(const CalibrateOptions& opt) {
  const runtime::Backend backend = runtime::parse_backend(opt.backend);
  int ranks = opt.ranks;
  if (ranks == 0) {
    const char* np = std::getenv("OMPI_COMM_WORLD_SIZE");
    ranks = backend == runtime::Backend::mpi && np ? std::atoi(np) : 4;
  }
  if (ranks < 2) DT_THROW(ValueError) << "calibrate: --ranks must be at least 2 (a collective needs a group), got " << ranks;
  if (opt.iters < 1) DT_THROW(ValueError) << "calibrate: --iters must be at least 1, got " << opt.iters;
  if (opt.small_bytes < 4 || opt.large_bytes <= opt.small_bytes)
    DT_THROW(ValueError) << "calibrate: need 4 <= --small-bytes < --large-bytes, got " << opt.small_bytes << " and "
                         << opt.large_bytes;
  if (opt.gemm_size < 1) DT_THROW(ValueError) << "calibrate: --gemm-size must be at least 1, got " << opt.gemm_size;
  Measured measured;
  bool writer = false;
  runtime::run_world(backend, ranks, [&](ProcessGroup& world) {
    Measured m = measure_collectives(world, opt);
    if (world.rank() == 0) {
      measured = std::move(m);
      writer = true;
    }
  });
  if (!writer) return;  // mpi: rank 0's process writes the file
  autoplan::MachineModel machine;
  machine.gemm_gflops = measure_gemm_gflops(opt.gemm_size, opt.iters);
  machine.mem_gbs = measure_memcpy_gbs(opt.large_bytes * 16, opt.iters);
  for (auto& [kind, sizes] : measured.fits) machine.comm.measured[kind] = sizes;
  const AlphaBeta fallback = measured.fits["all_reduce"].rbegin()->second;
  machine.comm.alpha_us = fallback.alpha_us;
  machine.comm.beta_gbs = fallback.beta_gbs;
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) < 0) load[0] = load[1] = load[2] = -1;
  const nlohmann::json info = {{"backend", opt.backend},
                               {"ranks", ranks},
                               {"bytes", {opt.small_bytes, opt.large_bytes}},
                               {"iters", opt.iters},
                               {"timed_collective_calls", measured.timed_calls},
                               {"gemm_size", opt.gemm_size},
                               {"load_average", {load[0], load[1], load[2]}}};
  write_file_atomically(opt.output, autoplan::machine_json(machine, info.dump()));
  fmt::print("wrote {}: gemm {:.1f} GFLOP/s, memcpy {:.2f} GB/s, {} collective kinds x {} group sizes ({} timed calls; "
             "load average {:.2f})\n",
             opt.output, machine.gemm_gflops, machine.mem_gbs, measured.fits.size(),
             measured.fits.empty() ? 0 : measured.fits.begin()->second.size(), measured.timed_calls, load[0]);
}

CommandRegistrar reg("calibrate", [](CLI::App& app) {
  auto opt = std::make_shared<CalibrateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "Measure this machine's GEMM rate, memcpy bandwidth and collective α–β into a machine file (--machine)");
  cmd->add_option("-o,--output", opt->output, "the machine file to write (JSON)")->required();
  cmd->add_option("--backend", opt->backend, "collectives on threads, or mpi (under mpirun, one rank per process)")
      ->check(CLI::IsMember({"threads", "mpi"}))
      ->capture_default_str();
  cmd->add_option("--ranks", opt->ranks, "world size (default: 4 on threads, the job's size under mpirun)");
  cmd->add_option("--iters", opt->iters, "timed calls per measurement (the median is kept)")->capture_default_str();
  cmd->add_option("--small-bytes", opt->small_bytes, "per-rank buffer of the latency point")->capture_default_str();
  cmd->add_option("--large-bytes", opt->large_bytes, "per-rank buffer of the bandwidth point")->capture_default_str();
  cmd->add_option("--gemm-size", opt->gemm_size, "the GEMM's M = N = K")->capture_default_str();
  cmd->callback([opt] { calibrate(*opt); });
});

}  // namespace
}  // namespace dt::tools
