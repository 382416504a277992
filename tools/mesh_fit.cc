#include "tools/mesh_fit.h"

#include "dtensor/core/error.h"

namespace dt::tools {

void check_mesh_fits_model(const ir::Graph& model, const sharding::ParallelPlan& plan, const DeviceMesh& mesh) {
  const sharding::ResolvedPlan resolved = sharding::resolve_plan(plan, model, mesh);
  for (const ir::Value* p : model.params()) {
    const Placements& placements = resolved.value_placements[size_t(p->id)];
    for (size_t m = 0; m < placements.size(); ++m) {
      const Placement& pl = placements[m];
      if (!pl.is_shard()) continue;
      const int64_t dim_size = p->type.shape[size_t(pl.dim())];
      if (dim_size < mesh.size(int64_t(m)))
        DT_THROW(ValueError) << "too many ranks for this model's dims: mesh dim " << resolved.mesh_dim_names[m]
                             << " has " << mesh.size(int64_t(m)) << " ranks but parameter " << p->name << " "
                             << ir::type_str(p->type) << ", which the plan shards over it on dim " << pl.dim()
                             << ", has only " << dim_size;
    }
  }
}

}  // namespace dt::tools
