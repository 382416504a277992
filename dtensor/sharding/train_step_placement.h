// Compiling a training step (autodiff/train_step.h) with a parallel plan: the plan names
// parameters; the step graph adds optimizer state and updated outputs, which must sit exactly where
// their parameter sits so that step t's outputs are step t+1's inputs on every rank.
#pragma once

#include "dtensor/autodiff/train_step.h"
#include "dtensor/sharding/compiler.h"

namespace dt::sharding {

// Gives each state tensor of `step` its parameter's placements (and fsdp / pinned bits) and each
// updated parameter or state output the placements of the binding it replaces. A scalar state
// tensor (adamw's step) stays replicated. Records which forward value each gradient belongs to
// (ResolvedPlan::gradient_of), so that propagation gives gradients the placements the backward
// rule of a redistribution derives: Megatron's communication (tp: one all_reduce of the activation
// gradient before each layer norm's backward; fsdp: one reduce_scatter per parameter gradient).
void place_like_params(const autodiff::TrainStep& step, ResolvedPlan& plan);

// compile() of the step graph with place_like_params applied to the resolved plan.
CompiledModel compile_train_step(const autodiff::TrainStep& step, const ParallelPlan& plan, const DeviceMesh& mesh,
                                 CompileOptions options = {});

}  // namespace dt::sharding
