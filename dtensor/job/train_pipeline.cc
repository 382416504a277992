#include "dtensor/job/train_pipeline.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>

#include "dtensor/core/error.h"
#include "dtensor/ir/verifier.h"
#include "dtensor/passes/p2p_order.h"
#include "dtensor/runtime/launcher.h"
#include "dtensor/sharding/tensor_sharding.h"

namespace dt::job {

using runtime::Bindings;

namespace {

// The plan within one stage: the pipeline dim and section dropped, only the inputs the stage reads.
sharding::ParallelPlan stage_plan(const sharding::ParallelPlan& plan, const ir::Graph& stage) {
  const std::string& pp = plan.pipeline->mesh_dim;
  sharding::ParallelPlan sub = plan;
  sub.pipeline.reset();
  sub.mesh_dims.erase(std::find(sub.mesh_dims.begin(), sub.mesh_dims.end(), pp));
  if (sub.mesh_dims.empty()) sub.mesh_dims = {"stage"};  // a one-rank sub-mesh
  sub.modules.clear();
  for (const sharding::ModuleStyle& ms : plan.modules) {
    if (ms.mesh_dim == pp)
      DT_THROW(ValueError) << plan.source << ": plan pattern '" << ms.pattern << "' names the pipeline's mesh dim '" << pp
                           << "': stages split the model on it, styles apply within a stage";
    // A pattern applies to the stages holding modules it matches (h.*.attn.q_proj: every stage).
    for (const ir::Value* p : stage.params())
      if (fnmatch(ms.pattern.c_str(), sharding::module_of(p->name).c_str(), 0) == 0) {
        sub.modules.push_back(ms);
        break;
      }
  }
  sub.inputs.clear();
  for (auto [name, by_dim] : plan.inputs) {
    const ir::Value* v = stage.find(name);
    if (!v || v->kind != ir::ValueKind::input) continue;
    by_dim.erase(pp);
    sub.inputs[name] = by_dim;
  }
  sub.outputs.clear();  // a stage's outputs are placed by compile_pipeline
  return sub;
}

}  // namespace

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
  const int p = int(mesh.size(pp_dim));
  pipeline::check_schedule(pipeline::parse_schedule(pp.schedule), p, pp.microbatches, pp.virtual_stages);
  PipelinePrograms out;
  out.split = pipeline::split_stages(forward, pp, p);
  out.graphs = pipeline::build_stages(forward, out.split, options.training);
  // The mesh dims whose plan shards a data input on dim 0 carry the batch through every stage.
  std::vector<bool> batch_dim(size_t(mesh.ndim()), false);
  for (const auto& [name, by_dim] : plan.inputs)
    for (const auto& [dim, pl] : by_dim)
      for (size_t m = 0; m < plan.mesh_dims.size(); ++m)
        if (plan.mesh_dims[m] == dim && int64_t(m) != pp_dim && pl.is_shard(0)) batch_dim[m] = true;
  Shape sub_shape;
  for (int64_t m = 0; m < mesh.ndim(); ++m)
    if (m != pp_dim) sub_shape.push_back(mesh.size(m));
  if (sub_shape.empty()) sub_shape = {1};
  std::vector<std::vector<pipeline::StageWork>> work;
  std::vector<std::vector<int>> ranks;
  for (int s = 0; s < out.split.stages; ++s) {
    const pipeline::StageGraph& sg = out.graphs[size_t(s)];
    std::vector<int> members;
    for (int r : mesh.ranks())
      if ((*mesh.coordinate(r))[size_t(pp_dim)] == s % p) members.push_back(r);  // stage s runs on rank s mod p
    out.meshes.emplace_back(sub_shape, members);
    const sharding::ParallelPlan sub = stage_plan(plan, sg.graph);
    sharding::CompileOptions co;
    co.adjust_plan = [&](sharding::ResolvedPlan& r) {
      Placements carried;  // of the values crossing stages
      for (int64_t m = 0; m < mesh.ndim(); ++m)
        if (m != pp_dim) carried.push_back(batch_dim[size_t(m)] ? Placement::shard(0) : Placement::replicate());
      if (carried.empty()) carried.push_back(Placement::replicate());
      auto carry = [&](const ir::Value* v) { return v->type.rank() > 0 ? carried : Placements(carried.size()); };
      for (const auto* list : {&sg.inputs_from_prev, &sg.grads_from_next})
        for (const ir::Value* v : *list) r.value_placements[size_t(v->id)] = carry(v);
      const auto& outs = sg.graph.outputs();
      const size_t crossing = sg.outputs_to_next.size() + sg.grads_to_prev.size();
      for (size_t i = 0; i < crossing; ++i) r.output_placements[i] = carry(outs[i]);
      for (size_t i = 0; i < sg.param_grads.size(); ++i)  // training: a gradient sits like its parameter
        r.output_placements[crossing + i] = r.value_placements[size_t(sg.params[i]->id)];
      r.gradient_of.assign(sg.graph.num_values(), -1);
      for (const auto& [v, gv] : sg.gradient_pairs)
        if (r.gradient_of[size_t(gv)] < 0) r.gradient_of[size_t(gv)] = int(v);
    };
    out.compiled.push_back(sharding::compile(sg.graph, sub, out.meshes.back(), co));
    std::vector<pipeline::StageWork> places;
    for (const ir::Graph& program : out.compiled.back().programs)
      places.push_back(pipeline::stage_work(sg, program, options.training));
    work.push_back(std::move(places));
    ranks.push_back(out.compiled.back().ranks);
  }
  for (const sharding::ModuleStyle& ms : plan.modules) {
    bool used = false;
    for (const ir::Value* p : forward.params())
      used = used || fnmatch(ms.pattern.c_str(), sharding::module_of(p->name).c_str(), 0) == 0;
    if (!used) DT_THROW(ValueError) << plan.source << ": plan pattern '" << ms.pattern << "' matches no module of " << forward.name();
  }
  pipeline::ProgramOptions po = options;
  po.schedule = pipeline::parse_schedule(pp.schedule);
  po.virtual_stages = pp.virtual_stages;
  out.programs = pipeline::stage_programs(work, ranks, out.split.microbatches, po);
  std::vector<const ir::Graph*> programs;
  std::vector<int> program_ranks;
  for (const pipeline::StageProgram& sp : out.programs) {
    ir::verify(sp.step.graph);
    programs.push_back(&sp.step.graph);
    program_ranks.push_back(sp.rank);
  }
  passes::check_p2p_order(programs, program_ranks, "in the pipeline's stage programs");
  return out;
}

int PipelinePrograms::stage_holding(const pipeline::StageProgram& sp, const std::string& name) const {
  for (int x : sp.stages)
    if (graphs[size_t(x)].graph.find(name)) return x;
  return -1;
}

const Placements& PipelinePrograms::placements_of(const pipeline::StageProgram& sp, const std::string& name) const {
  const int x = stage_holding(sp, name);
  DT_CHECK(x >= 0) << name << " is not a value of pipeline rank " << sp.stage << "'s stages";
  return compiled[size_t(x)].sharding.values[size_t(graphs[size_t(x)].graph.find(name)->id)];
}

std::vector<const ir::Graph*> PipelinePrograms::programs_by_rank(int n) const {
  std::vector<const ir::Graph*> out(static_cast<size_t>(n), nullptr);
  for (const pipeline::StageProgram& sp : programs) out[size_t(sp.rank)] = &sp.step.graph;
  for (int r = 0; r < n; ++r)
    if (!out[size_t(r)]) DT_THROW(ValueError) << "rank " << r << " has no pipeline stage";
  return out;
}

std::vector<Bindings> bind_stage_params(const PipelinePrograms& pp, const ir::Graph& forward,
                                        const std::map<std::string, Tensor>& weights) {
  int n = 0;
  for (const pipeline::StageProgram& sp : pp.programs) n = std::max(n, sp.rank + 1);
  std::vector<Bindings> bind(static_cast<size_t>(n));
  for (const pipeline::StageProgram& sp : pp.programs) {
    Bindings& b = bind[size_t(sp.rank)];
    const std::map<std::string, Tensor> fresh = autodiff::fresh_state(sp.step);
    for (const ir::Value* v : sp.step.graph.params()) {
      if (fresh.count(v->name)) {
        b[v->name] = fresh.at(v->name);
        continue;
      }
      auto w = weights.find(v->name);
      if (w == weights.end()) DT_THROW(ValueError) << "the weights have no parameter " << v->name;
      const ir::Value* full = forward.find(v->name);
      if (w->second.dtype() != full->type.dtype || w->second.shape() != full->type.shape)
        DT_THROW(ValueError) << "weight " << v->name << " is " << dtype_name(w->second.dtype())
                             << shape_str(w->second.shape()) << ", the model expects " << ir::type_str(full->type);
      b[v->name] = sharding::shard_tensor(w->second, pp.meshes[size_t(sp.stage)], pp.placements_of(sp, v->name), sp.rank)
                       .clone();
    }
    if (!sp.seed.empty()) b[sp.seed] = Tensor::full({}, 1.0);
  }
  return bind;
}

void bind_microbatches(const PipelinePrograms& pp, const ir::Graph& forward, const std::map<std::string, Tensor>& batch,
                       std::vector<Bindings>& bind) {
  const int m = pp.split.microbatches;
  for (const ir::Value* v : forward.inputs()) {
    auto it = batch.find(v->name);
    if (it == batch.end()) DT_THROW(ValueError) << "the data has no tensor " << v->name << " (a data input of the model)";
    const int64_t rows = v->type.rank() > 0 ? v->type.shape[0] / m : 0;
    for (const pipeline::StageProgram& sp : pp.programs)
      if (std::find(sp.data.begin(), sp.data.end(), v->name) != sp.data.end())
        for (int k = 0; k < m; ++k) {
          const Tensor micro = v->type.rank() > 0 ? it->second.narrow(0, k * rows, rows) : it->second;
          bind[size_t(sp.rank)][pipeline::microbatch_input(v->name, k)] =
              sharding::shard_tensor(micro, pp.meshes[size_t(sp.stage)], pp.placements_of(sp, v->name), sp.rank);
        }
  }
}

RunResult run_pipeline(const PipelinePrograms& pp, const ir::Graph& forward, const std::map<std::string, Tensor>& weights,
                       const TensorMap& inputs, const JobOptions& job) {
  if (job.backend != runtime::Backend::threads)
    DT_THROW(ValueError) << "a pipeline runs on the threads backend so far";
  const int n = int(job.mesh.size());
  std::vector<Bindings> bind = bind_stage_params(pp, forward, weights);
  bind_microbatches(pp, forward, std::map<std::string, Tensor>(inputs.begin(), inputs.end()), bind);
  runtime::LaunchOptions lo;
  lo.comm = job.comm;
  lo.comm_arena = job.comm_arena;
  const std::vector<runtime::RankResult> res = runtime::launch(pp.programs_by_rank(n), bind, lo);
  RunResult out;
  for (const pipeline::StageProgram& sp : pp.programs)
    if (sp.stages.back() == pp.split.stages - 1 && out.outputs.empty()) out.outputs = res[size_t(sp.rank)].outputs;
  for (int r = 0; r < n; ++r)
    out.ranks.push_back({r, res[size_t(r)].stats.seconds * 1e3, res[size_t(r)].stats.peak_bytes, 0, 0, 0});
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
  const int n = int(sharded.job.mesh.size());
  for (const ir::Value* v : forward.inputs())
    if (!data.count(v->name)) DT_THROW(ValueError) << "the data has no tensor " << v->name << " (a data input of the model)";

  std::vector<Bindings> bind = bind_stage_params(pp, forward, weights);
  std::vector<const ir::Graph*> programs = pp.programs_by_rank(n);
  runtime::LaunchOptions lo;
  lo.comm = sharded.job.comm;
  lo.comm_arena = sharded.job.comm_arena;
  lo.update_params_in_place = true;
  const int last = pp.split.stages - 1;
  int loss_rank = -1;
  for (const pipeline::StageProgram& sp : pp.programs)
    if (sp.stages.back() == last && loss_rank < 0) loss_rank = sp.rank;
  TrainResult result;
  std::map<std::string, std::vector<Tensor>> grad_locals;  // by global rank
  for (int s = 0; s < options.steps; ++s) {
    std::map<std::string, Tensor> batch;
    for (const ir::Value* v : forward.inputs()) batch[v->name] = batch_for_step(*v, data.at(v->name), s);
    bind_microbatches(pp, forward, batch, bind);
    std::vector<runtime::RankResult> res = runtime::launch(programs, bind, lo);
    const double loss = res[size_t(loss_rank)].outputs[0].item();
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
    for (const pipeline::StageProgram& sp : pp.programs) {
      const std::vector<Tensor>& outs = res[size_t(sp.rank)].outputs;
      for (size_t k = 0; k < sp.step.updates.size(); ++k) bind[size_t(sp.rank)][sp.step.updates[k]] = outs[sp.first_update + k];
      if (s == 0 && options.keep_first_grads)
        for (size_t i = 0; i < sp.step.params.size(); ++i) {
          auto& locals = grad_locals[sp.step.params[i]];
          locals.resize(size_t(n));
          locals[size_t(sp.rank)] = outs[sp.step.grads_begin + i];
        }
    }
    if (options.on_step) options.on_step(s + 1, loss, ms);
  }
  // The trained values: each rank's shards and the full tensors assembled from each stage's.
  result.rank_state.resize(size_t(n));
  std::map<std::string, std::vector<Tensor>> locals;
  std::map<std::string, const pipeline::StageProgram*> owner;
  for (const pipeline::StageProgram& sp : pp.programs)
    for (const ir::Value* v : sp.step.graph.params()) {
      const Tensor& t = bind[size_t(sp.rank)].at(v->name);
      result.rank_state[size_t(sp.rank)][v->name] = t;
      locals[v->name].resize(size_t(n));
      locals[v->name][size_t(sp.rank)] = t;
      owner[v->name] = &sp;
    }
  auto assemble = [&](const std::string& name, const std::vector<Tensor>& shards) {
    const pipeline::StageProgram& sp = *owner.at(name);
    // State tensors sit like their parameter (adamw's scalar step: replicated).
    const std::string param = pp.stage_holding(sp, name) >= 0 ? name : name.substr(0, name.rfind('.'));
    const ir::Value* v = sp.step.graph.find(name);
    Shape shape = forward.find(param)->type.shape;
    Placements placements = pp.placements_of(sp, param);
    if (v->type.rank() == 0) {
      shape = {};
      placements = Placements(placements.size());
    }
    result.placements[name] = placements_str(placements) + " on stage " + std::to_string(pp.stage_holding(sp, param));
    return sharding::assemble_tensor(shards, pp.meshes[size_t(sp.stage)], placements, shape);
  };
  for (const auto& [name, shards] : locals) result.state[name] = assemble(name, shards);
  for (const auto& [name, shards] : grad_locals) result.first_grads[name] = assemble(name, shards);
  return result;
}

}  // namespace dt::job
