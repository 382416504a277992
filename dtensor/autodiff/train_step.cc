#include "dtensor/autodiff/train_step.h"

#include <fmt/format.h>

#include <optional>
#include <unordered_map>

#include "dtensor/autodiff/autodiff.h"
#include "dtensor/core/error.h"
#include "dtensor/ir/builder.h"

namespace dt::autodiff {

using ir::Value;

void validate(const OptimizerConfig& opt) {
  if (opt.kind != "sgd" && opt.kind != "adamw")
    DT_THROW(ValueError) << "optimizer must be sgd or adamw, got \"" << opt.kind << "\"";
  auto check = [](const char* name, double v, double lo, bool lo_open, double hi, bool hi_open = false) {
    if (!(v >= lo) || (lo_open && v == lo) || !(v <= hi) || (hi_open && v == hi))
      DT_THROW(ValueError) << name << " must be in " << (lo_open ? "(" : "[") << lo << ", " << hi << (hi_open ? ")" : "]")
                           << ", got " << fmt::format("{}", v);
  };
  check("lr", opt.lr, 0, false, 1e6);
  check("momentum", opt.momentum, 0, false, 1);
  check("weight decay", opt.weight_decay, 0, false, 1e6);
  check("beta1", opt.beta1, 0, false, 1, /*hi_open=*/true);  // 1 would divide by 1 - beta^t = 0
  check("beta2", opt.beta2, 0, false, 1, /*hi_open=*/true);
  check("eps", opt.eps, 0, true, 1);
  if (opt.kind == "adamw" && opt.momentum != 0) DT_THROW(ValueError) << "--momentum applies to sgd only";
}

namespace {

// Moves each optimizer update to just after the later of its gradient's producer and the last
// other reader of a tensor it writes (its parameter and state: the update is in place, so every
// read of the old value must come first). The gradient is then freed at once instead of living
// until the end of the step (under fsdp, a rank's reduce_scattered gradient shards).
void place_updates_early(ir::Graph& g) {
  const auto& nodes = g.nodes();
  std::unordered_map<const ir::Node*, size_t> pos;
  for (size_t i = 0; i < nodes.size(); ++i) pos.emplace(nodes[i], i);
  std::unordered_map<const Value*, size_t> last_read;  // parameter -> last reader's position
  std::vector<bool> is_update(nodes.size(), false);
  for (size_t i = 0; i < nodes.size(); ++i) {
    is_update[i] = ir::op_def(nodes[i]->op).optimizer_update;
    if (is_update[i]) continue;
    for (const Value* v : nodes[i]->operands)
      if (v->kind == ir::ValueKind::param) last_read[v] = i;
  }
  std::vector<std::vector<ir::Node*>> after(nodes.size());
  std::vector<ir::Node*> first;  // updates that need nothing placed before them
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!is_update[i]) continue;
    std::optional<size_t> anchor;
    for (const Value* v : nodes[i]->operands) {
      std::optional<size_t> at;
      if (v->producer) at = pos.at(v->producer);
      else if (auto it = last_read.find(v); it != last_read.end()) at = it->second;
      if (at && (!anchor || *at > *anchor)) anchor = at;
    }
    (anchor ? after[*anchor] : first).push_back(nodes[i]);
  }
  std::vector<ir::Node*> order(first);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (is_update[i]) continue;
    order.push_back(nodes[i]);
    order.insert(order.end(), after[i].begin(), after[i].end());
  }
  g.set_node_order(order);
}

}  // namespace

std::vector<Value*> append_optimizer_updates(ir::Graph& g, const std::vector<Value*>& params,
                                             const std::vector<Value*>& grads, const OptimizerConfig& opt,
                                             TrainStep& step) {
  ir::Builder b(g);
  std::vector<Value*> outputs;
  std::vector<Value*> state_outputs;
  std::vector<std::string> state_names;
  auto add_state = [&](const Value* p, const std::string& suffix, ir::TensorType type) {
    const std::string name = p->name + "." + suffix;
    step.state.push_back(name);
    return g.add_param(name, std::move(type));
  };
  for (size_t i = 0; i < params.size(); ++i) {
    Value* p = params[i];
    step.params.push_back(p->name);
    std::vector<Value*> res;
    if (opt.kind == "sgd") {
      std::vector<Value*> operands = {p, grads[i]};
      if (opt.momentum != 0) operands.push_back(add_state(p, "momentum_buffer", p->type));
      res = b.record(ir::OpKind::sgd_update, operands,
                     {{"lr", opt.lr}, {"momentum", opt.momentum}, {"weight_decay", opt.weight_decay}});
    } else {
      Value* m = add_state(p, "exp_avg", p->type);
      Value* v = add_state(p, "exp_avg_sq", p->type);
      Value* t = add_state(p, "step", {DType::f32, {}});
      res = b.record(ir::OpKind::adamw_update, {p, grads[i], m, v, t},
                     {{"lr", opt.lr}, {"beta1", opt.beta1}, {"beta2", opt.beta2}, {"eps", opt.eps},
                      {"weight_decay", opt.weight_decay}});
    }
    outputs.push_back(res[0]);
    step.updates.push_back(p->name);
    for (size_t k = 1; k < res.size(); ++k) {
      state_outputs.push_back(res[k]);
      state_names.push_back(step.state[step.state.size() - (res.size() - 1) + (k - 1)]);
    }
  }
  for (size_t k = 0; k < state_outputs.size(); ++k) {
    outputs.push_back(state_outputs[k]);
    step.updates.push_back(state_names[k]);
  }
  return outputs;
}

TrainStep make_train_step(ir::Graph forward, const OptimizerConfig& opt, bool with_grads, Recompute recompute) {
  validate(opt);
  TrainStep step{std::move(forward), {}, 0, {}, {}, {}};
  ir::Graph& g = step.graph;
  Value* loss = find_loss(g);
  std::vector<Value*> params;
  for (Value* p : g.params())
    if (is_floating(p->type.dtype) && !p->frozen) params.push_back(p);  // consts are never trained
  if (params.empty()) DT_THROW(ValueError) << "model " << g.name() << " has no floating parameters to train";
  const size_t forward_nodes = g.nodes().size();
  std::vector<std::pair<Value*, Value*>> pairs;
  std::vector<Value*> grads = append_gradients(g, loss, params, &pairs);
  for (const auto& [v, gv] : pairs) step.gradient_pairs.emplace_back(v->id, gv->id);
  for (size_t i = 0; i < params.size(); ++i)
    if (!grads[i])
      DT_THROW(ValueError) << "the loss " << loss->name << " does not depend on parameter " << params[i]->name
                           << ": nothing would train it (remove it from the model)";

  std::vector<Value*> outputs = {loss};
  std::vector<Value*> updated = append_optimizer_updates(g, params, grads, opt, step);
  outputs.insert(outputs.end(), updated.begin(), updated.end());
  // After the updates, which read parameters and gradients only: no update reads an activation.
  if (recompute == Recompute::blocks) recompute_blocks(g, forward_nodes);
  place_updates_early(g);
  step.grads_begin = outputs.size();
  if (with_grads) outputs.insert(outputs.end(), grads.begin(), grads.end());
  g.set_outputs(std::move(outputs));
  return step;
}

std::map<std::string, Tensor> fresh_state(const TrainStep& step) {
  std::map<std::string, Tensor> out;
  for (const std::string& name : step.state) {
    const Value* v = step.graph.find(name);
    DT_CHECK(v) << "state " << name << " missing from the step graph";
    out[name] = Tensor::zeros(v->type.shape, v->type.dtype);
  }
  return out;
}

}  // namespace dt::autodiff
