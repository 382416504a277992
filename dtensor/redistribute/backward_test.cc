// The backward rule of redistribution (seeds/001) and its numerics on the threads backend.
#include "dtensor/redistribute/backward.h"

#include <gtest/gtest.h>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/core/error.h"
#include "dtensor/eager/dtensor.h"
#include "dtensor/eager/plan_check.h"

namespace dt {
namespace {

TEST(Backward, PartialSourceBecomesReplicateForANonPartialGradient) {
  EXPECT_EQ(placements_str(gradient_placements(parse_placements("P(sum),S(0)"), parse_placements("S(1),S(0)"))),
            "R,S(0)");
  EXPECT_EQ(placements_str(gradient_placements(parse_placements("P(sum),R"), parse_placements("P(sum),S(0)"))),
            "P(sum),R");
  EXPECT_EQ(placements_str(gradient_placements(parse_placements("S(0),R"), parse_placements("R,R"))), "S(0),R");
  EXPECT_THROW(gradient_placements(parse_placements("S(0)"), parse_placements("R,R")), ValueError);
}

TEST(Backward, PlansTheGradientBackToTheSource) {
  RedistributePlanner planner;
  // Forward S(0) -> R gathers; the gradient R -> S(0) is a local chunk.
  auto p = plan_backward(planner, {4}, parse_placements("S(0)"), parse_placements("R"), {8, 8}, DType::f32);
  EXPECT_EQ(placements_str(p->src), "R");
  EXPECT_EQ(placements_str(p->dst), "S(0)");
  EXPECT_EQ(p->num_collectives(), 0);
  // Forward P(sum) -> S(0) reduce-scatters; the gradient S(0) -> R all-gathers (no partial).
  auto q = plan_backward(planner, {4}, parse_placements("P(sum)"), parse_placements("S(0)"), {8, 8}, DType::f32);
  EXPECT_EQ(placements_str(q->dst), "R");
  EXPECT_EQ(q->collective_counts(), (std::map<std::string, int>{{"all_gather", 1}}));
  // Forward S(0) -> S(1): the gradient goes back with one all_to_all.
  auto r = plan_backward(planner, {4}, parse_placements("S(0)"), parse_placements("S(1)"), {8, 8}, DType::f32);
  EXPECT_EQ(r->collective_counts(), (std::map<std::string, int>{{"all_to_all", 1}}));
}

// redistribute is the identity on the global value, so its gradient is the identity on the
// global gradient: the backward result must hold the same global value, laid out as the rule
// says; for a P(sum) input every rank's local gradient is the full gradient (d sum / d x_i = 1).
TEST(Backward, NumericsOnThreads) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"S(0),S(1)", "S(1),S(0)"}, {"P(sum),S(1)", "R,R"},   {"P(sum),P(sum)", "S(0),S(1)"},
      {"R,S(0)", "S(0),R"},       {"S(0),P(sum)", "R,S(1)"}, {"P(sum),R", "P(sum),S(0)"},
      {"P(max),R", "S(1),R"},     {"S(1),S(1)", "R,S(0)"}};
  DeviceMesh mesh({2, 2});
  for (auto [src_text, dst_text] : cases) {
    Placements src = parse_placements(src_text), dst = parse_placements(dst_text);
    Tensor x_full = exact_random({7, 6}, DType::f32, 1), g_full = exact_random({7, 6}, DType::f32, 2);
    std::vector<Tensor> grads(4);
    Placements expected = gradient_placements(src, dst);
    run_ranks(4, [&](ProcessGroup& world) {
      auto groups = MeshGroups::create(world, mesh);
      DTensor y = distribute_tensor(x_full, groups, src).redistribute(dst);
      DTensor grad_y = distribute_tensor(g_full, groups, y.placements());
      DTensor grad_x = redistribute_backward(grad_y, src);
      EXPECT_EQ(grad_x.placements(), expected);
      grads[size_t(groups->global_rank())] = grad_x.to_local();
      // A P(sum) input on every mesh dim gets the full gradient on every rank.
      bool all_sum = true;
      for (const Placement& p : src) all_sum &= p.is_partial() && p.op() == ReduceOp::sum;
      if (all_sum) {
        EXPECT_EQ(grad_x.to_local().to_doubles(), g_full.to_doubles());
      }
    });
    EXPECT_EQ(check_locals(DTensorSpec(mesh, expected, {7, 6}, DType::f32), grads, g_full), "")
        << src_text << " -> " << dst_text;
  }
}

}  // namespace
}  // namespace dt
