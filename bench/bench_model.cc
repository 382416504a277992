// `dtensor bench model [--vocab 4096 --hidden 512 --heads 8 --layers 4 --batch 4 --seq 256]
// [--rounds 3] [--repeat 5] [--tp 2] [--vs-torch] [--bf16] [--json]`: the example gpt's forward (the anchor
// config by default) measured in one run: one device at one thread, at two threads, tensor
// parallel on --tp ranks (threads backend, one thread per rank, examples/gpt_tp.json or --plan,
// e.g. examples/gpt_sp.json for sequence parallelism), and the fraction of the one-thread GEMM rate the forward reaches (runtime/gemm_reference.h).
//
// --bf16: the same model with bf16 parameters and activations (GptConfig::dtype; the weights are
// the f32 ones rounded) at one thread in the same rounds, and its speed-up over the f32 forward.
//
// --tp-overlap-chunks K: also the tensor-parallel forward with the tp-overlap pass forced on at K
// chunks (passes/tp_overlap.h), in the same rounds right after the plain one, and its time ratio.
//
// --vs-torch: when /usr/bin/python3 can import torch, the same architecture in PyTorch
// (bench/torch_gpt.py: one thread, and hand-written Megatron tp on gloo) runs in the same
// rounds, alternating with ours so that a busy spell of the shared machine hits both; otherwise it
// says so and skips. Each figure is the fastest of --repeat forwards per round, and the fastest
// over the rounds; ratios are taken between those.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "dtensor/core/blas_kernels.h"
#include "dtensor/core/error.h"
#include "dtensor/core/parallel.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/layout/device_mesh.h"
#include "dtensor/runtime/interpreter.h"
#include "dtensor/runtime/launcher.h"
#include "dtensor/sharding/parallel_plan.h"
#include "dtensor/sharding/tensor_sharding.h"
#include "bench/bench_registry.h"
#include "dtensor/runtime/gemm_reference.h"
#include "bench/gpt_options.h"
#include "bench/torch_reference.h"
#include "dtensor/job/job.h"

namespace dt::bench {
namespace {

struct BenchModelOptions {
  ir::GptConfig gpt = {.vocab = 4096, .hidden = 512, .heads = 8, .layers = 4, .batch = 4, .seq = 256};
  int rounds = 3, repeat = 5, tp = 2;
  int tp_overlap_chunks = 0;  // > 0: also the tp forward with tp-overlap on at this many chunks
  bool vs_torch = false, bf16 = false, json = false;
  std::string examples = "examples", plan;
  TorchScript torch;
};

constexpr double kInf = std::numeric_limits<double>::infinity();

// Fastest of `repeat` runs (after a warm-up) of the one-device forward with `threads` per rank, in ms.
double single_ms(const ir::Graph& g, const runtime::Bindings& bind, int threads, int repeat) {
  set_threads_per_rank(threads);
  runtime::Interpreter interp(g);
  interp.run(bind);
  double best = kInf;
  for (int r = 0; r < repeat; ++r) {
    runtime::RunStats s;
    interp.run(bind, {}, &s);
    best = std::min(best, s.seconds * 1e3);
  }
  set_threads_per_rank(1);
  return best;
}

// The slowest rank's fastest run of the tensor-parallel forward, in ms (one thread per rank).
double tp_ms(const std::vector<const ir::Graph*>& programs, const std::vector<runtime::Bindings>& bindings, int repeat) {
  runtime::LaunchOptions lo;
  lo.repeat = repeat + 1;
  double ms = 0;
  for (const runtime::RankResult& r : runtime::launch(programs, bindings, lo)) ms = std::max(ms, r.stats.seconds * 1e3);
  return ms;
}

void bench(const BenchModelOptions& o) {
  if (o.rounds < 1 || o.repeat < 1) DT_THROW(ValueError) << "--rounds and --repeat must be >= 1";
  if (o.tp < 2) DT_THROW(ValueError) << "--tp must be >= 2, got " << o.tp;
  const std::string torch_note = o.vs_torch ? torch_unavailable(o.torch, "bench model") : "";
  const bool with_torch = o.vs_torch && torch_note.empty();
  if (!torch_note.empty()) std::printf("%s\n", torch_note.c_str());

  const ir::GptConfig& m = o.gpt;
  const ir::Graph g = ir::build_gpt(fitted_max_seq(m));
  runtime::Bindings bind = ir::random_weights(g, 0);
  Generator gen(1);
  bind["input"] = randint({m.batch, m.seq}, 0, m.vocab, gen);

  // The tensor-parallel programs, compiled and sharded as `dtensor run` does.
  const std::string plan = o.plan.empty() ? o.examples + "/gpt_tp.json" : o.plan;
  auto compile_tp = [&](int overlap_chunks) {
    job::JobOptions jo;
    jo.mesh = DeviceMesh::parse(std::to_string(o.tp));
    jo.plan = sharding::ParallelPlan::load(plan);
    using Mode = passes::PassOptions::TpOverlap;
    jo.passes.options.tp_overlap = overlap_chunks > 0 ? Mode::on : Mode::off;
    jo.passes.options.tp_overlap_chunks = overlap_chunks;
    return job::Job::compile(g, std::move(jo));
  };
  const job::Job tp_job = compile_tp(0);
  const std::vector<const ir::Graph*> tp_programs = tp_job.programs_by_rank();
  const std::vector<runtime::Bindings> tp_bindings = tp_job.bindings_by_rank(job::Weights::full(bind), bind);
  std::optional<job::Job> ov_job;
  std::vector<const ir::Graph*> ov_programs;
  std::vector<runtime::Bindings> ov_bindings;
  if (o.tp_overlap_chunks > 0) {
    ov_job.emplace(compile_tp(o.tp_overlap_chunks));
    ov_programs = ov_job->programs_by_rank();
    ov_bindings = ov_job->bindings_by_rank(job::Weights::full(bind), bind);
  }

  // The bf16 model: the same weights rounded to bf16 (same names, same seed).
  ir::GptConfig m16 = fitted_max_seq(m);
  m16.dtype = DType::bf16;
  const ir::Graph g16 = o.bf16 ? ir::build_gpt(m16) : ir::Graph("unused");
  runtime::Bindings bind16;
  if (o.bf16)
    for (const auto& [name, t] : bind) bind16[name] = t.dtype() == DType::f32 ? t.to(DType::bf16) : t;

  double one = kInf, two = kInf, tp = kInf, t_one = kInf, t_tp = kInf, one16 = kInf, ov = kInf;
  nlohmann::json rounds = nlohmann::json::array();
  for (int round = 0; round < o.rounds; ++round) {
    nlohmann::json r;
    r["dtensor_ms"] = single_ms(g, bind, 1, o.repeat);
    if (with_torch)
      if (auto t = torch_min_ms(o.torch, "single", o.gpt, o.repeat)) r["torch_ms"] = *t;
    if (o.bf16) r["dtensor_bf16_ms"] = single_ms(g16, bind16, 1, o.repeat);
    r["dtensor_threads2_ms"] = single_ms(g, bind, 2, o.repeat);
    r["dtensor_tp_ms"] = tp_ms(tp_programs, tp_bindings, o.repeat);
    if (o.tp_overlap_chunks > 0) {
      r["dtensor_tp_overlap_ms"] = tp_ms(ov_programs, ov_bindings, o.repeat);
      ov = std::min(ov, r["dtensor_tp_overlap_ms"].get<double>());
    }
    if (with_torch)
      if (auto t = torch_min_ms(o.torch, "tp", o.gpt, o.repeat, o.tp)) r["torch_tp_ms"] = *t;
    one = std::min(one, r["dtensor_ms"].get<double>());
    two = std::min(two, r["dtensor_threads2_ms"].get<double>());
    tp = std::min(tp, r["dtensor_tp_ms"].get<double>());
    if (r.contains("dtensor_bf16_ms")) one16 = std::min(one16, r["dtensor_bf16_ms"].get<double>());
    if (r.contains("torch_ms")) t_one = std::min(t_one, r["torch_ms"].get<double>());
    if (r.contains("torch_tp_ms")) t_tp = std::min(t_tp, r["torch_tp_ms"].get<double>());
    rounds.push_back(r);
  }
  runtime::GemmTimes gemm;
  runtime::time_gemms(g, gemm);  // one thread, as the forward it is set against
  double flops = 0;
  const double gemm_ms = runtime::gemm_only_seconds(g, gemm, &flops) * 1e3;

  nlohmann::json j;
  j["config"] = {{"vocab", m.vocab}, {"hidden", m.hidden}, {"heads", m.heads}, {"layers", m.layers},
                 {"batch", m.batch}, {"seq", m.seq}, {"rounds", o.rounds}, {"repeat", o.repeat}, {"tp", o.tp}, {"plan", plan}};
  j["rounds"] = rounds;
  j["forward_ms"] = one;
  j["forward_threads2_ms"] = two;
  j["blas_kernels"] = blas_kernels();  // OpenBLAS's core: a slow choice shows here (blas_kernels.h)
  j["forward_tp_ms"] = tp;
  j["threads2_speedup"] = one / two;
  j["tp_efficiency"] = one / (tp * o.tp);
  j["matmul_gflop"] = flops / 1e9;
  j["gemm_only_ms"] = gemm_ms;
  j["gemm_rate_fraction"] = gemm_ms / one;
  if (ov < kInf) {
    j["forward_tp_overlap_ms"] = ov;
    j["tp_overlap_speedup"] = tp / ov;
  }
  if (!torch_note.empty()) j["torch"] = torch_note;
  if (one16 < kInf) {
    j["forward_bf16_ms"] = one16;
    j["bf16_speedup"] = one / one16;
  }
  if (t_one < kInf) {
    j["torch_forward_ms"] = t_one;
    j["torch_over_dtensor"] = t_one / one;
  }
  if (t_tp < kInf) {
    j["torch_tp_ms"] = t_tp;
    j["torch_tp_efficiency"] = (t_one < kInf ? t_one : kInf) / (t_tp * o.tp);
    j["torch_tp_over_dtensor_tp"] = t_tp / tp;
  }
  if (o.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("gpt vocab %lld hidden %lld heads %lld layers %lld batch %lld seq %lld: fastest of %d per round, %d round(s)\n",
              (long long)m.vocab, (long long)m.hidden, (long long)m.heads, (long long)m.layers, (long long)m.batch,
              (long long)m.seq, o.repeat, o.rounds);
  std::printf("BLAS kernels: OpenBLAS %s\n", j["blas_kernels"].get<std::string>().c_str());
  for (size_t i = 0; i < rounds.size(); ++i) {
    const auto& r = rounds[i];
    std::printf("  round %zu: dtensor %.1f ms%s, --threads 2 %.1f ms, tp %d %.1f ms%s%s\n", i, r["dtensor_ms"].get<double>(),
                r.contains("torch_ms") ? fmt::format(" (torch {:.1f})", r["torch_ms"].get<double>()).c_str() : "",
                r["dtensor_threads2_ms"].get<double>(), o.tp, r["dtensor_tp_ms"].get<double>(),
                r.contains("dtensor_tp_overlap_ms")
                    ? fmt::format(" (tp-overlap {:.1f})", r["dtensor_tp_overlap_ms"].get<double>()).c_str()
                    : "",
                r.contains("torch_tp_ms") ? fmt::format(" (torch {:.1f})", r["torch_tp_ms"].get<double>()).c_str() : "");
  }
  std::printf("forward, one thread: %.1f ms; its %.2f GFLOP of GEMMs alone take %.1f ms: %.0f%% of the GEMM rate\n", one,
              flops / 1e9, gemm_ms, 100 * gemm_ms / one);
  if (one16 < kInf) std::printf("bf16, one thread: %.1f ms, %.2fx the f32 forward\n", one16, one / one16);
  std::printf("--threads 2: %.1f ms, %.2fx one thread\n", two, one / two);
  std::printf("tp %d (%s): %.1f ms, parallel efficiency %.0f%%\n", o.tp, plan.c_str(), tp, 100 * one / (tp * o.tp));
  if (ov < kInf)
    std::printf("tp %d with tp-overlap at %d chunks: %.1f ms, %.3fx the plain order\n", o.tp, o.tp_overlap_chunks, ov,
                tp / ov);
  if (j.contains("torch_over_dtensor"))
    std::printf("PyTorch one thread: %.1f ms: dtensor is %.2fx PyTorch's speed\n", t_one, t_one / one);
  if (j.contains("torch_tp_over_dtensor_tp"))
    std::printf("PyTorch Megatron tp %d on gloo: %.1f ms (efficiency %.0f%%): dtensor tp is %.2fx its speed\n", o.tp, t_tp,
                100 * j["torch_tp_efficiency"].get<double>(), t_tp / tp);
}

void setup(CLI::App& bench_app) {
  static BenchModelOptions opt;
  CLI::App* cmd = add_bench(bench_app, "model", "The gpt forward: one thread, two threads, tensor parallel, vs PyTorch",
                            opt.json, [] { bench(opt); });
  add_gpt_options(cmd, opt.gpt);
  cmd->add_option("--rounds", opt.rounds, "alternating rounds")->capture_default_str();
  cmd->add_option("--repeat", opt.repeat, "forwards per measurement (the fastest counts)")->capture_default_str();
  cmd->add_option("--tp", opt.tp, "ranks of the tensor-parallel run")->capture_default_str();
  cmd->add_option("--tp-overlap-chunks", opt.tp_overlap_chunks,
                  "also the tp forward with the tp-overlap pass on at this many chunks, in the same rounds (0: not)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_flag("--vs-torch", opt.vs_torch, "run the same model in PyTorch (/usr/bin/python3) in the same rounds");
  cmd->add_flag("--bf16", opt.bf16, "also the forward in bf16 (one thread), in the same rounds");
  cmd->add_option("--torch-script", opt.torch.script, "the PyTorch side")->capture_default_str();
  cmd->add_option("--python", opt.torch.python, "the Python that runs it")->capture_default_str();
  cmd->add_option("--examples", opt.examples, "directory of the example plans")->capture_default_str();
  cmd->add_option("--plan", opt.plan, "plan of the tensor-parallel run (default: gpt_tp.json in --examples)");
}

BenchRegistrar reg("model", setup);

}  // namespace
}  // namespace dt::bench
