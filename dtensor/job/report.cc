#include "dtensor/job/report.h"

#include "dtensor/ir/op_registry.h"
#include "dtensor/passes/buffer_planner.h"
#include "dtensor/passes/memory_estimate.h"

namespace dt::job {

nlohmann::json report_json(const sharding::CompiledModel& c, const ir::Graph& model) {
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t i = 0; i < c.programs.size(); ++i) {
    const ir::Graph& p = c.programs[i];
    sharding::CollectiveStats s = sharding::collective_stats(p, c.ranks[i]);
    nlohmann::json colls = nlohmann::json::array();
    for (const auto& n : p.nodes()) {
      if (!ir::op_def(n->op).is_collective()) continue;
      colls.push_back({{"value", n->result()->name},
                       {"kind", std::string(ir::op_name(n->op))},
                       {"group", n->attr_str("group")},
                       {"input", ir::type_str(n->operands[0]->type)}});
    }
    ranks.push_back({{"rank", c.ranks[i]},
                     {"nodes", p.nodes().size()},
                     {"collectives", colls},
                     {"collectives_per_kind", s.count},
                     {"bytes_sent_per_kind", s.bytes},
                     {"bytes_sent", s.total_bytes},
                     {"param_bytes", sharding::param_bytes(p)},
                     {"activation_bytes_estimate", passes::estimate_peak_bytes(p)},
                     {"arena_bytes", passes::check_comm_buffer_plan(p)}});
  }
  return {{"model", model.name()},
          {"nodes", model.nodes().size()},
          {"param_bytes_unsharded", sharding::param_bytes(model)},
          {"activation_bytes_estimate_unsharded", passes::estimate_peak_bytes(model)},
          {"mesh", c.sharding.mesh.str()},
          {"mesh_dims", c.sharding.mesh_dim_names},
          {"warnings", c.sharding.warnings},
          {"estimated_comm_us", c.sharding.total_cost_us},
          {"propagate_ms", c.propagate_ms},
          {"partition_ms", c.partition_ms},
          {"ranks", ranks}};
}

}  // namespace dt::job
