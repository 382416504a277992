// Recognises the decomposed forms exporters write for two ops the IR has whole, so that parallel
// plans see them as one op (attention heads shard; the norm is one kernel):
//   - RMSNorm: x * rsqrt(mean(x^2, -1, keepdim) + eps) [* weight], with x^2 as pow(x, 2) or x * x,
//     rsqrt as rsqrt(.) or 1 / sqrt(.), or x / sqrt(...) -> rms_norm(x, [H], weight, eps);
//   - attention: matmul(q, kᵀ) scaled (div by a constant or mul by one: 1/sqrt(D) is the op's
//     default, any other factor becomes its `scale`), with an optional mask, softmax over the last
//     dim, matmul by v -> scaled_dot_product_attention(q, k, v, mask?) {causal, scale}. A constant
//     causal mask (add of 0 / -inf, or where(mask, scores, -inf) either way round) becomes
//     causal = true; any other additive mask (add of a tensor of the scores' dtype) or keep
//     condition (where(c, scores, fill <= -1e4)) that broadcasts to the scores becomes the mask
//     operand; where(causal, scores, fill) + mask (Hugging Face's GPT-2) is both. Grouped-query exports repeat k and v to q's heads
//     (x[:, :, None].expand(B, Hkv, g, S, D).reshape(B, Hq, S, D)): the repeat is dropped and the
//     op reads the Hkv heads.
//   - tanh-GELU: 0.5·x·(1 + tanh(sqrt(2/pi)·(x + 0.044715·x³))) (Hugging Face's gelu_new) ->
//     gelu(x, approximate = tanh); GELU x·(1 + erf(x/√2))·0.5 (BERT's) -> gelu(x); SiLU:
//     x·sigmoid(x) -> silu(x). Both run as fast_math.h kernels
//     in one pass instead of 8 (or 2) elementwise ops, and as a linear's epilogue when x is (a
//     reshape of) a linear's result: on the GPT-2-style export the decomposed gelu_new took 38 %
//     of the forward (pow alone 23 %).
// A candidate whose mask would widen the scores or whose intermediate values have other users is
// left as it is (still correct, only not fused). Nodes the fusion leaves unused are removed.
//
// A pass over an imported graph (io/ runs it after converting, unless told not to): the rewrite is
// a pass's job, and io/ only decodes and converts.
#pragma once

#include <map>
#include <string>

#include "dtensor/core/tensor.h"
#include "dtensor/ir/graph.h"
#include "dtensor/passes/pass.h"

namespace dt::passes {

struct FusionCounts {
  int rms_norm = 0;
  int attention = 0;
  int activation = 0;  // GELU (tanh or erf) and SiLU
};

// The pass rewrites the graph in place and adds what it fused to `*counts` (when given).
// `weights` holds the parameters' values (a mask may be one) and must outlive the pass.
// Parameters the rewrite leaves unread stay declared (their weights still bind).
PassPtr make_onnx_fusion_pass(const std::map<std::string, Tensor>& weights, FusionCounts* counts = nullptr);

}  // namespace dt::passes
