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

// Whether two programs are the same up to renaming: the same nodes with the same ops, operands,
// result types and groups, in the same order (what passes::check_same_orbit checks).
bool same_up_to_renaming(const ir::Graph& a, const ir::Graph& b) {
  if (a.nodes().size() != b.nodes().size() || a.groups().size() != b.groups().size()) return false;
  for (size_t i = 0; i < a.nodes().size(); ++i) {
    const ir::Node& x = *a.nodes()[i];
    const ir::Node& y = *b.nodes()[i];
    if (x.op != y.op || x.operands.size() != y.operands.size() || x.results.size() != y.results.size()) return false;
    for (size_t k = 0; k < x.results.size(); ++k)
      if (x.results[k]->type.dtype != y.results[k]->type.dtype || x.results[k]->type.shape != y.results[k]->type.shape)
        return false;
    for (size_t k = 0; k < x.operands.size(); ++k)
      if (x.operands[k]->id != y.operands[k]->id || x.operands[k]->type.shape != y.operands[k]->type.shape) return false;
    const ir::OpDef& def = ir::op_def(x.op);
    if (!def.is_collective()) continue;
    for (const char* attr : {"group", "op", "src"})
      if (const int k = def.attr_index(attr); k >= 0 && x.attrs[size_t(k)] != y.attrs[size_t(k)]) return false;
  }
  return true;
}

// Orbits whose representatives' programs turn out equal up to renaming share the first one's
// (RankOrbit::same_as); their representatives' programs are dropped unless `keep` asks for them.
void merge_equal_orbits(CompiledModel& c, const std::vector<int>& keep) {
  std::vector<int> index_of_orbit;
  for (const ir::RankOrbit& o : c.orbits.orbits) {
    const int i = int(std::find(c.ranks.begin(), c.ranks.end(), o.representative) - c.ranks.begin());
    DT_CHECK(size_t(i) < c.ranks.size()) << "no program for representative " << o.representative;
    index_of_orbit.push_back(i);
  }
  std::vector<size_t> distinct;
  std::vector<bool> drop(c.programs.size(), false);
  for (size_t o = 0; o < c.orbits.orbits.size(); ++o) {
    const ir::Graph& p = c.programs[size_t(index_of_orbit[o])];
    for (size_t q : distinct)
      if (same_up_to_renaming(p, c.programs[size_t(index_of_orbit[q])])) {
        c.orbits.orbits[o].same_as = int(q);
        const int rank = c.orbits.orbits[o].representative;
        if (std::find(keep.begin(), keep.end(), rank) == keep.end()) drop[size_t(index_of_orbit[o])] = true;
        break;
      }
    if (c.orbits.orbits[o].same_as < 0) distinct.push_back(o);
  }
  std::vector<int> ranks;
  std::vector<ir::Graph> programs;
  for (size_t i = 0; i < c.programs.size(); ++i) {
    if (drop[i]) continue;
    ranks.push_back(c.ranks[i]);
    programs.push_back(std::move(c.programs[i]));
  }
  c.ranks = std::move(ranks);
  c.programs = std::move(programs);
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
  if (options.orbits) merge_equal_orbits(c, options.ranks.empty() ? c.sharding.mesh.ranks() : options.ranks);
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
