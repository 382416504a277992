#include "dtensor/sharding/compiler.h"

#include <algorithm>
#include <chrono>

#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/sharding/rank_orbits.h"

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
  if (options.adjust_plan) options.adjust_plan(c.plan);
  c.sharding = propagate(graph, mesh, c.plan, planner);
  c.propagate_ms = ms_since(t0);
  c.ranks = options.ranks.empty() ? mesh.ranks() : options.ranks;
  if (options.orbits) {
    c.orbits = rank_orbits(graph, c.sharding);
    for (const ir::RankOrbit& o : c.orbits.orbits)
      if (std::find(c.ranks.begin(), c.ranks.end(), o.representative) == c.ranks.end())
        c.ranks.push_back(o.representative);
  }
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
    const ir::OpDef& def = ir::op_def(n.op);
    if (!def.is_collective()) continue;
    const ir::GroupDecl* g = program.find_group(n.attr_str("group"));
    DT_CHECK(g) << "undeclared group " << n.attr_str("group");
    const int64_t size = int64_t(g->ranks.size());
    const int64_t me = std::find(g->ranks.begin(), g->ranks.end(), rank) - g->ranks.begin();
    const int64_t bytes = def.bytes_sent(n, size, me);
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
