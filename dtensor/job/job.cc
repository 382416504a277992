#include "dtensor/job/job.h"

#include <algorithm>

#include "dtensor/core/error.h"
#include "dtensor/job/train_pipeline.h"
#include "dtensor/passes/pass_manager.h"
#include "dtensor/passes/rank_pipeline.h"
#include "dtensor/sharding/tensor_sharding.h"

namespace dt::job {
namespace {

// Runs the pass pipeline over every program (passes/rank_pipeline.h).
void run_pass_pipeline(const PassSettings& settings, sharding::CompiledModel& c) {
  passes::PassManager pm;
  pm.add(passes::parse_pipeline(settings.pipeline, settings.options));
  passes::RankPipelineOptions ro;
  ro.check_ranks = settings.check_ranks;
  ro.print_after = settings.print_after;
  ro.orbits = &c.orbits;
  passes::run_rank_pipelines(pm, c.programs, c.ranks, ro);
}

}  // namespace

runtime::Backend default_backend() {
  return runtime::launched_by_mpirun() ? runtime::Backend::mpi : runtime::Backend::threads;
}

void check_mesh_fits_model(const ir::Graph& model, const sharding::ResolvedPlan& plan, const DeviceMesh& mesh) {
  for (const ir::Value* p : model.params()) {
    const Placements& placements = plan.value_placements[size_t(p->id)];
    for (size_t m = 0; m < placements.size(); ++m) {
      const Placement& pl = placements[m];
      if (!pl.is_shard()) continue;
      const int64_t dim_size = p->type.shape[size_t(pl.dim())];
      if (dim_size < mesh.size(int64_t(m)))
        DT_THROW(ValueError) << "too many ranks for this model's dims: mesh dim " << plan.mesh_dim_names[m] << " has "
                             << mesh.size(int64_t(m)) << " ranks but parameter " << p->name << " "
                             << ir::type_str(p->type) << ", which the plan shards over it on dim " << pl.dim()
                             << ", has only " << dim_size;
    }
  }
}

Job Job::compile(const ir::Graph& model, JobOptions options) { return compile(model, std::move(options), nullptr); }

Job Job::compile(const ir::Graph& model, JobOptions options,
                 const std::function<void(sharding::ResolvedPlan&)>& adjust_plan) {
  if (options.backend == runtime::Backend::mpi && !runtime::mpi_backend_available())
    DT_THROW(ValueError) << "the mpi backend was requested, but this dtensor was built without Open MPI "
                            "(DTENSOR_WITH_MPI off): rebuild with Open MPI installed or use the threads backend";
  for (int r : options.ranks)
    if (!options.mesh.contains(r)) DT_THROW(ValueError) << "rank " << r << " is not in mesh " << options.mesh.str();
  Job job;
  job.graph_ = model.clone();
  if (options.plan.pipeline) {  // forward-only pipeline stages (train_pipeline.h)
    pipeline::ProgramOptions po;
    po.training = false;
    // JobOptions::ranks' programs and one per orbit (train_pipeline.h); every rank's on threads;
    // under mpi the orbits' alone (each process builds its own rank's when it runs).
    std::optional<std::vector<int>> ranks;
    if (!options.ranks.empty()) ranks = options.ranks;
    else if (options.backend == runtime::Backend::mpi) ranks = std::vector<int>{};
    job.pipeline_ =
        std::make_shared<const PipelinePrograms>(compile_pipeline(job.graph_, options.plan, options.mesh, po, ranks));
    job.options_ = std::move(options);
    return job;
  }
  // Only the wanted ranks' programs and one per orbit (sharding/rank_orbits.h) are built: the
  // passes and the cross-rank check need no more, whatever the mesh size.
  sharding::CompileOptions co;
  co.orbits = true;
  co.ranks = options.ranks;
  const DeviceMesh& mesh = options.mesh;
  co.adjust_plan = [&](sharding::ResolvedPlan& plan) {
    if (adjust_plan) adjust_plan(plan);
    check_mesh_fits_model(job.graph_, plan, mesh);
  };
  job.compiled_ = sharding::compile(job.graph_, options.plan, mesh, co);
  run_pass_pipeline(options.passes, job.compiled_);

  for (size_t i = 0; i < job.compiled_.ranks.size(); ++i) job.program_of_rank_[job.compiled_.ranks[i]] = i;
  job.options_ = std::move(options);
  return job;
}

const ir::Graph& Job::program(int rank) const {
  auto it = program_of_rank_.find(rank);
  if (it == program_of_rank_.end())
    DT_THROW(ValueError) << "rank " << rank << " has no program in this job (mesh " << mesh().str() << ")";
  return compiled_.programs[it->second];
}

std::vector<const ir::Graph*> Job::programs_by_rank() const {
  // The runtime runs ranks 0..size-1 (threads of one process, or mpirun's processes).
  const int64_t n = mesh().size();
  for (int r : mesh().ranks())
    if (r < 0 || r >= n)
      DT_THROW(ValueError) << "mesh " << mesh().str() << " uses rank " << r << ": the "
                           << runtime::backend_name(options_.backend) << " backend runs ranks 0.." << n - 1;
  std::vector<const ir::Graph*> out;
  for (int r = 0; r < n; ++r) out.push_back(&program(r));
  return out;
}

runtime::Bindings Job::bindings(int rank, const Weights& weights, const TensorMap& inputs) const {
  return bindings(rank, weights, inputs, weights.matches(graph_, compiled_.sharding, mesh()));
}

runtime::Bindings Job::bindings(int rank, const Weights& weights, const TensorMap& inputs, bool matching) const {
  runtime::Bindings b;
  if (!graph_.params().empty()) b = weights.rank_shards(graph_, compiled_.sharding, mesh(), rank, matching);
  for (auto& [k, v] : sharding::shard_inputs(graph_, compiled_.sharding, inputs, rank)) b[k] = v;
  return b;
}

std::vector<runtime::Bindings> Job::bindings_by_rank(const Weights& weights, const TensorMap& inputs) const {
  const bool matching = weights.matches(graph_, compiled_.sharding, mesh());  // once for every rank
  std::vector<runtime::Bindings> out;
  for (int r = 0; r < int(mesh().size()); ++r) out.push_back(bindings(r, weights, inputs, matching));
  return out;
}

Tensor Job::assemble_output(size_t k, const std::vector<Tensor>& locals) const {
  DT_CHECK(k < graph_.outputs().size()) << "output " << k << " of " << graph_.outputs().size();
  return sharding::assemble_tensor(locals, mesh(), compiled_.sharding.outputs[k], graph_.outputs()[k]->type.shape);
}

RankStats Job::rank_stats(int rank, const runtime::RunStats& stats) const {
  const ir::Graph& p = program(rank);
  const sharding::CollectiveStats cs = sharding::collective_stats(p, rank);
  return {rank, stats.seconds * 1e3, stats.peak_bytes, sharding::param_bytes(p), cs.total_bytes, cs.total};
}

}  // namespace dt::job
