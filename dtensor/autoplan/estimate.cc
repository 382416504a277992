#include "dtensor/autoplan/estimate.h"

#include <algorithm>

#include "dtensor/ir/op_registry.h"
#include "dtensor/passes/memory_estimate.h"

namespace dt::autoplan {
namespace {

// Ranks sharing a node's work: the product of the mesh dims where its result is sharded or partial.
int64_t work_split(const DeviceMesh& mesh, const Placements& p) {
  int64_t n = 1;
  for (size_t m = 0; m < p.size(); ++m)
    if (p[m].is_shard() || p[m].is_partial()) n *= mesh.size(int64_t(m));
  return n;
}

// Bytes of one rank's block of a value (the largest block when uneven).
double local_bytes(const DeviceMesh& mesh, const ir::Value& v, const Placements& p) {
  Shape s = v.type.shape;
  for (size_t m = 0; m < p.size(); ++m) {
    if (!p[m].is_shard()) continue;
    const int64_t d = p[m].dim() < 0 ? p[m].dim() + int64_t(s.size()) : p[m].dim();
    if (d >= 0 && d < int64_t(s.size())) s[size_t(d)] = (s[size_t(d)] + mesh.size(int64_t(m)) - 1) / mesh.size(int64_t(m));
  }
  return double(numel(s)) * double(itemsize(v.type.dtype));
}

// Adds the collectives of moving v from src to dst; returns their time.
double add_moves(const sharding::Sharding& sh, const ir::Value& v, const Placements& src, const Placements& dst,
                 RedistributePlanner& planner, Estimate& e) {
  if (src.empty() || dst.empty() || src == dst) return 0;
  auto plan = planner.plan(sh.mesh.shape(), src, dst, v.type.shape, v.type.dtype);
  double us = 0;
  for (const RedistributeStep& step : plan->steps) {
    if (!is_collective(step.kind)) continue;
    e.comm_us[std::string(step_kind_name(step.kind))] += step.time_us;
    us += step.time_us;
  }
  e.comm_total_us += us;
  return us;
}

}  // namespace

Estimate estimate_time(const ir::Graph& graph, const sharding::Sharding& sh, const MachineModel& machine,
                       RedistributePlanner& planner, std::vector<double>* node_us) {
  Estimate e;
  const std::vector<ir::Node*>& nodes = graph.nodes();
  if (node_us) node_us->assign(nodes.size() + 1, 0.0);
  // Each node's share: what the step time grows by while visiting it.
  auto charge = [&](size_t i, double before) {
    if (node_us) (*node_us)[i] += e.compute_us + e.comm_total_us - before;
  };
  auto produced = [&](const ir::Value* v) -> const Placements& {
    const size_t id = size_t(v->id);
    return id < sh.reads.size() && !sh.reads[id].empty() ? sh.reads[id] : sh.values[size_t(v->id)];
  };
  // Each move of a value to a placement is charged once: the partitioner lowers it once per rank
  // and every reader that needs that placement reads the one copy (sharding/partitioner.cc).
  std::vector<std::vector<Placements>> moved(graph.num_values());
  auto move_once = [&](const ir::Value& v, const Placements& dst) {
    const Placements& src = produced(&v);
    if (src.empty() || dst.empty() || src == dst) return;
    auto& to = moved[size_t(v.id)];
    if (std::find(to.begin(), to.end(), dst) != to.end()) return;
    to.push_back(dst);
    add_moves(sh, v, src, dst, planner, e);
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& node = *nodes[i];
    const double before = e.compute_us + e.comm_total_us;
    const ir::OpDef& def = ir::op_def(node.op);
    if (!node.results.empty()) {
      const Placements& out = sh.values[size_t(node.results[0]->id)];
      if (def.flops) {
        e.compute_us += def.flops(node) / double(work_split(sh.mesh, out)) / (machine.gemm_gflops * 1e3);
      } else {
        double bytes = 0;
        for (const ir::Value* r : node.results) bytes += local_bytes(sh.mesh, *r, sh.values[size_t(r->id)]);
        e.compute_us += bytes / (machine.mem_gbs * 1e3);
      }
      for (const ir::Value* r : node.results)
        if (size_t(r->id) < sh.reads.size()) add_moves(sh, *r, sh.values[size_t(r->id)], sh.reads[size_t(r->id)], planner, e);
    }
    if (i < sh.nodes.size()) {
      const sharding::NodeSharding& ns = sh.nodes[i];
      for (size_t j = 0; j < node.operands.size() && j < ns.operands.size(); ++j)
        move_once(*node.operands[j], ns.operands[j]);
    }
    charge(i, before);
  }
  const double before = e.compute_us + e.comm_total_us;
  for (size_t k = 0; k < graph.outputs().size() && k < sh.outputs.size(); ++k)
    move_once(*graph.outputs()[k], sh.outputs[k]);
  charge(nodes.size(), before);
  e.step_us = e.compute_us + e.comm_total_us;
  return e;
}

double lower_bound_us(const ir::Graph& graph, int64_t ranks, const MachineModel& machine) {
  double flops = 0, bytes = 0;
  for (const ir::Node* n : graph.nodes()) {
    if (n->results.empty()) continue;
    if (const auto f = ir::op_def(n->op).flops) {
      flops += f(*n);
      continue;
    }
    for (const ir::Value* r : n->results) bytes += double(numel(r->type.shape)) * double(itemsize(r->type.dtype));
  }
  return (flops / (machine.gemm_gflops * 1e3) + bytes / (machine.mem_gbs * 1e3)) / double(ranks);
}

void add_memory(const ir::Graph& program, Estimate& e) {
  const int64_t params = sharding::param_bytes(program);
  const int64_t act = passes::estimate_peak_bytes(program);
  e.param_bytes = std::max(e.param_bytes, params);
  e.activation_bytes = std::max(e.activation_bytes, act);
  e.peak_bytes = std::max(e.peak_bytes, params + act);
}

Estimate estimate(const ir::Graph& graph, const sharding::CompiledModel& compiled, const MachineModel& machine) {
  // The shared planner (and its cache) prices with the default constants; another machine's
  // α–β gets a planner of its own.
  RedistributePlanner own(machine.comm);
  Estimate e = estimate_time(graph, compiled.sharding, machine, machine.comm == CostModel{} ? default_planner() : own);
  for (const ir::Graph& p : compiled.programs) add_memory(p, e);
  return e;
}

}  // namespace dt::autoplan
