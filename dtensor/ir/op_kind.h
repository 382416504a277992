// The closed set of IR ops: an enum and its name table, generated from one list (DT_IR_OPS). Each op's schema, inference and kernel live in one ops_<family>.cc file.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dt::ir {

// The op list, once: DT_IR_OPS(X) expands X(name) for every op in enum order, grouped by the
// ops_<family>.cc file that registers it. The enum and the name table below are both generated
// from it, so they cannot disagree.
#define DT_IR_OPS(X)                                                                                  \
  /* ops_linear.cc */                                                                                 \
  X(linear) X(matmul) X(bmm)                                                                          \
  /* ops_elementwise.cc */                                                                            \
  X(add) X(sub) X(mul) X(div) X(neg) X(relu) X(gelu) X(silu) X(cast)                                  \
  X(exp) X(log) X(sqrt) X(rsqrt) X(tanh) X(sigmoid) X(erf) X(sin) X(cos) X(abs) X(pow) X(clamp)        \
  X(maximum) X(minimum) X(eq) X(ne) X(lt) X(le) X(gt) X(ge) X(where) X(masked_fill)                   \
  X(leaky_relu) X(softplus)                                                                           \
  /* ops_norm.cc */                                                                                   \
  X(layer_norm) X(rms_norm) X(softmax) X(log_softmax)                                                 \
  /* ops_shape.cc */                                                                                  \
  X(embedding) X(masked_embedding) X(view) X(reshape) X(transpose) X(permute) X(slice) X(split)       \
  X(cat) X(arange) X(expand) X(full) X(unsqueeze) X(squeeze) X(flatten) X(constant)                    \
  /* ops_attention.cc */                                                                              \
  X(scaled_dot_product_attention)                                                                     \
  /* ops_reduce.cc */                                                                                 \
  X(sum) X(mean) X(amax) X(amin)                                                                      \
  /* ops_loss.cc */                                                                                   \
  X(mse_loss) X(cross_entropy) X(cross_entropy_max) X(cross_entropy_sum_exp)                          \
  X(cross_entropy_target_logit) X(cross_entropy_combine) X(nll_loss)                                  \
  /* ops_collective.cc */                                                                             \
  X(all_gather_into_tensor) X(reduce_scatter_tensor) X(all_reduce) X(all_to_all_single) X(broadcast)  \
  X(wait_tensor)                                                                                      \
  /* ops_collective_variants.cc */                                                                    \
  X(all_gather_into_tensor_coalesced) X(reduce_scatter_tensor_coalesced) X(all_reduce_coalesced)      \
  X(all_gather_into_tensor_out)                                                                       \
  /* ops_bucketing.cc (introduced by dtensor/passes) */                                               \
  X(bucket_copy_in) X(bucket_split_out) X(chunk_cat) X(flat_view) X(clone) X(all_reduce_)             \
  X(one_shot_all_reduce) X(all_gather_copy_in) X(all_gather_into_tensor_)                             \
  X(all_gather_linear_in) /* its GEMM: ops_linear.cc */                                               \
  /* ops_grad.cc (introduced by dtensor/autodiff) */                                                  \
  X(relu_backward) X(gelu_backward) X(silu_backward) X(layer_norm_backward) X(rms_norm_backward)      \
  X(softmax_backward) X(scaled_dot_product_attention_backward) X(embedding_backward)                  \
  X(mse_loss_backward) X(cross_entropy_backward) X(slice_backward)                                    \
  /* ops_optim.cc (introduced by dtensor/autodiff) */                                                 \
  X(sgd_update) X(adamw_update)                                                                       \
  /* ops_index.cc (the gathers' backward ops beside them); the logical ops: ops_elementwise.cc */   \
  X(gather) X(gather_backward) X(gather_elements) X(gather_elements_backward) X(argmax) X(argmin)     \
  X(cumsum) X(triu) X(tril) X(topk)                                                                    \
  X(logical_and) X(logical_or) X(logical_xor)                                                        \
  /* ops/index.cc too: by index tuples over the leading dims (ONNX ScatterND, GatherND) */            \
  X(scatter_nd) X(gather_nd) X(gather_nd_backward)                                                    \
  /* ops/p2p.cc: point-to-point transfers between two ranks of a group (pipelines) */                 \
  X(send) X(recv)                                                                                     \
  /* ops/conv.cc (its gradients beside it) */                                                         \
  X(conv) X(conv_backward_input) X(conv_backward_weight)

enum class OpKind : uint8_t {
#define DT_IR_OP_ENUM(name) name,
  DT_IR_OPS(DT_IR_OP_ENUM)
#undef DT_IR_OP_ENUM
  count  // number of ops; keep last
};

inline constexpr size_t kNumOps = size_t(OpKind::count);

// The text name of each op, indexed by OpKind; the name is the op's spelling in the IR text.
inline constexpr std::array<std::string_view, kNumOps> kOpNames = {
#define DT_IR_OP_NAME(name) #name,
    DT_IR_OPS(DT_IR_OP_NAME)
#undef DT_IR_OP_NAME
};

namespace detail {
// Returns true when no two names in the table are equal (checked at compile time below).
constexpr bool op_names_unique() {
  for (size_t i = 0; i < kNumOps; ++i)
    for (size_t j = i + 1; j < kNumOps; ++j)
      if (kOpNames[i] == kOpNames[j]) return false;
  return true;
}
}  // namespace detail
static_assert(detail::op_names_unique(), "duplicate op name in kOpNames");
inline constexpr std::string_view op_name(OpKind op) { return kOpNames[size_t(op)]; }

// Returns the op spelled `name`, or nullopt.
std::optional<OpKind> find_op(std::string_view name);

}  // namespace dt::ir
