#include "dtensor/sharding/compiler.h"

#include <algorithm>
#include <chrono>

#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"

namespace dt::sharding {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

CompiledModel compile(const ir::Graph& graph, const ParallelPlan& plan, const DeviceMesh& mesh,
                      const CompileOptions& options, RedistributePlanner& planner) {
  CompiledModel c;
  auto t0 = std::chrono::steady_clock::now();
  c.plan = resolve_plan(plan, graph, mesh);
  c.sharding = propagate(graph, mesh, c.plan, planner);
  c.propagate_ms = ms_since(t0);
  c.ranks = options.ranks.empty() ? mesh.ranks() : options.ranks;
  t0 = std::chrono::steady_clock::now();
  c.programs.reserve(c.ranks.size());
  for (int r : c.ranks) c.programs.push_back(partition(graph, c.sharding, r, planner, {.verify = options.verify}));
  c.partition_ms = ms_since(t0);
  return c;
}

CollectiveStats collective_stats(const ir::Graph& program, int rank) {
  CollectiveStats s;
  for (const auto& np : program.nodes()) {
    const ir::Node& n = *np;
    // Lowered forms count as what they are: all_reduce_ and the blocking one-shot are all_reduces.
    const bool lowered_all_reduce = n.op == ir::OpKind::all_reduce_ || n.op == ir::OpKind::one_shot_all_reduce;
    if (!ir::op_def(n.op).is_collective && !lowered_all_reduce) continue;
    const ir::GroupDecl* g = program.find_group(n.attr_str("group"));
    DT_CHECK(g) << "undeclared group " << n.attr_str("group");
    const int64_t size = int64_t(g->ranks.size());
    const int64_t me = std::find(g->ranks.begin(), g->ranks.end(), rank) - g->ranks.begin();
    const int64_t in = int64_t(n.operands[0]->type.nbytes());
    int64_t bytes = 0;
    switch (n.op) {
      case ir::OpKind::all_gather_into_tensor: bytes = in * (size - 1); break;
      case ir::OpKind::all_reduce: case ir::OpKind::all_reduce_: case ir::OpKind::one_shot_all_reduce:
        bytes = 2 * (size - 1) * in / size;
        break;
      case ir::OpKind::reduce_scatter_tensor: bytes = (size - 1) * in / size; break;
      case ir::OpKind::broadcast: bytes = me == n.attr_int("src") ? in : 0; break;
      case ir::OpKind::all_to_all_single: {
        const auto& splits = n.attr_ints("in_split_sizes");
        if (splits.empty() || me >= size) {
          bytes = (size - 1) * in / size;
        } else {
          int64_t rows = 0;
          for (int64_t v : splits) rows += v;
          const int64_t shape0 = n.operands[0]->type.shape[0];
          const int64_t row_bytes = shape0 > 0 ? in / shape0 : 0;
          bytes = (rows - splits[size_t(me)]) * row_bytes;
        }
        break;
      }
      default: break;
    }
    const std::string name(ir::op_name(n.op));
    s.count[name]++;
    s.bytes[name] += bytes;
    s.total_bytes += bytes;
    s.total++;
  }
  return s;
}

int64_t param_bytes(const ir::Graph& program) {
  int64_t b = 0;
  for (const ir::Value* p : program.params()) b += int64_t(p->type.nbytes());
  return b;
}

}  // namespace dt::sharding
