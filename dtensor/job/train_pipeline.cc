#include "dtensor/job/train_pipeline.h"

#include <algorithm>
#include <cmath>

#include "dtensor/core/error.h"
#include "dtensor/ir/verifier.h"
#include "dtensor/passes/p2p_order.h"
#include "dtensor/runtime/launcher.h"

namespace dt::job {

using runtime::Bindings;

PipelinePrograms compile_pipeline(const ir::Graph& forward, const sharding::ParallelPlan& plan, const DeviceMesh& mesh,
                                  const pipeline::ProgramOptions& options) {
  DT_CHECK(plan.pipeline) << "compile_pipeline without a pipeline section";
  const sharding::PipelinePlan& pp = *plan.pipeline;
  auto it = std::find(plan.mesh_dims.begin(), plan.mesh_dims.end(), pp.mesh_dim);
  if (it == plan.mesh_dims.end()) {
    std::string dims;
    for (const auto& d : plan.mesh_dims) dims += (dims.empty() ? "" : ", ") + d;
    DT_THROW(ValueError) << plan.source << ": the pipeline runs on mesh dim '" << pp.mesh_dim
                         << "' but the plan's mesh_dims are [" << dims << "]";
  }
  if (int64_t(plan.mesh_dims.size()) != mesh.ndim())
    DT_THROW(ValueError) << plan.source << ": plan names " << plan.mesh_dims.size() << " mesh dims but mesh "
                         << mesh.str() << " has " << mesh.ndim();
  const int64_t pp_dim = it - plan.mesh_dims.begin();
  for (int64_t m = 0; m < mesh.ndim(); ++m)
    if (m != pp_dim && mesh.size(m) > 1)
      DT_THROW(ValueError) << plan.source << ": mesh dim " << plan.mesh_dims[size_t(m)] << " has " << mesh.size(m)
                           << " ranks: a pipeline stage runs on one rank so far (other mesh dims must have size 1)";
  PipelinePrograms out;
  out.split = pipeline::split_stages(forward, pp, int(mesh.size(pp_dim)));
  pipeline::ProgramOptions po = options;
  po.schedule = pipeline::parse_schedule(pp.schedule);
  po.stage_ranks.clear();
  for (int64_t s = 0; s < mesh.size(pp_dim); ++s) {
    std::vector<int64_t> coordinate(size_t(mesh.ndim()), 0);
    coordinate[size_t(pp_dim)] = s;
    po.stage_ranks.push_back(mesh.rank_at(coordinate));
  }
  out.stages = pipeline::stage_programs(pipeline::build_stages(forward, out.split, po.training), out.split, po);
  std::vector<const ir::Graph*> programs;
  for (const pipeline::StageProgram& sp : out.stages) {
    ir::verify(sp.step.graph);
    programs.push_back(&sp.step.graph);
  }
  passes::check_p2p_order(programs, po.stage_ranks, "in the pipeline's stage programs");
  return out;
}

TrainResult train_pipeline(ir::Graph forward, const std::map<std::string, Tensor>& weights,
                           const std::map<std::string, Tensor>& data, const TrainOptions& options,
                           const ShardedTrainOptions& sharded) {
  if (options.steps < 1) DT_THROW(ValueError) << "steps must be >= 1, got " << options.steps;
  if (options.recompute != autodiff::Recompute::none)
    DT_THROW(ValueError) << "recompute is not supported with a pipeline plan yet";
  if (sharded.job.backend != runtime::Backend::threads)
    DT_THROW(ValueError) << "pipeline training runs on the threads backend so far";
  autodiff::validate(options.optimizer);
  pipeline::ProgramOptions po;
  po.training = true;
  po.optimizer = options.optimizer;
  po.with_grads = options.keep_first_grads;
  const PipelinePrograms pp = compile_pipeline(forward, sharded.job.plan, sharded.job.mesh, po);
  const int n = int(sharded.job.mesh.size()), m = pp.split.microbatches;
  for (const ir::Value* v : forward.inputs())
    if (!data.count(v->name)) DT_THROW(ValueError) << "the data has no tensor " << v->name << " (a data input of the model)";

  // Each rank binds its stage's parameters (own copies: the updates write in place) and state.
  std::vector<Bindings> bind(static_cast<size_t>(n));
  std::vector<const ir::Graph*> programs(static_cast<size_t>(n), nullptr);
  for (const pipeline::StageProgram& sp : pp.stages) {
    Bindings& b = bind[size_t(sp.rank)];
    programs[size_t(sp.rank)] = &sp.step.graph;
    const std::map<std::string, Tensor> fresh = autodiff::fresh_state(sp.step);
    for (const ir::Value* v : sp.step.graph.params()) {
      auto w = weights.find(v->name);
      Tensor t = w != weights.end() ? w->second : fresh.count(v->name) ? fresh.at(v->name) : Tensor();
      if (!t.defined()) DT_THROW(ValueError) << "the weights have no parameter " << v->name;
      if (t.dtype() != v->type.dtype || t.shape() != v->type.shape)
        DT_THROW(ValueError) << "weight " << v->name << " is " << dtype_name(t.dtype()) << shape_str(t.shape())
                             << ", the model expects " << ir::type_str(v->type);
      b[v->name] = t.clone();
    }
  }
  for (int r = 0; r < n; ++r)
    if (!programs[size_t(r)]) DT_THROW(ValueError) << "rank " << r << " has no pipeline stage";

  runtime::LaunchOptions lo;
  lo.comm = sharded.job.comm;
  lo.comm_arena = sharded.job.comm_arena;
  lo.update_params_in_place = true;
  const pipeline::StageProgram& last = pp.stages.back();
  TrainResult result;
  for (int s = 0; s < options.steps; ++s) {
    for (const ir::Value* v : forward.inputs()) {
      const Tensor batch = batch_for_step(*v, data.at(v->name), s);
      const int64_t rows = v->type.rank() > 0 ? v->type.shape[0] / m : 0;
      for (const pipeline::StageProgram& sp : pp.stages)
        if (std::find(sp.data.begin(), sp.data.end(), v->name) != sp.data.end())
          for (int k = 0; k < m; ++k)
            bind[size_t(sp.rank)][pipeline::microbatch_input(v->name, k)] =
                v->type.rank() > 0 ? batch.narrow(0, k * rows, rows) : batch;
    }
    std::vector<runtime::RankResult> res = runtime::launch(programs, bind, lo);
    const double loss = res[size_t(last.rank)].outputs[0].item();
    result.losses.push_back(loss);
    if (!std::isfinite(loss) && options.stop_on_non_finite) {
      result.non_finite_step = s + 1;  // the updates below are not applied
      break;
    }
    double ms = 0;
    for (const runtime::RankResult& rr : res) {
      ms = std::max(ms, rr.stats.seconds * 1e3);
      result.peak_bytes = std::max(result.peak_bytes, rr.stats.peak_bytes);
    }
    result.step_ms.push_back(ms);
    for (const pipeline::StageProgram& sp : pp.stages) {
      const std::vector<Tensor>& outs = res[size_t(sp.rank)].outputs;
      for (size_t k = 0; k < sp.step.updates.size(); ++k) bind[size_t(sp.rank)][sp.step.updates[k]] = outs[sp.first_update + k];
      if (s == 0 && options.keep_first_grads)
        for (size_t i = 0; i < sp.step.params.size(); ++i)
          result.first_grads[sp.step.params[i]] = outs[sp.step.grads_begin + i];
    }
    if (options.on_step) options.on_step(s + 1, loss, ms);
  }
  result.rank_state.resize(size_t(n));
  for (const pipeline::StageProgram& sp : pp.stages)
    for (const ir::Value* v : sp.step.graph.params()) {
      const Tensor& t = bind[size_t(sp.rank)].at(v->name);
      result.state[v->name] = result.rank_state[size_t(sp.rank)][v->name] = t;
      result.placements[v->name] = "stage " + std::to_string(sp.stage);
    }
  return result;
}

}  // namespace dt::job
