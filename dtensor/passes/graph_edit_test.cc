// GraphEdit: keys order nodes, data dependencies win, a low key pulls producers up, but never
// across an in-place collective.
#include "dtensor/passes/graph_edit.h"

#include <gtest/gtest.h>

#include "dtensor/ir/parser.h"
#include "dtensor/ir/printer.h"

namespace dt::passes {
namespace {

std::vector<std::string> order(const ir::Graph& g) {
  std::vector<std::string> out;
  for (const auto& n : g.nodes()) out.push_back(n->result()->name);
  return out;
}

TEST(GraphEdit, LowKeyPullsProducers) {
  ir::Graph g = ir::parse(R"(graph g {
  input %x : f32[4]
  %a = relu(%x) : f32[4]
  %b = relu(%x) : f32[4]
  %c = relu(%b) : f32[4]
  return %a, %c
})");
  GraphEdit edit(g);
  edit.set_key(g.nodes()[2], -1.0);  // %c first: %b comes with it
  edit.commit();
  EXPECT_EQ(order(g), (std::vector<std::string>{"b", "c", "a"}));
}

TEST(GraphEdit, NoPullAcrossAnInPlaceCollective) {
  ir::Graph g = ir::parse(R"(graph g {
  group tp = [0, 1]
  input %x : f32[4]
  %h = relu(%x) : f32[4]
  %ar = all_reduce_(%h) {group = tp} : f32[4]
  %ar_w = wait_tensor(%ar) : f32[4]
  %z = add(%h, %x) : f32[4]
  %u = relu(%z) : f32[4]
  return %ar_w, %u
})");
  GraphEdit edit(g);
  // %u wants to go first; %z reads the buffer all_reduce_ writes, so it is not pulled above the
  // collective and its wait (and %u cannot go before %z).
  edit.set_key(g.nodes()[4], -1.0);
  edit.commit();
  EXPECT_EQ(order(g), (std::vector<std::string>{"h", "ar", "ar_w", "z", "u"}));
}

}  // namespace
}  // namespace dt::passes
