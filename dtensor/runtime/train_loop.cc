#include "dtensor/runtime/train_loop.h"

#include <chrono>

#include "dtensor/core/error.h"
#include "dtensor/ir/verifier.h"
#include "dtensor/runtime/interpreter.h"

namespace dt::runtime {

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

TrainResult train_single_device(ir::Graph forward, const std::map<std::string, Tensor>& weights,
                                const std::map<std::string, Tensor>& data, const TrainOptions& options) {
  if (options.steps < 1) DT_THROW(ValueError) << "steps must be >= 1, got " << options.steps;
  autodiff::TrainStep step = autodiff::make_train_step(std::move(forward), options.optimizer, options.keep_first_grads);
  ir::verify(step.graph);
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
  for (const ir::Value* v : step.graph.inputs())
    if (!data.count(v->name)) DT_THROW(ValueError) << "the data has no tensor " << v->name << " (a data input of the model)";

  Interpreter interp(step.graph);
  TrainResult r;
  for (int s = 0; s < options.steps; ++s) {
    for (const ir::Value* v : step.graph.inputs()) bind[v->name] = batch_for_step(*v, data.at(v->name), s);
    RunStats stats;
    std::vector<Tensor> out = interp.run(bind, {}, &stats);
    const double loss = out[0].item();
    r.losses.push_back(loss);
    r.step_ms.push_back(stats.seconds * 1e3);
    r.peak_bytes = std::max(r.peak_bytes, stats.peak_bytes);
    if (s == 0 && options.keep_first_grads)
      for (size_t i = 0; i < step.params.size(); ++i) r.first_grads[step.params[i]] = out[step.grads_begin + i];
    for (size_t k = 0; k < step.updates.size(); ++k) bind[step.updates[k]] = out[k + 1];
    if (options.on_step) options.on_step(s + 1, loss, stats.seconds * 1e3);
  }
  for (const std::string& p : step.params) r.state[p] = bind[p];
  for (const std::string& p : step.state) r.state[p] = bind[p];
  return r;
}

}  // namespace dt::runtime
