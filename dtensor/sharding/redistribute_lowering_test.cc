// The partitioner's lowering of redistribution plans into IR against the eager executor: for a
// fixed-seed sample of placement pairs on meshes 2x2, 4x2 and 2x2x2 (shapes even, uneven and
// smaller than the mesh), each rank lowers the plan into a program, runs it on the threads
// backend, and must produce exactly the executor's local tensor (the same collectives on the same
// data, so the same bits). The planner's flattened steps and its zero-fills into partial
// placements, which only some plans use, are counted so the test fails if the sample stops
// reaching them.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <mutex>
#include <random>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/core/rng.h"
#include "dtensor/eager/dtensor.h"
#include "dtensor/ir/verifier.h"
#include "dtensor/redistribute/executor.h"
#include "dtensor/redistribute/placement_matrix_test_util.h"
#include "dtensor/redistribute/planner.h"
#include "dtensor/runtime/interpreter.h"
#include "dtensor/sharding/redistribute_lowering.h"

namespace dt::sharding {
namespace {

struct Case {
  Placements src, dst;
  Shape shape;
};

// Returns rank `rank`'s program moving input `x` (its local shard under plan.src) to plan.dst.
ir::Graph lowered_program(const RedistributePlan& plan, const DeviceMesh& mesh, int rank,
                          const std::vector<std::string>& names) {
  ir::Graph g("redistribute");
  for (int64_t m = 0; m < mesh.ndim(); ++m)
    if (mesh.size(m) > 1) g.add_group(names[size_t(m)], mesh.group_ranks(m, rank));
  const std::vector<int64_t> coord = *mesh.coordinate(rank);
  ir::Value* x = g.add_input("x", {plan.dtype, local_shape_at(plan.mesh_shape, plan.src, plan.shape, coord)});
  LoweringContext ctx{g, nullptr, mesh, coord, names};
  g.set_outputs({lower_redistribution(ctx, x, plan)});
  ir::verify(g);
  return g;
}

struct Reached {
  int flattened = 0, zero = 0;
};

void run_cases(const Shape& mesh_shape, const std::vector<Case>& cases, Reached& reached) {
  DeviceMesh mesh(mesh_shape);
  const int n = int(mesh.size());
  std::vector<std::string> names;
  for (int64_t m = 0; m < mesh.ndim(); ++m) names.push_back(fmt::format("m{}", m));
  RedistributePlanner planner;
  std::vector<std::string> failures;
  std::mutex mu;
  for (const Case& c : cases) {
    auto plan = planner.plan(mesh_shape, c.src, c.dst, c.shape, DType::f32);
    for (const RedistributeStep& s : plan->steps) {
      reached.flattened += s.flattened();
      reached.zero += s.kind == StepKind::zero;
    }
    std::vector<ir::Graph> programs;
    for (int r = 0; r < n; ++r) programs.push_back(lowered_program(*plan, mesh, r, names));
    Generator gen(uint64_t(c.shape[0] * 131 + c.shape[1]));
    const Tensor full = rand(c.shape, gen, DType::f32, -1, 1);
    run_ranks(n, [&](ProcessGroup& world) {
      auto groups = MeshGroups::create(world, mesh);
      const int r = groups->global_rank();
      const Tensor local = distribute_tensor(full, groups, c.src).to_local();
      const Tensor want = execute_plan(*plan, local, *groups);
      runtime::Interpreter interp(programs[size_t(r)]);
      const Tensor got = interp.run({{"x", local}}, runtime::make_groups(programs[size_t(r)], world))[0];
      DiffReport d = compare(got, want, 0, 0);
      if (!d.shapes_match || d.mismatches != 0) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(placements_str(c.src) + " -> " + placements_str(c.dst) + " " + shape_str(c.shape) +
                           " on " + mesh.str() + " rank " + std::to_string(r) + ": max_abs_diff " +
                           std::to_string(d.max_abs_diff));
      }
    });
  }
  for (const std::string& f : failures) ADD_FAILURE() << f;
}

TEST(RedistributeLowering, EqualsTheExecutorOnASampleOfPlacementPairs) {
  Reached reached;
  for (const Shape& mesh_shape : {Shape{2, 2}, Shape{4, 2}, Shape{2, 2, 2}}) {
    std::mt19937 rng(uint32_t(17 + mesh_shape.size() * 7 + mesh_shape[0]));  // fixed seed per mesh
    const int64_t mesh_n = numel(mesh_shape);
    const std::vector<Shape> shapes = {{2 * mesh_n, 8}, {mesh_n + 3, 5}, {3, mesh_n + 1}};
    int64_t per = 1;
    for (size_t i = 0; i < mesh_shape.size(); ++i) per *= int64_t(test::kChoices.size());
    std::vector<Case> cases;
    // The pairs the flattened steps are for, then a random sample of the rest.
    cases.push_back({parse_placements(mesh_shape.size() == 2 ? "P(sum),P(sum)" : "P(sum),R,P(sum)"),
                     parse_placements(mesh_shape.size() == 2 ? "R,R" : "R,R,R"), shapes[0]});
    cases.push_back({parse_placements(mesh_shape.size() == 2 ? "S(0),S(0)" : "S(0),S(0),S(0)"),
                     parse_placements(mesh_shape.size() == 2 ? "R,R" : "R,R,R"), shapes[0]});
    while (cases.size() < 40) {
      Placements a = test::nth(int64_t(rng() % uint64_t(per)), mesh_shape.size());
      Placements b = test::nth(int64_t(rng() % uint64_t(per)), mesh_shape.size());
      if (!test::valid(a, a.size()) || !test::valid(b, b.size()) || test::refused_pair(a, b)) continue;
      cases.push_back({a, b, shapes[rng() % shapes.size()]});
    }
    run_cases(mesh_shape, cases, reached);
  }
  EXPECT_GT(reached.flattened, 0);
  EXPECT_GT(reached.zero, 0);
}

}  // namespace
}  // namespace dt::sharding
