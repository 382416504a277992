#include "dtensor/passes/buffer_planner.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>

#include "dtensor/comm/symmetric_arena.h"
#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/core/error.h"
#include "dtensor/ir/parser.h"
#include "dtensor/ir/printer.h"
#include "dtensor/passes/pass_manager.h"
#include "tests/support/error_text.h"

namespace dt::passes {
namespace {

using test::error_text;

// Two gradient buckets one after the other (the second reads the first's result, so they cannot
// merge, and their buffers have disjoint lifetimes) and an all_gather alive across both.
const char* kProgram = R"(graph step {
  group dp = [0, 1, 2, 3]
  input %g1 : f32[64, 8]
  input %g2 : f32[32]
  input %g3 : f32[64, 8]
  input %g4 : f32[32]
  param %w : f32[16, 8]
  %ag = all_gather_into_tensor(%w) {group = dp} : f32[64, 8]
  %rs1 = reduce_scatter_tensor(%g1) {group = dp} : f32[16, 8]
  %rs2 = reduce_scatter_tensor(%g2) {group = dp} : f32[8]
  %rs1_w = wait_tensor(%rs1) : f32[16, 8]
  %rs2_w = wait_tensor(%rs2) : f32[8]
  %s1 = sum(%rs1_w) : f32[]
  %s2 = sum(%rs2_w) : f32[]
  %a = add(%s1, %s2) : f32[]
  %g3a = mul(%g3, %a) : f32[64, 8]
  %rs3 = reduce_scatter_tensor(%g3a) {group = dp} : f32[16, 8]
  %rs4 = reduce_scatter_tensor(%g4) {group = dp} : f32[8]
  %rs3_w = wait_tensor(%rs3) : f32[16, 8]
  %rs4_w = wait_tensor(%rs4) : f32[8]
  %s3 = sum(%rs3_w) : f32[]
  %s4 = sum(%rs4_w) : f32[]
  %b = add(%s3, %s4) : f32[]
  %ag_w = wait_tensor(%ag) : f32[64, 8]
  %c = add(%a, %b) : f32[]
  %d = add(%ag_w, %c) : f32[64, 8]
  return %d
}
)";

ir::Graph bucketed() {
  ir::Graph g = ir::parse(kProgram);
  PassManager pm;
  pm.add(parse_pipeline("bucket-reduce-scatter,wait-placement"));
  pm.run(g);
  return g;
}

TEST(BufferPlanner, OverlappingLifetimesNeverShareBytes) {
  ir::Graph g = bucketed();
  CommBufferPlan plan = plan_comm_buffers(g);
  // ag, rs bucket 0 (chunk_cat + output), rs bucket 1 (chunk_cat + output).
  ASSERT_EQ(plan.buffers.size(), 5u);
  for (size_t i = 0; i < plan.buffers.size(); ++i)
    for (size_t j = i + 1; j < plan.buffers.size(); ++j) {
      const CommBuffer& a = plan.buffers[i];
      const CommBuffer& b = plan.buffers[j];
      bool live_together = a.first <= b.last && b.first <= a.last;
      bool bytes_overlap = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      EXPECT_FALSE(live_together && bytes_overlap) << a.value->name << " and " << b.value->name;
    }
  // The second bucket reuses the first bucket's space: less than the sum of all buffers.
  size_t sum = 0;
  for (const CommBuffer& b : plan.buffers) sum += b.bytes;
  EXPECT_LT(plan.total_bytes, sum);
  const CommBuffer* in0 = plan.find(g.find("rs_bucket0_in"));
  const CommBuffer* in1 = plan.find(g.find("rs_bucket1_in"));
  ASSERT_TRUE(in0 && in1);
  EXPECT_EQ(in0->offset, in1->offset);
}

// An optimizer update may write a gathered parameter in place (fsdp x tp updates some parameters
// whole) and the step outputs a slice of it: the gather's buffer reaches that output through the
// update, so it never goes in the arena (a later collective would overwrite the new parameter).
TEST(BufferPlanner, BufferWrittenByAnInPlaceUpdateLivesOnThroughItsResult) {
  ir::Graph g = ir::parse(R"(graph step {
  group dp = [0, 1]
  input %g : f32[8]
  param %w : f32[4]
  %ag = all_gather_into_tensor(%w) {group = dp} : f32[8]
  %ag_w = wait_tensor(%ag) : f32[8]
  %w2 = sgd_update(%ag_w, %g) {lr = 0.1} : f32[8]
  %out = slice(%w2) {dim = 0, end = 4} : f32[4]
  return %out
}
)");
  EXPECT_EQ(plan_comm_buffers(g).find(g.find("ag")), nullptr);
}

// Every rank plans its own copy of the program and places it in the arena three times: the
// offsets agree across ranks and iterations (the arena would throw CommError otherwise).
TEST(BufferPlanner, SymmetricArenaOffsetsAgreeOnFourRanksOverThreeIterations) {
  const size_t capacity = plan_comm_buffers(bucketed()).total_bytes;
  SymmetricArena arena(4, capacity);
  std::vector<std::vector<size_t>> offsets(4);
  run_ranks(4, [&](ProcessGroup& world) {
    const int r = world.rank();
    ir::Graph g = bucketed();
    CommBufferPlan plan = plan_comm_buffers(g);
    for (int it = 0; it < 3; ++it) {
      arena.begin_iteration(r);
      for (const CommBuffer& b : plan.buffers) offsets[size_t(r)].push_back(arena.place(r, b.offset, b.bytes));
    }
  });
  ASSERT_EQ(offsets[0].size(), 15u);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(offsets[size_t(r)], offsets[0]);
  for (size_t k = 0; k < 5; ++k) {
    EXPECT_EQ(offsets[0][k + 5], offsets[0][k]);
    EXPECT_EQ(offsets[0][k + 10], offsets[0][k]);
  }
}

}  // namespace
}  // namespace dt::passes

namespace dt::passes {
namespace {

// Hand-written offsets are checked before anything runs: two buffers live together may not share
// bytes, and a buffer that reaches a graph output may not be in the arena.
TEST(BufferPlanner, CheckRejectsCollidingAndOutputBuffers) {
  const char* colliding = R"(graph bad {
  group dp = [0, 1]
  input %x : f32[16]
  input %y : f32[16]
  %a = all_gather_into_tensor(%x) {group = dp, arena_offset = 0} : f32[32]
  %b = all_gather_into_tensor(%y) {group = dp, arena_offset = 64} : f32[32]
  %a_w = wait_tensor(%a) : f32[32]
  %b_w = wait_tensor(%b) : f32[32]
  %c = add(%a_w, %b_w) : f32[32]
  return %c
}
)";
  ir::Graph g = ir::parse(colliding);
  EXPECT_EQ(error_text([&] { check_comm_buffer_plan(g); }),
            "arena buffers %a (128 bytes at offset 0) and %b (128 bytes at offset 64) share bytes while both are live");
  const char* output = R"(graph out {
  group dp = [0, 1]
  input %x : f32[16]
  %a = all_gather_into_tensor(%x) {group = dp, arena_offset = 0} : f32[32]
  %a_w = wait_tensor(%a) : f32[32]
  %v = view(%a_w) {shape = [4, 8]} : f32[4, 8]
  return %v
}
)";
  ir::Graph h = ir::parse(output);
  EXPECT_EQ(error_text([&] { check_comm_buffer_plan(h); }),
            "%a has arena_offset 0 but aliases a graph output (the arena is reused by the next run)");
  // The planner itself leaves such a buffer out.
  EXPECT_TRUE(plan_comm_buffers(h).buffers.empty());
}

TEST(BufferPlanner, ArenaOffsetMustBeAligned) {
  const char* text = R"(graph bad {
  group dp = [0, 1]
  input %x : f32[16]
  %a = all_gather_into_tensor(%x) {group = dp, arena_offset = 100} : f32[32]
  %a_w = wait_tensor(%a) : f32[32]
  return %a_w
}
)";
  EXPECT_NE(error_text([&] { ir::parse(text); })
                .find("all_gather_into_tensor arena_offset must be -1 or a non-negative multiple of 64, got 100"),
            std::string::npos);
}

// Programs of uneven shards get one offset per buffer, sized for the largest; programs whose comm
// buffers do not correspond keep their own plans.
TEST(BufferPlanner, SymmetricPlanSharesOffsetsAcrossUnevenPrograms) {
  auto program = [](int rows) {
    return ir::parse(fmt::format(R"(graph p {{
  group dp = [0, 1]
  input %x : f32[{0}, 8]
  input %y : f32[8]
  %a = all_gather_into_tensor(%x) {{group = dp}} : f32[{1}, 8]
  %b = all_gather_into_tensor(%y) {{group = dp}} : f32[16]
  %a_w = wait_tensor(%a) : f32[{1}, 8]
  %b_w = wait_tensor(%b) : f32[16]
  %s = sum(%a_w) : f32[]
  %c = mul(%b_w, %s) : f32[16]
  return %c
}}
)",
                                 rows, 2 * rows));
  };
  ir::Graph p0 = program(3), p1 = program(2);
  EXPECT_NE(plan_comm_buffers(p0).buffers[1].offset, plan_comm_buffers(p1).buffers[1].offset);
  std::vector<ir::Graph*> both = {&p0, &p1};
  const std::optional<size_t> total = plan_symmetric_comm_buffers(both);
  ASSERT_TRUE(total.has_value());
  EXPECT_EQ(check_comm_buffer_plan(p0), *total);
  EXPECT_TRUE(same_arena_layout({&p0, &p1}));
  EXPECT_EQ(p0.find("b")->producer->attr_int("arena_offset"), p1.find("b")->producer->attr_int("arena_offset"));
  EXPECT_EQ(p0.find("a")->producer->attr_int("arena_offset"), p1.find("a")->producer->attr_int("arena_offset"));

  ir::Graph other = ir::parse(R"(graph q {
  group dp = [0, 1]
  input %y : f32[8]
  %b = all_gather_into_tensor(%y) {group = dp} : f32[16]
  %b_w = wait_tensor(%b) : f32[16]
  %c = mul(%b_w, %b_w) : f32[16]
  return %c
}
)");
  // Programs whose buffers do not correspond keep their own plans, and the layouts differ.
  PassManager pm;
  pm.add(parse_pipeline("plan-comm-buffers"));
  pm.run(other);
  const std::string before = ir::print(other);
  std::vector<ir::Graph*> mismatched = {&p0, &other};
  EXPECT_FALSE(plan_symmetric_comm_buffers(mismatched).has_value());
  EXPECT_EQ(ir::print(other), before);
  EXPECT_FALSE(same_arena_layout({&p0, &other}));
}

}  // namespace
}  // namespace dt::passes
