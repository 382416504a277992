// Kernel-level fusion of elementwise chains in the interpreter (no IR op: the graph, its sharding
// and its gradients are unchanged; only how the interpreter runs two nodes).
//
// Which chains, and why (measured with `dtensor profile` on the anchor gpt forward, vocab 4096,
// hidden 512, 8 heads, 4 layers, batch 4, seq 256, one thread): linear 83 %, gelu 8 %, attention
// 7 %, layer_norm 0.7 %, the residual adds 0.3 %. The only elementwise op worth a fusion is the
// activation after a linear: gelu (gpt, fc_in), silu (llama's gate) and relu (mlp). Its input is
// a [tokens, 4·hidden] tensor far larger than the cache, written by the GEMM, read back by the
// activation and written again into a fresh buffer. Fused, the activation runs on each GEMM row
// panel in place while it is in cache (dt::linear_act), and the bias is seeded per panel too, so
// bias + GEMM + activation is one pass over the output. The residual adds later joined the
// projections before them the same way (linear+add, below); layer_norm is left unfused (0.7 %).
//
// A linear node fuses with the activation node reading its result when that activation is the
// result's only reader, the result is f32 or bf16 (the dtypes for which the fused kernel is bitwise equal
// to the two ops), not a graph output and neither node's result goes to the comm arena.
// Autodiff graphs read the pre-activation value again (gelu_backward), so they keep both nodes.
#pragma once

#include <vector>

#include "dtensor/kernels/ops.h"
#include "dtensor/ir/graph.h"
#include "dtensor/ir/use_lists.h"

namespace dt::runtime {

// What every fusion finder asks of the graph, built once per graph: the readers of each value,
// each node's position and which nodes write into the comm arena (`arena_offset`, one entry per
// node, -1: not placed in the arena; the caller's vector, which must outlive this).
struct FusionAnalysis {
  FusionAnalysis(const ir::Graph& graph, const std::vector<int64_t>& arena_offset);

  // Returns `n` when it is a node with one result outside the comm arena and `reader` is the only
  // reader of v; else null. The chains the fusions absorb are linked by such edges v -> reader:
  // matched from the reader's end, n is v's producer; from the producer's end, n is the reader.
  const ir::Node* absorbable(const ir::Node* n, const ir::Value* v, const ir::Node* reader) const;
  // Returns v's only reader when it is an `op` node absorbable as above, else null.
  const ir::Node* sole_user_of_kind(const ir::Value* v, ir::OpKind op) const;

  const ir::Graph& graph;
  const ir::UseLists uses;
  const ir::NodePositions position;
  const std::vector<int64_t>& arena_offset;
};

struct EpilogueFusion {
  int head = -1;  // the linear node
  int tail = -1;  // the activation (or mul, or add) node computed by the head's kernel
  Activation act = Activation::none;
  const ir::Value* other = nullptr;  // a mul or add tail's other operand (dt::linear_binary)
  EpilogueOp other_op = EpilogueOp::mul;
};

// Hugging Face Llama's rotary embedding, x·cos + cat(-x[..., h:], x[..., :h])·sin, spelled as seven
// ops: add(mul(x, cos), mul(cat(neg(slice(x, h:2h)), slice(x, 0:h)), sin)) over x's last dim 2h
// (either operand order of the muls and the add). The add node runs dt::rotary_embedding on x, cos
// and sin; the other six do no work. Measured on the 4-layer Llama at hidden 512 (batch 4, seq
// 256): the chain's 28 elementwise passes took 11 ms of a 145 ms forward at two threads (they are
// memory-bound and do not scale), the fused kernel under 1 ms. Every intermediate must have its
// one reader inside the chain and not be a graph output; f32; no node in the comm arena.
struct RotaryFusion {
  int tail = -1;             // the add node, which computes the chain
  std::vector<int> members;  // the chain's other nodes
  const ir::Value* x = nullptr;
  const ir::Value* cos = nullptr;
  const ir::Value* sin = nullptr;
};

// Returns the rotary embedding chains of the analysed graph.
std::vector<RotaryFusion> find_rotary_fusions(const FusionAnalysis& analysis);

// An f32 linear whose only reader is a mul by, or an add of, a tensor of its shape that exists
// before the linear runs fuses the same way: the product or sum is taken on each GEMM panel in
// cache (dt::linear_binary). The mul is Llama's SwiGLU, silu(gate) * up, which read a
// [tokens, intermediate] tensor back after the GEMM wrote it (4 muls of 6 MB each in the Llama
// above); the add is the residual after each block's output projection (h + o_proj(a),
// h + down_proj(m), GPT-2's c_proj with its bias: 8 adds in either 4-layer model).
//
// Returns the linear + activation pairs of the analysed graph that can run as one kernel.
std::vector<EpilogueFusion> find_epilogue_fusions(const FusionAnalysis& analysis);
// The same with the nodes' own arena_offset attributes (what an Interpreter of `graph` fuses).
std::vector<EpilogueFusion> find_epilogue_fusions(const ir::Graph& graph);

// A training step's gelu(x) and gelu_backward(grad, x) on the same pre-activation x (the same
// approximation, f32): the gelu node computes gelu(x) and gelu'(x) in one pass (dt::gelu_and_grad,
// which shares their exp work) and keeps the derivative, and the gelu_backward node multiplies
// grad by it. Bitwise equal to the two ops. Measured on the anchor gpt's training step (tanh,
// `dtensor profile --train`, one thread, alternating builds): gelu + gelu_backward 18.0-18.2 ->
// 14.3-14.4 ms of a 965 ms step. The two nodes must be x's only readers (x's last use is then the
// forward node, and the derivative is written over x when nothing else holds its storage: peak
// memory unchanged, with and without recomputed blocks), x a node's result and not a graph
// output, and neither node's result in the comm arena. The chain is local to a rank's program,
// so any sharding of x gives the same values as the two ops on that shard.
struct ActivationGradFusion {
  int forward = -1;   // the gelu node
  int backward = -1;  // the gelu_backward node
  const ir::Value* x = nullptr;
};
std::vector<ActivationGradFusion> find_activation_grad_fusions(const FusionAnalysis& analysis);

// An all_gather along a dim d > 0 as the sharding lowers it (stacked_to_dim in
// sharding/redistribute_lowering.cc): all_gather_into_tensor (blocks stacked along dim 0) ->
// wait_tensor -> view [n, p...] -> permute (the members' axis to d) -> reshape (p with p[d] *= n).
// The interpreter instead gathers each rank's block straight into its place in the reshape's
// result (dt::all_gather_into_tensor along d): no stacked buffer, no permuting copy. Measured on
// the anchor gpt's tp 2 forward, the vocabulary-parallel logits [1024, 2048] per rank: the join
// copy alone was 2.3-2.9 ms of a 140 ms forward, and the stacked buffer another 16 MB written.
// Each value of the chain has the next node as its only reader and none is in the comm arena, so
// nothing else sees the skipped values. The wait node binds the reshape's result.
struct GatherJoin {
  int gather = -1, wait = -1;  // the all_gather_into_tensor node and its wait_tensor
  int view = -1, permute = -1, join = -1;  // skipped: the join's result is written by the gather
  int64_t dim = 0;             // the gathered dim of the join's result
};
std::vector<GatherJoin> find_gather_joins(const FusionAnalysis& analysis);

}  // namespace dt::runtime
