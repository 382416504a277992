// The terms of the fsdp memory goal of a training step (issue 15, `dtensor bench train`): a rank's
// peak under fsdp on n ranks against 1/n of the one-device parameter + gradient + optimizer-state
// bytes plus one layer's gathered parameters and its activations. Counted from the graphs alone
// (types, no tensors), so a compile-only test can check the goal.
#pragma once

#include <cstdint>

#include "dtensor/autodiff/train_step.h"
#include "dtensor/ir/example_models.h"

namespace dt::autodiff {

// Bytes of the forward results of `forward`'s training step that its backward or update reads
// (views count their own bytes). With `recompute` blocks, recomputed values are not saved: what the
// backward reads from the forward is the blocks' inputs and outputs and what lies outside blocks.
int64_t saved_activation_bytes(const ir::Graph& forward, const OptimizerConfig& opt,
                               Recompute recompute = Recompute::none);

struct FsdpMemoryTerms {
  int64_t params = 0, grads = 0, state = 0;  // one device, the whole model
  int64_t layer_params = 0;       // the last transformer block's parameters (h.<layers-1>.*)
  int64_t layer_activations = 0;  // its saved activations: with all layers minus with one fewer
  int64_t activations = 0;        // every layer's saved activations (the whole forward's)
  // The goal as the issue states it: (params + grads + state) / n + layer_params +
  // layer_activations / n (the activations of one layer, on 1/n of the batch).
  int64_t goal(int64_t n) const { return (params + grads + state) / n + layer_params + layer_activations / n; }
  // The same with every layer's saved activations: what sharding alone (no recomputation of
  // activations in the backward) can reach, since fsdp shards the batch, not the layers' saves.
  int64_t goal_keeping_activations(int64_t n) const {
    return (params + grads + state) / n + layer_params + activations / n;
  }
};

// The terms for the example gpt `cfg` (cfg.layers >= 1) trained with `opt`.
FsdpMemoryTerms fsdp_memory_terms(const ir::GptConfig& cfg, const OptimizerConfig& opt);

}  // namespace dt::autodiff
