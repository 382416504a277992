#include "dtensor/job/report.h"

#include <algorithm>

#include "dtensor/autoplan/estimate.h"
#include "dtensor/core/error.h"
#include "dtensor/job/train_pipeline.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/passes/buffer_planner.h"
#include "dtensor/passes/memory_estimate.h"

namespace dt::job {

// Jobs of up to this many ranks are reported rank by rank (each from its orbit's program);
// larger ones by distinct program, with how many ranks run each.
constexpr int64_t kListedRanks = 4096;

nlohmann::json program_json(const ir::Graph& p, int rank) {
  sharding::CollectiveStats s = sharding::collective_stats(p, rank);
  nlohmann::json colls = nlohmann::json::array();
  for (const auto& n : p.nodes()) {
    if (!ir::op_def(n->op).is_collective()) continue;
    colls.push_back({{"value", n->result()->name},
                     {"kind", std::string(ir::op_name(n->op))},
                     {"group", n->attr_str("group")},
                     // A recv (a pipeline's) reads nothing: its result's type.
                     {"input", ir::type_str((n->operands.empty() ? n->result() : n->operands[0])->type)}});
  }
  return {{"rank", rank},
          {"nodes", p.nodes().size()},
          {"collectives", colls},
          {"collectives_per_kind", s.count},
          {"bytes_sent_per_kind", s.bytes},
          {"bytes_sent", s.total_bytes},
          {"param_bytes", sharding::param_bytes(p)},
          {"activation_bytes_estimate", passes::estimate_peak_bytes(p)},
          {"arena_bytes", passes::check_comm_buffer_plan(p)}};
}

// `ranks`: every rank of the job (each reported from its orbit's program) when it has at most
// kListedRanks, else the orbits' representatives with `ranks_running`. `orbits`: one entry per
// distinct program (its representative and how many ranks run it).
nlohmann::json report_json(const sharding::CompiledModel& c, const ir::Graph& model) {
  const ir::RankOrbits& orbits = c.orbits;
  auto program_of = [&](int rank) -> const ir::Graph& {
    for (size_t i = 0; i < c.ranks.size(); ++i)
      if (c.ranks[i] == rank) return c.programs[i];
    DT_THROW(InternalError) << "no program for rank " << rank;
  };
  std::vector<nlohmann::json> per_orbit;
  nlohmann::json orbit_list = nlohmann::json::array();
  for (size_t k = 0; k < orbits.orbits.size(); ++k) {
    const ir::RankOrbit& o = orbits.orbits[k];
    // An orbit whose program equals another's (RankOrbit::same_as) is reported from that one.
    per_orbit.push_back(program_json(program_of(orbits.orbits[orbits.program_orbit(k)].representative), o.representative));
    orbit_list.push_back({{"rank", o.representative}, {"ranks_running", o.ranks}});
  }
  nlohmann::json ranks = nlohmann::json::array();
  const int64_t total = c.sharding.mesh.size();
  if (total <= kListedRanks) {
    for (int r : c.sharding.mesh.ranks()) {
      nlohmann::json e = per_orbit[size_t(orbits.orbit_of(r))];
      e["rank"] = r;
      ranks.push_back(std::move(e));
    }
  } else {
    for (size_t o = 0; o < per_orbit.size(); ++o) {
      nlohmann::json e = per_orbit[o];
      e["ranks_running"] = orbits.orbits[o].ranks;
      ranks.push_back(std::move(e));
    }
  }
  // The step estimate the plan search ranks plans by (autoplan/estimate.h), so that any two plans,
  // written by hand or found, compare on one scale.
  const autoplan::Estimate est = autoplan::estimate(model, c);
  return {{"model", model.name()},
          {"nodes", model.nodes().size()},
          {"param_bytes_unsharded", sharding::param_bytes(model)},
          {"activation_bytes_estimate_unsharded", passes::estimate_peak_bytes(model)},
          {"mesh", c.sharding.mesh.str()},
          {"mesh_ranks", total},
          {"mesh_dims", c.sharding.mesh_dim_names},
          {"warnings", c.sharding.warnings},
          {"estimated_comm_us", c.sharding.total_cost_us},
          {"estimated_step_us", est.step_us},
          {"estimated_compute_us", est.compute_us},
          {"estimated_comm_us_per_kind", est.comm_us},
          {"estimated_peak_bytes", est.peak_bytes},
          {"propagate_ms", c.propagate_ms},
          {"partition_ms", c.partition_ms},
          {"orbits", orbit_list},
          {"ranks", ranks}};
}

namespace {

// The block a parameter's module belongs to: up to its first numbered part (h.3.attn.q_proj -> h.3),
// else its first part (lm_head).
std::string block_of(const std::string& module) {
  size_t at = 0;
  while (at < module.size()) {
    const size_t end = std::min(module.find('.', at), module.size());
    const std::string part = module.substr(at, end - at);
    if (!part.empty() && part.find_first_not_of("0123456789") == std::string::npos) return module.substr(0, end);
    at = end + 1;
  }
  return module.substr(0, module.find('.'));
}

}  // namespace

std::vector<std::pair<int, int>> rank_ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::vector<std::pair<int, int>> out;
  for (int r : ranks)
    if (!out.empty() && out.back().second + 1 == r) out.back().second = r;
    else out.emplace_back(r, r);
  return out;
}

nlohmann::json pipeline_report_json(const PipelinePrograms& pp, const sharding::PipelinePlan& plan) {
  nlohmann::json stages = nlohmann::json::array();
  for (int s = 0; s < pp.split.stages; ++s) {
    // Interleaved: a rank runs several stages; its program (its orbit's) covers them all.
    const std::vector<int>& ranks = pp.meshes[size_t(s)].ranks();
    const pipeline::StageProgram& first = pp.orbit_program(*std::min_element(ranks.begin(), ranks.end()));
    std::vector<std::string> layers;
    for (const ir::Value* p : pp.graphs[size_t(s)].params) {
      const std::string block = block_of(sharding::module_of(p->name));
      if (std::find(layers.begin(), layers.end(), block) == layers.end()) layers.push_back(block);
    }
    int64_t sent = 0, received = 0;
    for (const auto& n : first.step.graph.nodes()) {
      if (n->op == ir::OpKind::send) sent += int64_t(n->operands[0]->type.nbytes());
      if (n->op == ir::OpKind::recv) received += int64_t(n->result()->type.nbytes());
    }
    stages.push_back({{"stage", s},
                      {"ranks", rank_ranges(ranks)},
                      {"rank_count", ranks.size()},
                      {"layers", layers},
                      {"boundary_bytes_sent", sent},
                      {"boundary_bytes_received", received},
                      {"program", program_json(first.step.graph, first.rank)}});
  }
  return {{"stages", pp.split.stages}, {"microbatches", pp.split.microbatches}, {"schedule", plan.schedule},
          {"orbits", pp.orbits.orbits.size()}, {"stage_programs_partitioned", pp.stage_programs_partitioned},
          {"stage", stages}};
}

}  // namespace dt::job
