// A whole training step as one graph: the forward, its backward (autodiff.h) and one optimizer
// update per parameter, with the optimizer state as explicit parameters of the graph.
//
// State tensors are named after their parameter as in torch.optim's state dict:
//   SGD with momentum: <param>.momentum_buffer
//   AdamW:             <param>.exp_avg, <param>.exp_avg_sq, <param>.step (a scalar f32)
// They start at zero (fresh_state()), which gives torch's first step exactly. The updates write
// in place (ir/ops/optim.cc); each is placed just after its gradient and the last other reader of
// its parameter and state, so gradients are freed as soon as they are used. The step graph's
// outputs are the loss, then the updated parameters and state tensors (`updates` says which
// binding each replaces), then, when asked, the gradients.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/autodiff/recompute.h"
#include "dtensor/core/tensor.h"
#include "dtensor/ir/graph.h"

namespace dt::autodiff {

struct OptimizerConfig {
  std::string kind = "sgd";  // sgd | adamw
  double lr = 0.1;
  double momentum = 0;
  double weight_decay = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adamw
};

// Checks the configuration (ValueError naming the bad field).
void validate(const OptimizerConfig& opt);

struct TrainStep {
  ir::Graph graph;
  // Output k + 1 of the graph replaces the binding named updates[k] for the next step.
  std::vector<std::string> updates;
  // Outputs grads_begin .. grads_begin + params.size() - 1 are the gradients of the parameters, in
  // graph.params() order of the forward (when with_grads).
  size_t grads_begin = 0;
  std::vector<std::string> params;  // the forward's parameters (the trained ones)
  std::vector<std::string> state;   // the optimizer state tensors the graph added as parameters
  // (forward value id, id of its gradient) for every gradient the backward reads
  // (append_gradients' pairs), closest to the loss first.
  std::vector<std::pair<int64_t, int64_t>> gradient_pairs;
};

// Builds the step graph from a forward graph (consumed) whose loss find_loss() identifies. Every
// floating parameter that is not a const (Value::frozen: buffers, folded constants) is trained; a parameter the loss does not depend on is an error (it would
// never change: PyTorch leaves its .grad None; we refuse rather than train silently around it).
// `recompute` blocks: the backward recomputes each block's activations from its input
// (recompute.h) instead of keeping them from the forward.
TrainStep make_train_step(ir::Graph forward, const OptimizerConfig& opt, bool with_grads = false,
                          Recompute recompute = Recompute::none);

// Appends one optimizer update per parameter to `g` (params[i] reading grads[i]), adding the
// state tensors it needs as parameters; appends to step.params, step.state and step.updates and
// returns the updated values in step.updates' order (parameters, then state).
std::vector<ir::Value*> append_optimizer_updates(ir::Graph& g, const std::vector<ir::Value*>& params,
                                                 const std::vector<ir::Value*>& grads, const OptimizerConfig& opt,
                                                 TrainStep& step);

// Zero-filled state tensors for every name of step.state (types from the step graph).
std::map<std::string, Tensor> fresh_state(const TrainStep& step);

}  // namespace dt::autodiff
