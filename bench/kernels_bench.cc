// Microbenchmarks of the main CPU kernels (Google Benchmark).
//
//   GEMM:       dt::mm on f32 square matrices; reports FLOP/s (2 n^3 per product), with the
//               default one BLAS thread and with two.
//   add vs memcpy at 64 MiB: bytes_per_second counts the 64 MiB output per iteration for both, so
//               the two rates compare directly; dt::add also reads two inputs and allocates its
//               output (memory traffic 3x vs memcpy's 2x), which is the honest cost of the op.
//               Its output buffer is recycled (large_block_cache.h) after a warm-up call.
//   softmax, layer_norm: [4096, 1024] f32 rows; bytes_per_second counts the input.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>

#include "dtensor/core/ops.h"
#include "dtensor/core/rng.h"
#include "dtensor/core/threading.h"

namespace {

constexpr int64_t k64MiB = int64_t(64) << 20;

void BM_Gemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  dt::set_compute_threads(int(state.range(1)));
  dt::Generator gen(1);
  dt::Tensor a = dt::rand({n, n}, gen), b = dt::rand({n, n}, gen);
  for (auto _ : state) {
    dt::Tensor c = dt::mm(a, b);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.counters["FLOPS"] =
      benchmark::Counter(2.0 * double(n) * double(n) * double(n), benchmark::Counter::kIsIterationInvariantRate);
  dt::set_compute_threads(1);
}
BENCHMARK(BM_Gemm)->ArgNames({"n", "threads"})->Args({512, 1})->Args({1024, 1})->Args({1024, 2})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Add64MiB(benchmark::State& state) {
  const int64_t n = k64MiB / 4;
  dt::Tensor a = dt::Tensor::full({n}, 1.5), b = dt::Tensor::full({n}, 2.5);
  // Warm-up: the first output buffer is freshly mapped (page faults); later ones are recycled, as
  // in any steady-state loop. memcpy below likewise writes to a pre-faulted destination.
  benchmark::DoNotOptimize(dt::add(a, b).raw_data());
  for (auto _ : state) {
    dt::Tensor c = dt::add(a, b);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * k64MiB);
}
BENCHMARK(BM_Add64MiB)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Memcpy64MiB(benchmark::State& state) {
  void* src = std::aligned_alloc(64, size_t(k64MiB));
  void* dst = std::aligned_alloc(64, size_t(k64MiB));
  std::memset(src, 1, size_t(k64MiB));
  std::memset(dst, 0, size_t(k64MiB));
  for (auto _ : state) {
    std::memcpy(dst, src, size_t(k64MiB));
    benchmark::DoNotOptimize(dst);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * k64MiB);
  std::free(src);
  std::free(dst);
}
BENCHMARK(BM_Memcpy64MiB)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Softmax(benchmark::State& state) {
  dt::Generator gen(2);
  dt::Tensor x = dt::randn({4096, 1024}, gen);
  for (auto _ : state) {
    dt::Tensor y = dt::softmax(x, -1);
    benchmark::DoNotOptimize(y.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * int64_t(x.nbytes()));
}
BENCHMARK(BM_Softmax)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LayerNorm(benchmark::State& state) {
  dt::Generator gen(3);
  dt::Tensor x = dt::randn({4096, 1024}, gen);
  dt::Tensor w = dt::randn({1024}, gen), b = dt::randn({1024}, gen);
  for (auto _ : state) {
    dt::Tensor y = dt::layer_norm(x, {1024}, w, b);
    benchmark::DoNotOptimize(y.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * int64_t(x.nbytes()));
}
BENCHMARK(BM_LayerNorm)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
