// Reverse-mode autodiff as a graph transform: from a forward graph with a scalar loss, append the
// ops computing the gradient of the loss with respect to chosen values (usually every parameter).
//
// The backward is ordinary IR: each op's gradient rule (OpDef::grad, registered with its family,
// ir/grad_rule.h) records ops through the builder, so the result prints, parses, verifies and
// shards like any graph. Gradients of a value read several times are summed (add, in the order the
// readers appear, last reader first). Only nodes on a path from a wanted value to the loss get a
// backward. The forward values the backward reads stay alive until their last backward reader;
// the interpreter's liveness frees everything else at its last use.
//
//   loss = mse_loss(linear(x, w), t)   ->   ... ; %g0 = full() {value = 1.0}
//                                             %g1 = mse_loss_backward(%g0, %y, t)
//                                             %g2 = reshape(%g1) ...; grad.w = matmul(transpose(%g2), %x2)
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dtensor/ir/graph.h"

namespace dt::autodiff {

// Appends the backward of `loss` (a scalar floating value of `g`) to `g` and returns the
// gradient of each value of `wrt` (same order; null when the loss does not depend on it). Every
// returned gradient is named "grad.<name of the value>". Throws ValueError when the loss is not a
// scalar or a gradient must flow through an op without a gradient rule (naming the op and node).
//
// When `pairs` is given, it receives (forward value, its whole gradient) for every value whose
// gradient the backward reads: each result of a node whose backward runs (the gradient summed over
// all its readers, as that backward reads it) and each value of `wrt`. One gradient value can
// belong to several forward values (a gradient rule passing its gradient through, as add's); the
// pair closest to the loss comes first. Sharding uses the pairs to lay each gradient out as the
// backward rule of a redistribution derives from its forward value (sharding/train_step_placement.h).
std::vector<ir::Value*> append_gradients(ir::Graph& g, ir::Value* loss, const std::vector<ir::Value*>& wrt,
                                         std::vector<std::pair<ir::Value*, ir::Value*>>* pairs = nullptr);

// Returns the graph output that is the loss: the output named "loss" when there are several, else
// the only output; ValueError when there is none or it is not a floating scalar.
ir::Value* find_loss(const ir::Graph& g);

}  // namespace dt::autodiff
