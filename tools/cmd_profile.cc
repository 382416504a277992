// `dtensor profile MODEL --weights W --inputs I [--repeat 3] [--threads N] [--json]`: where one
// device's forward spends its time.
//
// The model runs once to warm up, then --repeat times; the fastest run's per-node times (the
// interpreter's node hook) give the time per op kind and the 20 slowest nodes. Every matmul-like
// node (linear, matmul, bmm) gets its FLOP count and achieved GFLOP/s, set against a plain GEMM
// of the same [m, k] x [k, n] shape timed in the same process on the same threads (fastest of 3),
// and attention its GFLOP/s (causal attention counts only the unmasked score pairs). "overall"
// is all matmul FLOPs over the whole forward's time against the time those GEMMs alone would
// take: the fraction of the GEMM rate the forward reaches. Peak memory is the interpreter's peak
// of live intermediates.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/core/error.h"
#include "dtensor/core/ops.h"
#include "dtensor/core/parallel.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/op_kind.h"
#include "dtensor/runtime/interpreter.h"
#include "tools/command.h"
#include "tools/load_program.h"
#include "tools/threads_option.h"

namespace dt::tools {
namespace {

struct ProfileOptions {
  std::string model, weights, inputs, mesh, plan;
  int repeat = 3;
  bool json = false;
  std::optional<int> threads;
};

// The GEMM a matmul-like node performs: `batch` products of [m, k] x [k, n].
struct GemmShape {
  int64_t batch = 1, m = 0, k = 0, n = 0;
  double flops() const { return 2.0 * double(batch) * double(m) * double(k) * double(n); }
};

// Returns the GEMM of a linear/matmul/bmm node from its operand and result types, else nullopt.
// (These shape facts restate the ops' definitions in dtensor/ir/ops_linear.cc; they live here
// while profile is their only reader.)
std::optional<GemmShape> gemm_shape(const ir::Node& node) {
  const Shape& a = node.operands[0]->type.shape;
  const Shape& out = node.result()->type.shape;
  GemmShape g;
  switch (node.op) {
    case ir::OpKind::linear: {  // x [..., in], weight [out, in]
      const Shape& w = node.operands[1]->type.shape;
      g.k = w[1];
      g.n = w[0];
      g.m = g.k == 0 ? 0 : numel(a) / g.k;
      return g;
    }
    case ir::OpKind::bmm:
    case ir::OpKind::matmul: {
      const Shape& b = node.operands[1]->type.shape;
      g.k = a.back();
      g.n = b.size() == 1 ? 1 : b.back();
      if (b.size() <= 2) {  // the batch folds into m: one GEMM
        g.m = g.n == 0 ? 0 : numel(out) / g.n;
      } else {
        g.m = a.size() >= 2 ? a[a.size() - 2] : 1;
        g.batch = g.m * g.n == 0 ? 0 : numel(out) / (g.m * g.n);
      }
      return g;
    }
    default:
      return std::nullopt;
  }
}

// FLOPs of an attention node: q·kᵀ and p·v over the unmasked (query, key) pairs.
double attention_flops(const ir::Node& node) {
  const Shape& q = node.operands[0]->type.shape;
  const Shape& k = node.operands[1]->type.shape;
  const Shape& v = node.operands[2]->type.shape;
  const int64_t S = q[q.size() - 2], D = q.back(), Sk = k[k.size() - 2], Dv = v.back();
  const double heads = S * D == 0 ? 0 : double(numel(q)) / double(S * D);
  double pairs = double(S) * double(Sk);
  if (node.attr_bool("causal")) {  // query i sees keys 0..i
    pairs = 0;
    for (int64_t i = 0; i < S; ++i) pairs += double(std::min(Sk, i + 1));
  }
  return 2.0 * heads * pairs * double(D + Dv);
}

// Returns the fastest of 3 timed [m, k] x [k, n] f32 GEMMs (after one warm-up), in seconds.
double time_gemm(int64_t m, int64_t k, int64_t n) {
  Generator gen(1);
  const Tensor a = rand({m, k}, gen), b = rand({k, n}, gen);
  mm(a, b);
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 3; ++i) {
    const auto t0 = runtime::Clock::now();
    mm(a, b);
    best = std::min(best, std::chrono::duration<double>(runtime::Clock::now() - t0).count());
  }
  return best;
}

double gflops(double flops, double seconds) { return seconds > 0 ? flops / seconds / 1e9 : 0; }

nlohmann::json profile(const ProfileOptions& opt, int threads) {
  const LoadedProgram p = load_program(opt.model, opt.weights, opt.inputs);
  const auto& nodes = p.graph.nodes();
  std::vector<double> cur(nodes.size()), best(nodes.size());
  runtime::RunStats stats;
  std::map<std::tuple<int64_t, int64_t, int64_t>, double> gemm_seconds;
  run_ranks(1, [&](ProcessGroup& world) {
    const runtime::GroupMap groups = runtime::make_groups(p.graph, world);
    runtime::Interpreter interp(p.graph);
    interp.set_node_hook([&](const ir::Node&, size_t i, runtime::Clock::time_point s, runtime::Clock::time_point e) {
      cur[i] = std::chrono::duration<double>(e - s).count();
    });
    interp.run(p.bindings, groups);  // warm-up
    for (int r = 0; r < std::max(opt.repeat, 1); ++r) {
      runtime::RunStats s;
      interp.run(p.bindings, groups, &s);
      if (r == 0 || s.seconds < stats.seconds) {
        stats = s;
        best = cur;
      }
    }
    // Reference GEMMs on this same thread (and so the same pool).
    for (const ir::Node* n : nodes)
      if (auto g = gemm_shape(*n); g && g->flops() > 0) gemm_seconds.try_emplace({g->m, g->k, g->n}, 0.0);
    for (auto& [shape, sec] : gemm_seconds) sec = time_gemm(std::get<0>(shape), std::get<1>(shape), std::get<2>(shape));
  });

  const double total = stats.seconds;
  auto pct = [&](double s) { return total > 0 ? 100.0 * s / total : 0.0; };
  nlohmann::json j;
  j["model"] = opt.model;
  j["threads"] = threads;
  j["repeat"] = opt.repeat;
  j["time_ms"] = total * 1e3;
  j["peak_bytes"] = stats.peak_bytes;

  std::map<std::string, std::pair<int, double>> kinds;
  for (size_t i = 0; i < nodes.size(); ++i) {
    auto& [count, sec] = kinds[std::string(ir::op_name(nodes[i]->op))];
    ++count;
    sec += best[i];
  }
  std::vector<std::pair<std::string, std::pair<int, double>>> kv(kinds.begin(), kinds.end());
  std::sort(kv.begin(), kv.end(), [](const auto& x, const auto& y) { return x.second.second > y.second.second; });
  j["op_kinds"] = nlohmann::json::array();
  for (const auto& [op, cs] : kv)
    j["op_kinds"].push_back({{"op", op}, {"nodes", cs.first}, {"ms", cs.second * 1e3}, {"percent", pct(cs.second)}});

  std::vector<size_t> order(nodes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return best[x] > best[y]; });
  j["top_nodes"] = nlohmann::json::array();
  for (size_t r = 0; r < std::min<size_t>(20, order.size()); ++r) {
    const ir::Node& n = *nodes[order[r]];
    j["top_nodes"].push_back({{"node", n.result()->name}, {"op", std::string(ir::op_name(n.op))}, {"ms", best[order[r]] * 1e3},
                              {"percent", pct(best[order[r]])}});
  }

  double mm_flops = 0, gemm_only = 0, attn_flops = 0;
  j["matmuls"] = nlohmann::json::array();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& n = *nodes[i];
    nlohmann::json e = {{"node", n.result()->name}, {"op", std::string(ir::op_name(n.op))}, {"ms", best[i] * 1e3}};
    if (auto g = gemm_shape(n); g && g->flops() > 0) {
      const double ref = gemm_seconds.at({g->m, g->k, g->n}) * double(g->batch);
      mm_flops += g->flops();
      gemm_only += ref;
      e.update({{"batch", g->batch}, {"m", g->m}, {"k", g->k}, {"n", g->n}, {"gflop", g->flops() / 1e9},
                {"gflops", gflops(g->flops(), best[i])}, {"gemm_gflops", gflops(g->flops(), ref)},
                {"ratio", best[i] > 0 ? ref / best[i] : 0.0}});
    } else if (n.op == ir::OpKind::scaled_dot_product_attention) {
      const double f = attention_flops(n);
      attn_flops += f;
      e.update({{"gflop", f / 1e9}, {"gflops", gflops(f, best[i])}, {"gemm_gflops", nullptr}, {"ratio", nullptr}});
    } else {
      continue;
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

void print_text(const nlohmann::json& j) {
  std::printf("model %s on 1 device, %d thread(s): %.3f ms (fastest of %d), peak memory %.2f MiB\n",
              j["model"].get<std::string>().c_str(), j["threads"].get<int>(), j["time_ms"].get<double>(),
              j["repeat"].get<int>(), double(j["peak_bytes"].get<size_t>()) / (1 << 20));
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
}

void profile_command(const ProfileOptions& opt) {
  if (!opt.mesh.empty() || !opt.plan.empty())
    DT_THROW(ValueError) << "profile --mesh/--plan is not implemented yet: profile the model on one device";
  if (opt.repeat < 1) DT_THROW(ValueError) << "--repeat must be >= 1, got " << opt.repeat;
  const int threads = apply_threads_option(opt.threads, 1);
  const nlohmann::json j = profile(opt, threads);
  if (opt.json)
    std::printf("%s\n", j.dump(2).c_str());
  else
    print_text(j);
}

void setup(CLI::App& app) {
  static ProfileOptions opt;
  CLI::App* cmd = app.add_subcommand("profile", "Time a model per op kind and node; GFLOP/s of its matmuls against plain GEMMs");
  cmd->add_option("model", opt.model, "IR file (.dt)")->required();
  cmd->add_option("--weights", opt.weights, "safetensors file with every parameter of the model");
  cmd->add_option("--inputs", opt.inputs, "safetensors file with the data inputs, by name");
  cmd->add_option("--repeat", opt.repeat, "timed runs after one warm-up; the fastest is reported")->capture_default_str();
  cmd->add_option("--mesh", opt.mesh, "not implemented yet (profile runs one device)");
  cmd->add_option("--plan", opt.plan, "not implemented yet (profile runs one device)");
  cmd->add_flag("--json", opt.json, "print the profile as JSON");
  add_threads_option(cmd, opt.threads);
  cmd->callback([] { profile_command(opt); });
}

CommandRegistrar reg("profile", setup);

}  // namespace
}  // namespace dt::tools
