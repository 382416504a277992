// Every registered op, walked one by one: the enum, the name table and the registry agree, every
// op has inference and a kernel, and the traits are consistent with each other (a trait that
// contradicts another is a fact about an op written wrong in its registry entry).
#include "dtensor/ir/op_registry.h"

#include <gtest/gtest.h>

#include "dtensor/ir/parser.h"

#include <set>

namespace dt::ir {
namespace {

TEST(OpRegistry, EveryOpIsRegisteredOnceWithItsNameInferenceAndKernel) {
  for (size_t i = 0; i < kNumOps; ++i) {
    const OpKind k = OpKind(i);
    const OpDef& def = op_def(k);
    SCOPED_TRACE(std::string(kOpNames[i]));
    EXPECT_EQ(def.kind, k);
    EXPECT_EQ(def.name(), kOpNames[i]);
    ASSERT_TRUE(find_op(kOpNames[i]).has_value());
    EXPECT_EQ(*find_op(kOpNames[i]), k);
    EXPECT_NE(def.infer, nullptr);
    EXPECT_NE(def.kernel, nullptr);
  }
}

TEST(OpRegistry, TraitsAreConsistent) {
  for (size_t i = 0; i < kNumOps; ++i) {
    const OpDef& def = op_def(OpKind(i));
    SCOPED_TRACE(std::string(kOpNames[i]));
    const bool has_group = def.attr_index("group") >= 0;
    // Communicating ops name their group; waiting and in-place are kinds of communicating.
    EXPECT_TRUE(!def.is_collective() || has_group);
    EXPECT_TRUE(!def.needs_wait || def.is_collective());
    if (def.in_place) {
      // An in-place collective writes operand 0, read on through its result; any other in-place
      // op (the optimizer updates) names the operand each result is written into, and is not
      // an alias of operand 0 only (the buffer planner would follow the gradient through it).
      if (def.is_collective()) {
        EXPECT_TRUE(def.result_aliases_operand);
      } else {
        EXPECT_FALSE(def.in_place_operands.empty());
        EXPECT_FALSE(def.result_aliases_operand);
      }
      for (int j : def.in_place_operands) EXPECT_TRUE(j >= 0 && j < int(def.operands.size()));
      EXPECT_FALSE(def.fresh_result);
    }
    // A fresh buffer is not an alias; a comm prep is a fresh buffer a collective reads from the arena.
    EXPECT_TRUE(!def.fresh_result || !def.result_aliases_operand);
    if (def.comm_prep) {
      EXPECT_TRUE(def.fresh_result);
      EXPECT_TRUE(def.writes_preallocated_out);
    }
    // `arena_offset` is the last attribute of exactly the ops that write a preallocated output.
    const int arena = def.attr_index("arena_offset");
    EXPECT_EQ(arena >= 0, def.writes_preallocated_out);
    if (arena >= 0) {
      EXPECT_EQ(size_t(arena), def.attrs.size() - 1);
    }
    // Collectives exist only in per-rank programs, after sharding: no sharding rule. An op is
    // localized only when it can be sharded, so localize_attrs implies a rule.
    if (def.is_collective()) {
      EXPECT_EQ(def.sharding_rule, nullptr);
    }
    if (def.localize_attrs) {
      EXPECT_NE(def.sharding_rule, nullptr);
    }
    // A mean over rows matters only where its rows can be sharded.
    if (def.row_mean) {
      EXPECT_NE(def.sharding_rule, nullptr);
    }
  }
}

// The partitioner weights a rank's loss by its share of the rows for the ops whose registry entry
// says they are a mean over rows: cross_entropy's default mean, not its sum (local sums add up).
TEST(OpRegistry, CrossEntropysMeanIsAMeanOverRows) {
  const Graph g = parse(R"(graph g {
  input %x : f32[4, 3]
  input %t : i64[4]
  %m = cross_entropy(%x, %t) : f32[]
  %s = cross_entropy(%x, %t) {reduction = "sum"} : f32[]
  return %m, %s
})");
  const RowMeanFn row_mean = op_def(OpKind::cross_entropy).row_mean;
  ASSERT_NE(row_mean, nullptr);
  EXPECT_TRUE(row_mean(*g.nodes()[0]));
  EXPECT_FALSE(row_mean(*g.nodes()[1]));
  EXPECT_EQ(op_def(OpKind::mse_loss).row_mean, nullptr);  // its rule keeps every operand whole
}

// Every op a gradient could flow through has a rule: an op without one must be a collective or
// listed here with the reason no gradient flows through it, so a new op that forgets its rule
// fails here rather than in the middle of someone's training graph.
TEST(OpRegistry, EveryDifferentiableOpHasAGradientRule) {
  const std::set<OpKind> no_gradient = {
      // Bool or integer results: nothing to differentiate.
      OpKind::eq, OpKind::ne, OpKind::lt, OpKind::le, OpKind::gt, OpKind::ge, OpKind::logical_and,
      OpKind::logical_or, OpKind::logical_xor, OpKind::argmax, OpKind::argmin, OpKind::arange,
      // No operands: constants.
      OpKind::full, OpKind::constant,
      // Exist only in per-rank programs, written by the partitioner after autodiff has run: the
      // vocabulary-parallel lookup and the loss-parallel pieces of cross_entropy.
      OpKind::masked_embedding, OpKind::cross_entropy_max, OpKind::cross_entropy_sum_exp,
      OpKind::cross_entropy_target_logit, OpKind::cross_entropy_combine,
      // Written by passes after autodiff: the bucketing copies and their collectives.
      OpKind::bucket_copy_in, OpKind::bucket_split_out, OpKind::chunk_cat, OpKind::flat_view, OpKind::clone,
      OpKind::all_gather_copy_in, OpKind::all_gather_linear_in, OpKind::wait_tensor,
      // Backward ops: no second derivatives.
      OpKind::relu_backward, OpKind::gelu_backward, OpKind::silu_backward, OpKind::layer_norm_backward,
      OpKind::rms_norm_backward, OpKind::softmax_backward, OpKind::scaled_dot_product_attention_backward,
      OpKind::embedding_backward, OpKind::mse_loss_backward, OpKind::cross_entropy_backward,
      OpKind::slice_backward, OpKind::gather_backward, OpKind::gather_elements_backward,
      OpKind::conv_backward_input, OpKind::conv_backward_weight, OpKind::gather_nd_backward,
      // Optimizer updates: they consume gradients.
      OpKind::sgd_update, OpKind::adamw_update};
  for (size_t i = 0; i < kNumOps; ++i) {
    const OpDef& def = op_def(OpKind(i));
    SCOPED_TRACE(std::string(kOpNames[i]));
    if (def.is_collective()) {
      EXPECT_EQ(def.grad, nullptr);
      continue;
    }
    const bool listed = no_gradient.count(OpKind(i)) > 0;
    EXPECT_NE(def.grad != nullptr, listed) << (listed ? "is listed as having no gradient but has a rule"
                                                      : "has no gradient rule and is not listed");
  }
}

}  // namespace
}  // namespace dt::ir
