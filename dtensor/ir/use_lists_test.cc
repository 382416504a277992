// UseLists: readers in graph order, one entry per reading node, outputs flagged apart; sole_user
// is the fusion condition; NodePositions gives each node's index (a resultless node's too).
#include "dtensor/ir/use_lists.h"

#include <gtest/gtest.h>

#include "dtensor/ir/parser.h"

namespace dt::ir {
namespace {

TEST(UseLists, ReadersInGraphOrderOncePerNode) {
  Graph g = parse(R"(graph g {
  input %x : f32[4]
  %a = mul(%x, %x) : f32[4]
  %b = relu(%a) : f32[4]
  %c = add(%a, %x) : f32[4]
  return %b, %c
})");
  const UseLists uses(g);
  const Value* x = g.find("x");
  const Value* a = g.find("a");
  ASSERT_EQ(uses.users(x).size(), 2u);  // mul reads it twice: one reader
  EXPECT_EQ(uses.users(x)[0], a->producer);
  EXPECT_EQ(uses.users(x)[1], g.find("c")->producer);
  EXPECT_EQ(uses.users(a).size(), 2u);
  EXPECT_TRUE(uses.users(g.find("b")).empty());
  EXPECT_TRUE(uses.is_output(g.find("b")));
  EXPECT_FALSE(uses.is_output(a));
}

TEST(UseLists, SoleUserExcludesOutputsAndSharedValues) {
  Graph g = parse(R"(graph g {
  input %x : f32[4]
  %a = relu(%x) : f32[4]
  %b = exp(%a) : f32[4]
  %c = neg(%b) : f32[4]
  return %b, %c
})");
  const UseLists uses(g);
  EXPECT_EQ(uses.sole_user(g.find("a")), g.find("b")->producer);
  EXPECT_EQ(uses.sole_user(g.find("b")), nullptr);  // also a graph output
  EXPECT_EQ(uses.sole_user(g.find("c")), nullptr);  // no reader
}

TEST(NodePositions, IndexOfEveryNode) {
  Graph g = parse(R"(graph g {
  input %x : f32[4]
  %a = relu(%x) : f32[4]
  %b = exp(%a) : f32[4]
  return %b
})");
  NodePositions position(g);
  for (size_t i = 0; i < g.nodes().size(); ++i) EXPECT_EQ(position(g.nodes()[i]), i);
  Node resultless;
  EXPECT_THROW(position(&resultless), InternalError);
  position.record(&resultless, 7);
  EXPECT_EQ(position(&resultless), 7u);
}

}  // namespace
}  // namespace dt::ir
