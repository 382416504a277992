// Microbenchmarks of the main CPU kernels (Google Benchmark).
//
//   GEMM:       dt::mm on f32 square matrices; reports FLOP/s (2 n^3 per product), with the
//               default one BLAS thread and with two; and on bf16 ones (bf16:1 on the path this CPU
//               takes, bf16:2 widened to f32 for sgemm, bf16:3 the vdpbf16ps kernel). BM_PeakF32Fma /
//               BM_PeakBf16Dot: the core's peak rates of the f32 FMA and the bf16 dot instruction.
//               BM_LinearShapes: the Llama export's linear shapes by sgemm, by the packed GEMM packing
//               the weight during each call, and against a copy packed once.
//   add vs memcpy at 64 MiB: bytes_per_second counts the 64 MiB output per iteration for both, so
//               the two rates compare directly; dt::add also reads two inputs and allocates its
//               output (memory traffic 3x vs memcpy's 2x), which is the honest cost of the op.
//               Its output buffer is recycled (large_block_cache.h) after a warm-up call.
//   softmax, layer_norm: [4096, 1024] f32 rows; bytes_per_second counts the input.
//   unary activations: dt::exp/log/tanh/sigmoid/silu/gelu on 4 Mi f32 values in [-8, 8], each next
//               to the same loop over libm (the kernel it replaced: one scalar call per element),
//               so old/new is a ratio within one run. items_per_second counts elements.
//   activation backward: dt::gelu_backward (both forms) and silu_backward on the same values.
//   attention:  dt::scaled_dot_product_attention on [4, 8, S, 64] (the gpt example's heads) next to
//               the unfused kernel it replaced (matmul, scale, mask, softmax, matmul); causal and
//               not. Run with --benchmark_enable_random_interleaving=true on a shared machine.
//   attention backward: dt::scaled_dot_product_attention_backward on the same heads next to the
//               unfused backward it replaced (ops_attention_reference.h), causal and not.
//   conv:       a ViT-Base patch embedding's forward and both gradients, at 1 and 2 threads.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "dtensor/kernels/gemm_bf16_dot.h"
#include "dtensor/kernels/gemm_f32_packed.h"
#include "dtensor/kernels/ops.h"
#include "tests/support/ops_attention_reference.h"
#include "dtensor/kernels/ops_grad.h"
#include "dtensor/core/parallel.h"
#include "dtensor/core/rng.h"
#include "dtensor/core/threading.h"

namespace {

constexpr int64_t k64MiB = int64_t(64) << 20;

void BM_Gemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  // f32 threads are OpenBLAS's; the bf16 paths split rows over the rank's pool as --threads does.
  if (state.range(2)) dt::set_threads_per_rank(int(state.range(1)));
  else dt::set_compute_threads(int(state.range(1)));
  dt::Generator gen(1);
  const dt::DType dtype = state.range(2) ? dt::DType::bf16 : dt::DType::f32;
  if (state.range(2) == 3 && !dt::bf16_dot_supported()) return state.SkipWithError("no AVX512-BF16");
  const dt::Bf16GemmPath path = state.range(2) == 2   ? dt::Bf16GemmPath::widen
                                : state.range(2) == 3 ? dt::Bf16GemmPath::dot
                                                      : dt::bf16_gemm_path();
  dt::ScopedBf16GemmPath scoped(path);
  dt::Tensor a = dt::rand({n, n}, gen, dtype), b = dt::rand({n, n}, gen, dtype);
  for (auto _ : state) {
    dt::Tensor c = dt::mm(a, b);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.counters["FLOPS"] =
      benchmark::Counter(2.0 * double(n) * double(n) * double(n), benchmark::Counter::kIsIterationInvariantRate);
  dt::set_compute_threads(1);
  dt::set_threads_per_rank(1);
}
BENCHMARK(BM_Gemm)->ArgNames({"n", "threads", "bf16"})->Args({512, 1, 0})->Args({1024, 1, 0})->Args({1024, 2, 0})
    ->Args({1024, 1, 1})->Args({1024, 1, 2})->Args({1024, 1, 3})->Args({1024, 2, 3})->Unit(benchmark::kMillisecond)->UseRealTime();

// A linear's GEMM (x [1024, k] @ W^T, W [n, k]) at the realistic Llama export's shapes (hidden 512,
// kv projections 256, MLP 1536, LM head 4096; batch 4 x seq 256 rows), one thread, by OpenBLAS's
// sgemm (path 0) and against the weight packed once (path 1, gemm_f32_packed.h; packing is outside
// the timed loop, as in the interpreter's cache). Run with --benchmark_enable_random_interleaving=true.
void BM_LinearShapes(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), m = 1024;
  // 0: OpenBLAS's sgemm; 1: gemm_f32_packing (the weight packed during each call, as a writable
  // weight is); 2: gemm_f32_packed against a copy packed once (a read-only weight).
  const int64_t path = state.range(2);
  if (path > 0 && !dt::f32_packed_supported()) return state.SkipWithError("no AVX2 and FMA");
  const dt::ScopedF32GemmPath scoped(path == 0 ? dt::F32GemmPath::blas : dt::F32GemmPath::packed);
  if (path == 1 && !dt::f32_packed_linears()) return state.SkipWithError("linears stay on sgemm on AVX2");
  dt::set_threads_per_rank(1);
  dt::Generator gen(1);
  const dt::Tensor x = dt::rand({m, k}, gen), w = dt::rand({n, k}, gen);
  const dt::PackedWeight packed(w.data<float>(), n, k, k, 1);
  for (auto _ : state) {
    dt::Tensor c = dt::linear_act(x, w, dt::Tensor(), dt::Activation::none, path == 2 ? &packed : nullptr);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.counters["FLOPS"] =
      benchmark::Counter(2.0 * double(m) * double(n) * double(k), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LinearShapes)->ArgNames({"n", "k", "path"})->ArgsProduct({{512}, {512}, {0, 1, 2}})
    ->ArgsProduct({{256}, {512}, {0, 1, 2}})->ArgsProduct({{1536}, {512}, {0, 1, 2}})
    ->ArgsProduct({{512}, {1536}, {0, 1, 2}})->ArgsProduct({{4096}, {512}, {0, 1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();

// The core's peak rates of the multiply-adds a GEMM could use: f32 FMA (vfmadd231ps) at AVX2 width
// (ymm, 16 FLOP; avx2:1) and at AVX-512 width (zmm, 32 FLOP; avx2:0), and AVX512-BF16's pair dot
// product (vdpbf16ps, 64 FLOP: 16 lanes of two bf16 products), on independent accumulators (12 at
// AVX2 width, which has 16 registers; 24 at AVX-512's): what fraction of the peak a GEMM reaches
// (OpenBLAS's sgemm, gemm_f32_packed). Where the bf16 one is not about twice the f32 one, widening
// bf16 to f32 for sgemm beats a bf16 kernel (kernels/ops_matmul.cc, gemm_bf16). Skipped on CPUs
// without the instructions.
// The loop of all three: `step` on `count` accumulators of type `vec`, 1000 times per iteration. A
// macro, not a lambda: the intrinsics inline only into functions compiled for their target.
#define DT_PEAK_LOOP(state, vec, count, flops_per_step, init, step)                                     \
  vec acc[count];                                                                                        \
  for (vec& a : acc) a = init;                                                                           \
  for (auto _ : state) {                                                                                 \
    for (int rep = 0; rep < 1000; ++rep) {                                                               \
      _Pragma("GCC unroll 24") for (vec& a : acc) a = step; /* unrolled: acc stays in registers */       \
    }                                                                                                    \
    benchmark::DoNotOptimize(acc);                                                                       \
  }                                                                                                      \
  state.counters["FLOPS"] =                                                                              \
      benchmark::Counter((flops_per_step) * (count) * 1000, benchmark::Counter::kIsIterationInvariantRate)

__attribute__((target("avx2,fma"))) void peak_f32_fma_avx2(benchmark::State& state) {
  const __m256 x = _mm256_set1_ps(1.0001f), y = _mm256_set1_ps(0.9999f);
  DT_PEAK_LOOP(state, __m256, 12, 16, _mm256_set1_ps(0), _mm256_fmadd_ps(x, y, a));
}
__attribute__((target("avx512f"))) void peak_f32_fma(benchmark::State& state) {
  const __m512 x = _mm512_set1_ps(1.0001f), y = _mm512_set1_ps(0.9999f);
  DT_PEAK_LOOP(state, __m512, 24, 32, _mm512_set1_ps(0), _mm512_fmadd_ps(x, y, a));
}
__attribute__((target("avx512f,avx512bf16"))) void peak_bf16_dot(benchmark::State& state) {
  const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80);  // (1, 1) bf16 pairs
  DT_PEAK_LOOP(state, __m512, 24, 64, _mm512_set1_ps(0), _mm512_dpbf16_ps(a, x, x));
}

void BM_PeakF32Fma(benchmark::State& state) {
  if (state.range(0)) {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return state.SkipWithError("no AVX2 and FMA");
    return peak_f32_fma_avx2(state);
  }
  if (!__builtin_cpu_supports("avx512f")) return state.SkipWithError("no AVX-512");
  peak_f32_fma(state);
}
void BM_PeakBf16Dot(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512bf16")) return state.SkipWithError("no AVX512-BF16");
  peak_bf16_dot(state);
}
BENCHMARK(BM_PeakF32Fma)->ArgName("avx2")->Arg(0)->Arg(1)->UseRealTime();
BENCHMARK(BM_PeakBf16Dot)->UseRealTime();

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

// Unary kernels: which op (new dt:: kernel) and its libm formula (the old kernel's body).
enum class Unary { exp, log, tanh, sigmoid, silu, gelu, gelu_tanh };
const char* const kUnaryNames[] = {"exp", "log", "tanh", "sigmoid", "silu", "gelu", "gelu_tanh"};

dt::Tensor run_unary(Unary op, const dt::Tensor& x) {
  switch (op) {
    case Unary::exp: return dt::exp(x);
    case Unary::log: return dt::log(x);
    case Unary::tanh: return dt::tanh(x);
    case Unary::sigmoid: return dt::sigmoid(x);
    case Unary::silu: return dt::silu(x);
    case Unary::gelu: return dt::gelu(x);
    case Unary::gelu_tanh: return dt::gelu(x, "tanh");
  }
  return {};
}

template <Unary op>
float libm_unary(float v) {
  if constexpr (op == Unary::exp) return std::exp(v);
  if constexpr (op == Unary::log) return std::log(v);
  if constexpr (op == Unary::tanh) return std::tanh(v);
  if constexpr (op == Unary::sigmoid) return 1.0f / (1.0f + std::exp(-v));
  if constexpr (op == Unary::silu) return v / (1.0f + std::exp(-v));
  if constexpr (op == Unary::gelu) return 0.5f * v * (1.0f + std::erf(v * float(M_SQRT1_2)));
  const float k = float(M_2_SQRTPI * M_SQRT1_2);
  return 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
}

dt::Tensor unary_input(Unary op) {
  dt::Generator gen(4);
  // log needs positive inputs; the others see the range activations live in.
  return op == Unary::log ? dt::rand({int64_t(1) << 22}, gen, dt::DType::f32, 1e-3, 16)
                          : dt::rand({int64_t(1) << 22}, gen, dt::DType::f32, -8, 8);
}

template <Unary op>
void BM_UnaryNew(benchmark::State& state) {
  const dt::Tensor x = unary_input(op);
  benchmark::DoNotOptimize(run_unary(op, x).raw_data());  // warm-up: recycled output buffer
  for (auto _ : state) {
    dt::Tensor y = run_unary(op, x);
    benchmark::DoNotOptimize(y.raw_data());
  }
  state.SetItemsProcessed(state.iterations() * x.numel());
  state.SetLabel(kUnaryNames[int(op)]);
}

template <Unary op>
void BM_UnaryLibm(benchmark::State& state) {
  const dt::Tensor x = unary_input(op);
  dt::Tensor y = dt::Tensor::uninitialized(x.shape());
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  for (auto _ : state) {
    for (int64_t i = 0; i < x.numel(); ++i) yp[i] = libm_unary<op>(xp[i]);
    benchmark::DoNotOptimize(yp);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * x.numel());
  state.SetLabel(kUnaryNames[int(op)]);
}

#define DT_UNARY_BENCH(op)                                                                  \
  BENCHMARK(BM_UnaryLibm<Unary::op>)->Name("BM_Unary/" #op "/libm")->Unit(benchmark::kMillisecond); \
  BENCHMARK(BM_UnaryNew<Unary::op>)->Name("BM_Unary/" #op "/new")->Unit(benchmark::kMillisecond);
DT_UNARY_BENCH(exp)
DT_UNARY_BENCH(log)
DT_UNARY_BENCH(tanh)
DT_UNARY_BENCH(sigmoid)
DT_UNARY_BENCH(silu)
DT_UNARY_BENCH(gelu)
DT_UNARY_BENCH(gelu_tanh)
#undef DT_UNARY_BENCH

// The activation derivatives (dt::gelu_backward, silu_backward) on the same 4 Mi values, each
// next to its forward above: a backward reads two inputs and does a little more arithmetic.
template <Unary op>
void BM_ActivationBackward(benchmark::State& state) {
  const dt::Tensor x = unary_input(op), g = unary_input(Unary::exp);
  for (auto _ : state) {
    dt::Tensor y = op == Unary::silu ? dt::silu_backward(g, x) : dt::gelu_backward(g, x, op == Unary::gelu ? "none" : "tanh");
    benchmark::DoNotOptimize(y.raw_data());
  }
  state.SetItemsProcessed(state.iterations() * x.numel());
  state.SetLabel(kUnaryNames[int(op)]);
}
BENCHMARK(BM_ActivationBackward<Unary::silu>)->Name("BM_Backward/silu")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ActivationBackward<Unary::gelu>)->Name("BM_Backward/gelu")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ActivationBackward<Unary::gelu_tanh>)->Name("BM_Backward/gelu_tanh")->Unit(benchmark::kMillisecond);

// The unfused attention the tiled kernel replaced: a full [S, S] score matrix per head.
dt::Tensor unfused_attention(const dt::Tensor& q, const dt::Tensor& k, const dt::Tensor& v, bool causal) {
  dt::Tensor scores = dt::mul(dt::matmul(q, k.transpose(-2, -1)), 1.0 / std::sqrt(double(q.size(-1))));
  if (causal) {
    const int64_t s = q.size(-2);
    dt::Tensor visible = dt::le(dt::Tensor::arange(s).view({1, s}), dt::Tensor::arange(s).view({s, 1}));
    scores = dt::where(visible, scores, dt::Tensor::full({}, -std::numeric_limits<double>::infinity()));
  }
  return dt::matmul(dt::softmax(scores, -1), v);
}

// Args: S, causal, tiled (1: dt::scaled_dot_product_attention, 0: unfused).
void BM_Attention(benchmark::State& state) {
  const int64_t s = state.range(0);
  const bool causal = state.range(1) != 0, tiled = state.range(2) != 0;
  dt::Generator gen(5);
  dt::Tensor q = dt::randn({4, 8, s, 64}, gen), k = dt::randn({4, 8, s, 64}, gen), v = dt::randn({4, 8, s, 64}, gen);
  for (auto _ : state) {
    dt::Tensor o = tiled ? dt::scaled_dot_product_attention(q, k, v, causal) : unfused_attention(q, k, v, causal);
    benchmark::DoNotOptimize(o.raw_data());
  }
  // Flops of the two GEMMs over the full score matrix (causal attention needs about half).
  state.counters["FLOPS"] = benchmark::Counter(4.0 * 4 * 8 * double(s) * double(s) * 64,
                                               benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Attention)->ArgNames({"S", "causal", "tiled"})
    ->ArgsProduct({{16, 256, 1024}, {0, 1}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();

// Args: S, causal, blocked (1: dt::scaled_dot_product_attention_backward, 0: the unfused
// backward it replaced, dt::test::naive_attention_backward).
void BM_AttentionBackward(benchmark::State& state) {
  const int64_t s = state.range(0);
  const bool causal = state.range(1) != 0, blocked = state.range(2) != 0;
  dt::Generator gen(6);
  dt::Tensor q = dt::randn({4, 8, s, 64}, gen), k = dt::randn({4, 8, s, 64}, gen), v = dt::randn({4, 8, s, 64}, gen);
  dt::Tensor g = dt::randn({4, 8, s, 64}, gen);
  dt::AttentionOptions o;
  o.causal = causal;
  for (auto _ : state) {
    dt::AttentionGrads r = blocked ? dt::scaled_dot_product_attention_backward(g, q, k, v, o)
                                   : dt::test::naive_attention_backward(g, q, k, v, o);
    benchmark::DoNotOptimize(r.dq.raw_data());
  }
  // Flops of the five GEMMs over the full score matrix (causal attention needs about half).
  state.counters["FLOPS"] = benchmark::Counter(10.0 * 4 * 8 * double(s) * double(s) * 64,
                                               benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_AttentionBackward)->ArgNames({"S", "causal", "blocked"})
    ->ArgsProduct({{256, 1024}, {0, 1}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();

// A ViT patch embedding (ViT-Base: 224x224 RGB images, 16x16 patches, hidden 768), batch 4.
// Args: pass (0: dt::conv with bias, 1: conv_backward_input, 2: conv_backward_weight), threads per
// rank. Each pass is 2 · 4 · 768 · 196 · 768 flops.
void BM_ConvPatchEmbedding(benchmark::State& state) {
  const int64_t pass = state.range(0);
  dt::set_threads_per_rank(int(state.range(1)));
  dt::Generator gen(7);
  const dt::ConvParams p{{16, 16}, {0, 0, 0, 0}, {1, 1}, 1};
  dt::Tensor x = dt::randn({4, 3, 224, 224}, gen), w = dt::randn({768, 3, 16, 16}, gen), b = dt::randn({768}, gen);
  dt::Tensor dy = dt::randn(dt::conv_output_shape(x.shape(), w.shape(), p), gen);
  for (auto _ : state) {
    dt::Tensor r = pass == 0   ? dt::conv(x, w, b, p)
                   : pass == 1 ? dt::conv_backward_input(dy, w, x.shape(), p)
                               : dt::conv_backward_weight(dy, x, w.shape(), p);
    benchmark::DoNotOptimize(r.raw_data());
  }
  state.counters["FLOPS"] = benchmark::Counter(2.0 * 4 * 768 * 196 * 768, benchmark::Counter::kIsIterationInvariantRate);
  dt::set_threads_per_rank(1);
}
BENCHMARK(BM_ConvPatchEmbedding)->ArgNames({"pass", "threads"})
    ->ArgsProduct({{0, 1, 2}, {1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
