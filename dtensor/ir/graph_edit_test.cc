// GraphEdit: keys order nodes, data dependencies win, a low key pulls producers up, but never
// across an in-place collective.
#include "dtensor/ir/graph_edit.h"

#include <gtest/gtest.h>

#include "dtensor/ir/parser.h"
#include "dtensor/ir/printer.h"

namespace dt::ir {
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

// An optimizer update writes its parameter in place: a reader of the parameter before it reads the
// old value and one after it the new, so neither crosses it, whatever keys ask.
TEST(GraphEdit, ReadersOfAnUpdatedParameterStayOnTheirSide) {
  ir::Graph g = ir::parse(R"(graph g {
  input %g : f32[4]
  param %w : f32[4]
  %old = relu(%w) : f32[4]
  %w2 = sgd_update(%w, %g) {lr = 0.1} : f32[4]
  %new = relu(%w) : f32[4]
  return %old, %w2, %new
})");
  GraphEdit edit(g);
  edit.set_key(g.nodes()[0], 10.0);  // %old wants to go last
  edit.set_key(g.nodes()[2], -1.0);  // %new wants to go first
  edit.commit();
  EXPECT_EQ(order(g), (std::vector<std::string>{"old", "w2", "new"}));
}

// The root cause of a hang on fsdp x tp at hidden 512: a bucket of dp gathers placed early on one
// rank pulled the tp collective feeding it above another tp collective, so the tp group's members
// issued their collectives in different orders. Pulls never reorder a group's collectives.
TEST(GraphEdit, PullKeepsEachGroupsCollectivesInOrder) {
  ir::Graph g = ir::parse(R"(graph g {
  group tp = [0, 1]
  group dp = [0, 2]
  input %x : f32[4]
  input %y : f32[4]
  %ar = all_reduce(%x) {group = tp} : f32[4]
  %ar_w = wait_tensor(%ar) : f32[4]
  %ag = all_gather_into_tensor(%y) {group = tp} : f32[8]
  %ag_w = wait_tensor(%ag) : f32[8]
  %g2 = all_gather_into_tensor(%ag_w) {group = dp} : f32[16]
  %g2_w = wait_tensor(%g2) : f32[16]
  return %ar_w, %g2_w
})");
  GraphEdit edit(g);
  edit.set_key(g.nodes()[4], -1.0);  // the dp gather first: it pulls %ag_w and %ag, and %ar with them
  edit.commit();
  EXPECT_EQ(order(g), (std::vector<std::string>{"ar", "ag", "ag_w", "g2", "ar_w", "g2_w"}));
}

TEST(GraphEdit, NewCollectiveTakesTheOrderItIsGiven) {
  ir::Graph g = ir::parse(R"(graph g {
  group tp = [0, 1]
  input %x : f32[4]
  input %y : f32[4]
  %a = all_reduce(%x) {group = tp} : f32[4]
  %a_w = wait_tensor(%a) : f32[4]
  %b = all_reduce(%y) {group = tp} : f32[4]
  %b_w = wait_tensor(%b) : f32[4]
  return %a_w, %b_w
})");
  GraphEdit edit(g);
  // A replacement of %b at a key before %a, but placed where %b stood in the group's order.
  ir::Value* c = edit.add(ir::OpKind::all_reduce, {g.inputs()[1]}, {{"group", std::string("tp")}}, -1.0, "c");
  edit.set_order(c, 2.0);
  ir::Value* cw = edit.add(ir::OpKind::wait_tensor, {c}, {}, 3.0, "c_w");
  edit.replace(g.nodes()[3]->result(), cw);
  edit.drop(g.nodes()[2]);
  edit.drop(g.nodes()[3]);
  edit.commit();
  EXPECT_EQ(order(g), (std::vector<std::string>{"a", "c", "a_w", "b_w"}));
}

}  // namespace
}  // namespace dt::ir
