// Gradient rules: how an op's operand gradients are computed from its result gradients, written
// as ordinary IR ops. Each op family registers its rules beside its kernels (OpDef::grad in
// ops_<family>.cc); dtensor/autodiff walks a graph backwards and calls them.
//
// A rule reads the node, the gradients of its results (grad(i), null when no gradient reaches
// result i) and records ops through the builder b(); it sets the gradient of each operand that
// wants one (wants(i): the operand depends on a parameter). A rule may skip operands that do not
// want a gradient; setting one anyway is harmless (it is dropped). Every gradient set must have its
// operand's type exactly (broadcast operands reduce with sum_to()).
#pragma once

#include <vector>

#include "dtensor/ir/builder.h"

namespace dt::ir {

class GradContext {
 public:
  GradContext(Builder& b, const Node& node, std::vector<Value*> result_grads, std::vector<bool> wants)
      : b_(b), node_(node), result_grads_(std::move(result_grads)), wants_(std::move(wants)),
        operand_grads_(node.operands.size(), nullptr) {}

  Builder& b() { return b_; }
  const Node& node() const { return node_; }
  Value* operand(int i) const { return node_.operands[size_t(i)]; }
  int num_operands() const { return int(node_.operands.size()); }
  Value* result(int i = 0) const { return node_.results[size_t(i)]; }
  // The gradient of result i (null when nothing that reaches the loss reads it).
  Value* grad(int i = 0) const { return result_grads_[size_t(i)]; }
  // The gradient of result i, or zeros of its type when no gradient reaches it (for rules whose
  // backward op needs every result's gradient).
  Value* grad_or_zeros(int i);
  bool wants(int i) const { return i < int(wants_.size()) && wants_[size_t(i)]; }
  // Sets operand i's gradient; InternalError when its type differs from the operand's.
  void set(int i, Value* g);
  const std::vector<Value*>& operand_grads() const { return operand_grads_; }

  // Helpers shared by the rules.
  // Sums g over the dims broadcasting added or stretched so that it has `shape` (numpy rules).
  Value* sum_to(Value* g, const Shape& shape);
  // Broadcasts g (of a shape broadcastable to `shape`) to `shape`.
  Value* expand_to(Value* g, const Shape& shape);
  // A tensor of `type` filled with `value`.
  Value* full(const TensorType& type, double value);
  Value* scale(Value* g, double factor);

 private:
  Builder& b_;
  const Node& node_;
  std::vector<Value*> result_grads_;
  std::vector<bool> wants_;
  std::vector<Value*> operand_grads_;
};

}  // namespace dt::ir
