#include "dtensor/job/train.h"

#include "dtensor/job/train_pipeline.h"

#include <cmath>

#include "dtensor/core/error.h"
#include "dtensor/layout/dtensor_spec.h"
#include "dtensor/ir/verifier.h"
#include "dtensor/redistribute/executor.h"
#include "dtensor/runtime/interpreter.h"
#include "dtensor/runtime/launcher.h"
#include "dtensor/sharding/compiler.h"
#include "dtensor/sharding/train_step_placement.h"
#include "dtensor/sharding/tensor_sharding.h"

namespace dt::job {

using runtime::Bindings;
using runtime::Interpreter;
using runtime::LaunchOptions;
using runtime::RankResult;
using runtime::RunStats;

Tensor batch_for_step(const ir::Value& v, const Tensor& data, int step) {
  const Shape& want = v.type.shape;
  if (data.dtype() != v.type.dtype)
    DT_THROW(ValueError) << "data " << v.name << " has dtype " << dtype_name(data.dtype()) << ", the model expects "
                         << ir::type_str(v.type);
  if (data.shape() == want) return data;
  if (data.dim() == int64_t(want.size()) + 1 && data.size(0) > 0 &&
      Shape(data.shape().begin() + 1, data.shape().end()) == want)
    return data.select(0, step % data.size(0));
  DT_THROW(ValueError) << "data " << v.name << " has shape " << shape_str(data.shape()) << ": expected "
                       << shape_str(want) << " (one batch) or [K, " << shape_str(want).substr(1)
                       << " (K batches, one per step)";
}

namespace {

// Returns the full bindings of the step's parameters and optimizer state (state absent from
// `weights` starts at zero), checking names, dtypes and shapes and that the data has every input.
Bindings initial_bindings(const autodiff::TrainStep& step, const std::map<std::string, Tensor>& weights,
                          const std::map<std::string, Tensor>& data, const TrainOptions& options) {
  Bindings bind;
  for (const std::string& p : step.params) {
    auto it = weights.find(p);
    if (it == weights.end()) DT_THROW(ValueError) << "the weights have no parameter " << p;
    bind[p] = it->second;
  }
  for (auto& [name, zero] : autodiff::fresh_state(step)) {
    auto it = weights.find(name);
    bind[name] = it != weights.end() ? it->second : zero;
  }
  // Params the step does not train (consts: buffers and folded constants, docs/ir.md) are bound as
  // given and never change.
  for (const ir::Value* v : step.graph.params())
    if (!bind.count(v->name)) {
      auto it = weights.find(v->name);
      if (it == weights.end()) DT_THROW(ValueError) << "the weights have no parameter " << v->name;
      bind[v->name] = it->second;
    }
  for (auto& [name, t] : weights)
    if (!bind.count(name) && step.graph.find(name) == nullptr)
      DT_THROW(ValueError) << "the weights hold " << name << ", which is neither a parameter of the model nor "
                           << options.optimizer.kind << " state (a checkpoint of another optimizer?)";
  for (const ir::Value* v : step.graph.params())
    if (bind.count(v->name)) {
      const Tensor& t = bind[v->name];
      if (t.dtype() != v->type.dtype || t.shape() != v->type.shape)
        DT_THROW(ValueError) << "weight " << v->name << " is " << dtype_name(t.dtype()) << shape_str(t.shape())
                             << ", the model expects " << ir::type_str(v->type);
    }
  // Batches are taken in step: inputs with different batch counts would pair batches that were
  // never meant to go together.
  const ir::Value* batched = nullptr;
  for (const ir::Value* v : step.graph.inputs()) {
    auto it = data.find(v->name);
    if (it == data.end()) DT_THROW(ValueError) << "the data has no tensor " << v->name << " (a data input of the model)";
    if (it->second.dim() != int64_t(v->type.shape.size()) + 1) continue;
    if (batched && data.at(batched->name).size(0) != it->second.size(0))
      DT_THROW(ValueError) << "the data has " << data.at(batched->name).size(0) << " batches of " << batched->name << " but "
                           << it->second.size(0) << " of " << v->name << ": every input needs the same number";
    batched = v;
  }
  return bind;
}

// The loop's own copies of parameter and state tensors, made once at load: the optimizer updates
// write in place (ops_optim.cc), and must change neither the caller's weights nor another rank's
// tensors (shard_weights may hand several ranks the same replicated tensor, or views of one).
Bindings owned_copies(const std::map<std::string, Tensor>& tensors) {
  Bindings out;
  for (const auto& [name, t] : tensors) out[name] = t.clone();
  return out;
}

autodiff::TrainStep make_step(ir::Graph forward, const TrainOptions& options) {
  if (options.steps < 1) DT_THROW(ValueError) << "steps must be >= 1, got " << options.steps;
  autodiff::TrainStep step = autodiff::make_train_step(std::move(forward), options.optimizer, options.keep_first_grads,
                                                               options.recompute);
  ir::verify(step.graph);
  return step;
}

// Under mpi, after the last step: every rank sends its shard of each parameter and state tensor
// to rank 0 (point to point, in name order), which keeps all ranks' shards and assembles the
// full tensors, as the threads backend's result holds them.
void gather_state_to_root(const autodiff::TrainStep& step, const sharding::CompiledModel& c, const DeviceMesh& mesh,
                          const Bindings& mine, ProcessGroup& world, TrainResult& result) {
  std::vector<std::string> names = step.params;
  names.insert(names.end(), step.state.begin(), step.state.end());
  const int n = world.size(), me = world.rank();
  if (me == 0) result.rank_state.assign(size_t(n), {});
  for (const std::string& name : names) {
    const ir::Value* v = step.graph.find(name);
    const Placements& placements = c.sharding.values[size_t(v->id)];
    if (me != 0) {
      const Tensor t = mine.at(name).contiguous();
      if (t.numel() > 0) world.send(t.raw_data(), size_t(t.numel()), t.dtype(), 0)->wait();
      continue;
    }
    std::vector<Tensor> locals;
    for (int r = 0; r < n; ++r) {
      Tensor t = mine.at(name).contiguous();
      if (r != 0) {
        t = Tensor::uninitialized(local_shape_at(mesh.shape(), placements, v->type.shape, *mesh.coordinate(r)),
                                  v->type.dtype);
        if (t.numel() > 0) world.recv(t.raw_data(), size_t(t.numel()), t.dtype(), r)->wait();
      }
      result.rank_state[size_t(r)][name] = t;
      locals.push_back(t);
    }
    result.state[name] = sharding::assemble_tensor(locals, mesh, placements, v->type.shape);
    result.placements[name] = sharding::placements_of(c.sharding, v);
  }
}

}  // namespace

TrainResult train_single_device(ir::Graph forward, const std::map<std::string, Tensor>& weights,
                                const std::map<std::string, Tensor>& data, const TrainOptions& options) {
  autodiff::TrainStep step = make_step(std::move(forward), options);
  const Bindings loaded = initial_bindings(step, weights, data, options);
  Bindings bind = owned_copies(loaded);
  Interpreter interp(step.graph);
  interp.set_update_params_in_place(true);  // our copies: the updates write into them
  TrainResult r;
  for (int s = 0; s < options.steps; ++s) {
    for (const ir::Value* v : step.graph.inputs()) bind[v->name] = batch_for_step(*v, data.at(v->name), s);
    RunStats stats;
    std::vector<Tensor> out = interp.run(bind, {}, &stats);
    const double loss = out[0].item();
    r.losses.push_back(loss);
    if (!std::isfinite(loss) && options.stop_on_non_finite) {
      r.non_finite_step = s + 1;  // bind still holds the state after the last good step
      break;
    }
    r.step_ms.push_back(stats.seconds * 1e3);
    r.peak_bytes = std::max(r.peak_bytes, stats.peak_bytes);
    if (s == 0 && options.keep_first_grads)
      for (size_t i = 0; i < step.params.size(); ++i) r.first_grads[step.params[i]] = out[step.grads_begin + i];
    for (size_t k = 0; k < step.updates.size(); ++k) bind[step.updates[k]] = out[k + 1];
    if (options.on_step) options.on_step(s + 1, loss, stats.seconds * 1e3);
  }
  for (const std::string& p : step.params) r.state[p] = bind[p];
  for (const std::string& p : step.state) r.state[p] = bind[p];
  for (const ir::Value* v : step.graph.params())  // consts too: a saved checkpoint runs as it is
    if (v->frozen) r.state[v->name] = bind[v->name];
  return r;
}

TrainResult train_sharded(ir::Graph forward, const std::map<std::string, Tensor>& weights,
                          const std::map<std::string, Tensor>& data, const TrainOptions& options,
                          const ShardedTrainOptions& sharded) {
  if (sharded.job.plan.pipeline) return train_pipeline(std::move(forward), weights, data, options, sharded);
  autodiff::TrainStep step = make_step(std::move(forward), options);
  const Bindings full = initial_bindings(step, weights, data, options);
  const Job job = Job::compile(step.graph, sharded.job,
                               [&step](sharding::ResolvedPlan& p) { sharding::place_like_params(step, p); });
  if (sharded.on_compiled) sharded.on_compiled(job);
  const sharding::CompiledModel& c = job.compiled();
  const DeviceMesh& mesh = job.mesh();
  const int n = int(mesh.size());
  const std::vector<const ir::Graph*> programs = job.programs_by_rank();
  std::vector<Bindings> bind;
  for (int r = 0; r < n; ++r) bind.push_back(owned_copies(sharding::shard_weights(step.graph, c.sharding, full, r)));
  auto assemble = [&](size_t k, const std::vector<RankResult>& res) {
    std::vector<Tensor> locals;
    for (int r = 0; r < n; ++r) locals.push_back(res[size_t(r)].outputs[k]);
    return job.assemble_output(k, locals);
  };
  TrainResult result;
  result.warnings = job.warnings();
  result.collectives = sharding::collective_stats(c.programs[0], c.ranks[0]).count;
  int64_t sent = 0;
  for (size_t i = 0; i < c.ranks.size(); ++i)
    sent = std::max(sent, sharding::collective_stats(c.programs[i], c.ranks[i]).total_bytes);
  LaunchOptions lo;
  lo.comm = sharded.job.comm;
  lo.comm_arena = sharded.job.comm_arena;
  lo.update_params_in_place = true;  // each rank's own copies (owned_copies)
  if (sharded.job.backend == runtime::Backend::mpi) {
    const Placements replicated(size_t(mesh.ndim()));
    DT_CHECK(c.sharding.outputs[0] == replicated) << "the loss output is not replicated";
    runtime::run_world(runtime::Backend::mpi, n, [&](ProcessGroup& world) {
      const int r = world.rank();
      Bindings& mine = bind[size_t(r)];
      result.root = r == 0;
      for (int s = 0; s < options.steps; ++s) {
        sharding::TensorMap batch;
        for (const ir::Value* v : step.graph.inputs()) batch[v->name] = batch_for_step(*v, data.at(v->name), s);
        for (auto& [k, t] : sharding::shard_inputs(step.graph, c.sharding, batch, r)) mine[k] = t;
        RankResult rr = runtime::run_rank(*programs[size_t(r)], mine, world, lo);
        const double loss = rr.outputs[0].item();  // replicated: every rank holds the loss
        result.losses.push_back(loss);
        if (!std::isfinite(loss) && options.stop_on_non_finite) {  // every rank stops at the same step
          result.non_finite_step = s + 1;
          break;
        }
        result.step_ms.push_back(rr.stats.seconds * 1e3);
        result.bytes_sent_per_step.push_back(sent);
        result.peak_bytes = std::max(result.peak_bytes, rr.stats.peak_bytes);
        for (size_t k = 0; k < step.updates.size(); ++k) mine[step.updates[k]] = rr.outputs[k + 1];
        // The gradient outputs are replicated (the plan places only the updates): rank 0's are whole.
        if (s == 0 && options.keep_first_grads && r == 0)
          for (size_t i = 0; i < step.params.size(); ++i) {
            DT_CHECK(c.sharding.outputs[step.grads_begin + i] == replicated) << "gradient output not replicated";
            result.first_grads[step.params[i]] = rr.outputs[step.grads_begin + i];
          }
        if (options.on_step && r == 0) options.on_step(s + 1, loss, rr.stats.seconds * 1e3);
      }
      if (sharded.gather_state) gather_state_to_root(step, c, mesh, mine, world, result);
    }, sharded.job.comm);
    return result;
  }
  for (int s = 0; s < options.steps; ++s) {
    sharding::TensorMap batch;
    for (const ir::Value* v : step.graph.inputs()) batch[v->name] = batch_for_step(*v, data.at(v->name), s);
    for (int r = 0; r < n; ++r)
      for (auto& [k, t] : sharding::shard_inputs(step.graph, c.sharding, batch, r)) bind[size_t(r)][k] = t;
    std::vector<RankResult> res = runtime::launch(programs, bind, lo);
    const double loss = assemble(0, res).item();
    if (!std::isfinite(loss) && options.stop_on_non_finite) {
      result.losses.push_back(loss);
      result.non_finite_step = s + 1;  // bind still holds the shards after the last good step
      break;
    }
    double ms = 0;
    size_t peak = 0;
    for (const RankResult& rr : res) {
      ms = std::max(ms, rr.stats.seconds * 1e3);
      peak = std::max(peak, rr.stats.peak_bytes);
    }
    result.losses.push_back(loss);
    result.step_ms.push_back(ms);
    result.bytes_sent_per_step.push_back(sent);
    result.peak_bytes = std::max(result.peak_bytes, peak);
    if (s == 0 && options.keep_first_grads)
      for (size_t i = 0; i < step.params.size(); ++i) result.first_grads[step.params[i]] = assemble(step.grads_begin + i, res);
    for (int r = 0; r < n; ++r)
      for (size_t k = 0; k < step.updates.size(); ++k) bind[size_t(r)][step.updates[k]] = res[size_t(r)].outputs[k + 1];
    if (options.on_step) options.on_step(s + 1, loss, ms);
  }
  // The trained values: each rank's shards, and the full tensors assembled from them.
  std::vector<std::string> names = step.params;
  names.insert(names.end(), step.state.begin(), step.state.end());
  for (const ir::Value* v : step.graph.params())  // consts too: a saved checkpoint runs as it is
    if (v->frozen) names.push_back(v->name);
  result.rank_state.resize(size_t(n));
  for (const std::string& name : names) {
    const ir::Value* v = step.graph.find(name);
    std::vector<Tensor> locals;
    for (int r = 0; r < n; ++r) {
      locals.push_back(bind[size_t(r)].at(name));
      result.rank_state[size_t(r)][name] = locals.back();
    }
    result.state[name] = sharding::assemble_tensor(locals, mesh, c.sharding.values[size_t(v->id)], v->type.shape);
    result.placements[name] = sharding::placements_of(c.sharding, v);
  }
  return result;
}

}  // namespace dt::job
