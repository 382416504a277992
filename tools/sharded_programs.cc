#include "tools/sharded_programs.h"

#include "dtensor/core/error.h"
#include "tools/passes_cli.h"

namespace dt::tools {

ShardedPrograms shard_for_threads(const ir::Graph& model, const sharding::ParallelPlan& plan, const DeviceMesh& mesh,
                                  const sharding::TensorMap& full) {
  ShardedPrograms s{sharding::compile(model, plan, mesh), {}, {}};
  sharding::CompiledModel& c = s.compiled;
  run_pass_pipelines(c.programs, c.ranks, PassCliOptions{});
  const int n = mesh.size();
  s.programs.assign(size_t(n), nullptr);
  s.bindings.resize(size_t(n));
  for (size_t i = 0; i < c.ranks.size(); ++i) {
    const int r = c.ranks[i];
    if (r < 0 || r >= n)
      DT_THROW(ValueError) << "mesh " << mesh.str() << " uses rank " << r << ": one process runs ranks 0.." << n - 1;
    s.programs[size_t(r)] = &c.programs[i];
    s.bindings[size_t(r)] = sharding::shard_weights(model, c.sharding, full, r);
    for (auto& [k, v] : sharding::shard_inputs(model, c.sharding, full, r)) s.bindings[size_t(r)][k] = v;
  }
  for (int r = 0; r < n; ++r)
    if (!s.programs[size_t(r)]) DT_THROW(ValueError) << "mesh " << mesh.str() << " has no program for rank " << r;
  return s;
}

}  // namespace dt::tools
