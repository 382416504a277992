// Every registered op, walked one by one: the enum, the name table and the registry agree, every
// op has inference and a kernel, and the traits are consistent with each other (a trait that
// contradicts another is a fact about an op written wrong in its registry entry).
#include "dtensor/ir/op_registry.h"

#include <gtest/gtest.h>

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
      EXPECT_TRUE(def.is_collective());
      EXPECT_TRUE(def.result_aliases_operand);
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
  }
}

}  // namespace
}  // namespace dt::ir
