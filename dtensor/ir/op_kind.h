// The closed set of IR ops: an enum and its name table, checked against each other at compile
// time (style.md rule 3). Each op's schema, inference and kernel live in one ops_<family>.cc file.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dt::ir {

enum class OpKind : uint8_t {
  // ops_linear.cc
  linear, matmul, bmm,
  // ops_elementwise.cc
  add, sub, mul, div, relu, gelu, silu, cast,
  // ops_norm.cc
  layer_norm, rms_norm, softmax,
  // ops_shape.cc
  embedding, masked_embedding, view, reshape, transpose, permute, slice, split, cat, arange,
  // ops_attention.cc
  scaled_dot_product_attention,
  // ops_reduce.cc
  sum, mean,
  // ops_loss.cc
  mse_loss, cross_entropy, cross_entropy_max, cross_entropy_sum_exp, cross_entropy_target_logit,
  cross_entropy_combine,
  // ops_collective.cc
  all_gather_into_tensor, reduce_scatter_tensor, all_reduce, all_to_all_single, broadcast,
  wait_tensor,
  // ops_collective_variants.cc
  all_gather_into_tensor_coalesced, reduce_scatter_tensor_coalesced, all_reduce_coalesced,
  all_gather_into_tensor_out,
  // ops_bucketing.cc (introduced by dtensor/passes)
  bucket_copy_in, bucket_split_out, chunk_cat, flat_view, clone, all_reduce_, one_shot_all_reduce,
  all_gather_copy_in, all_gather_into_tensor_,
  count  // number of ops; keep last
};

inline constexpr size_t kNumOps = size_t(OpKind::count);

// The text name of each op, indexed by OpKind; the name is the op's spelling in the IR text.
inline constexpr std::array<std::string_view, kNumOps> kOpNames = {
    "linear", "matmul", "bmm",
    "add", "sub", "mul", "div", "relu", "gelu", "silu", "cast",
    "layer_norm", "rms_norm", "softmax",
    "embedding", "masked_embedding", "view", "reshape", "transpose", "permute", "slice", "split", "cat", "arange",
    "scaled_dot_product_attention",
    "sum", "mean",
    "mse_loss", "cross_entropy", "cross_entropy_max", "cross_entropy_sum_exp", "cross_entropy_target_logit",
    "cross_entropy_combine",
    "all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "all_to_all_single",
    "broadcast", "wait_tensor",
    "all_gather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced", "all_reduce_coalesced",
    "all_gather_into_tensor_out",
    "bucket_copy_in", "bucket_split_out", "chunk_cat", "flat_view", "clone", "all_reduce_",
    "one_shot_all_reduce", "all_gather_copy_in", "all_gather_into_tensor_",
};
static_assert(kOpNames.size() == kNumOps, "kOpNames and OpKind disagree");

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
// Spot checks that the table is not shifted against the enum.
static_assert(kOpNames[size_t(OpKind::linear)] == "linear");
static_assert(kOpNames[size_t(OpKind::arange)] == "arange");
static_assert(kOpNames[size_t(OpKind::scaled_dot_product_attention)] == "scaled_dot_product_attention");
static_assert(kOpNames[size_t(OpKind::cross_entropy)] == "cross_entropy");
static_assert(kOpNames[size_t(OpKind::wait_tensor)] == "wait_tensor");
static_assert(kOpNames[size_t(OpKind::all_gather_into_tensor_out)] == "all_gather_into_tensor_out");
static_assert(kOpNames[size_t(OpKind::one_shot_all_reduce)] == "one_shot_all_reduce");
static_assert(kOpNames[size_t(OpKind::all_gather_into_tensor_)] == "all_gather_into_tensor_");

inline constexpr std::string_view op_name(OpKind op) { return kOpNames[size_t(op)]; }

// Returns the op spelled `name`, or nullopt.
std::optional<OpKind> find_op(std::string_view name);

}  // namespace dt::ir
