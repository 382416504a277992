#include "dtensor/runtime/gemm_reference.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "dtensor/kernels/ops.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/op_registry.h"

namespace dt::runtime {
namespace {

double time_gemm(int64_t m, int64_t k, int64_t n) {
  Generator gen(1);
  const Tensor a = rand({m, k}, gen), b = rand({k, n}, gen);
  mm(a, b);
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    mm(a, b);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

void time_gemms(const ir::Graph& graph, GemmTimes& times) {
  for (const ir::Node* n : graph.nodes()) {
    const ir::OpDef& def = ir::op_def(n->op);
    if (!def.gemm_shape) continue;
    const ir::GemmShape g = def.gemm_shape(*n);
    if (g.flops() > 0 && !times.count({g.m, g.k, g.n})) times[{g.m, g.k, g.n}] = time_gemm(g.m, g.k, g.n);
  }
}

double gemm_only_seconds(const ir::Graph& graph, const GemmTimes& times, double* flops) {
  double s = 0;
  for (const ir::Node* n : graph.nodes()) {
    const ir::OpDef& def = ir::op_def(n->op);
    if (!def.gemm_shape) continue;
    const ir::GemmShape g = def.gemm_shape(*n);
    if (g.flops() <= 0) continue;
    s += times.at({g.m, g.k, g.n}) * double(g.batch);
    if (flops) *flops += g.flops();
  }
  return s;
}

}  // namespace dt::runtime
