// The example models of ../shared/reference/README.md, built with the Builder: the same
// architecture and parameter names (the weight-file keys) as the PyTorch reference modules.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "dtensor/core/tensor.h"
#include "dtensor/ir/graph.h"

namespace dt::ir {

// mlp: input [batch, hidden]; per block i: x = x + fc2(relu(fc1(ln(x)))), fc1: hidden -> 4*hidden.
// Parameters layers.{i}.ln.{weight,bias}, layers.{i}.fc1.{weight,bias}, layers.{i}.fc2.{weight,bias}.
struct MlpConfig {
  int64_t hidden = 64;
  int64_t layers = 2;
  int64_t batch = 8;
  bool loss = false;  // add data input `target` [batch, hidden] and output 1 = mse_loss(output, target)
};
Graph build_mlp(const MlpConfig& config);

// gpt: input token ids [batch, seq] (i64); x = wte(ids) + wpe(arange(seq)); per block
// x = x + attn(ln_1(x)); x = x + fc_out(gelu_tanh(fc_in(ln_2(x)))); logits = lm_head(ln_f(x))
// [batch, seq, vocab] (lm_head has no bias). Attention is causal with `heads` heads of
// hidden/heads dims (q, k, v, o projections with bias).
struct GptConfig {
  int64_t vocab = 512;
  int64_t hidden = 128;
  int64_t heads = 4;
  int64_t layers = 2;
  int64_t max_seq = 64;
  int64_t batch = 2;
  int64_t seq = 32;
  bool loss = false;  // add data input `target` [batch, seq] (i64) and output 1 = cross_entropy
  // Parameters' (and so activations') dtype: f32 or bf16 (a storage dtype: kernels compute in f32).
  DType dtype = DType::f32;
};
Graph build_gpt(const GptConfig& config);

// Returns seeded random values for every parameter of `graph`, by name: 2-d weights uniform in
// ±1/sqrt(fan_in) (torch.nn.Linear's range; embeddings too), 1-d `*.weight` 1 ± 0.1 (norm
// scales), other 1-d params uniform ±0.1.
std::map<std::string, Tensor> random_weights(const Graph& graph, uint64_t seed);

}  // namespace dt::ir
