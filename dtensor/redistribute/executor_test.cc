// The redistribution matrix of issue 4, executed on the threads backend: meshes [1], [3], [4],
// [2,2], [2,4], [2,2,2] × every source × target in {R, S(0), S(1), P(sum), P(avg), P(max),
// P(min)} per mesh dim × shapes k·n, k·n+1, k·n+2, smaller than the mesh (empty shards) and
// size 0 × dtypes f32, bf16, i64. Each result is compared with the reference by check_locals
// (for Partial targets: the reduction of the locals), invalid pairs must raise ValueError on
// every rank.
//
// Sampling: the full product runs on [1], [3], [4] (735 cases each). On [2,2] every placement
// pair runs with every shape, the dtype rotating over the three (12,005 cases; the full
// 36,015 take ~45 s under ASan). On [2,4] and [2,2,2] (2,401 and 117,649 placement pairs) a
// fixed-seed random sample of 800 cases each (shape and dtype drawn too).
#include "dtensor/redistribute/executor.h"

#include <gtest/gtest.h>

#include <mutex>
#include <random>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/core/error.h"
#include "dtensor/eager/dtensor.h"
#include "dtensor/eager/plan_check.h"
#include "dtensor/redistribute/placement_matrix_test_util.h"
#include "dtensor/redistribute/planner.h"
#include "tests/support/run_on_mesh.h"

namespace dt {
namespace {

using namespace test;

const std::vector<DType> kDTypes = {DType::f32, DType::bf16, DType::i64};

// Shapes k·n, k·n+1, k·n+2 (on both dims), smaller than the mesh, and empty.
std::vector<Shape> shapes_for(int64_t n) {
  return {{2 * n, n}, {2 * n + 1, n + 1}, {n + 2, 2 * n + 2}, {n - 1, 2}, {0, 3}};
}

struct Case {
  Placements src, dst;
  Shape shape;
  DType dtype;
};

// Runs the cases on one mesh in batches; rank 0 checks each batch between two barriers.
void run_matrix(const Shape& mesh_shape, const std::vector<Case>& cases) {
  DeviceMesh mesh(mesh_shape);
  const int n = int(mesh.size());
  constexpr size_t kBatch = 64;
  std::vector<std::vector<Tensor>> outs(kBatch, std::vector<Tensor>(size_t(n)));
  std::vector<std::vector<int>> threw(kBatch, std::vector<int>(size_t(n)));
  std::vector<std::string> failures;
  RedistributePlanner planner;
  run_ranks(n, [&](ProcessGroup& world) {
    auto groups = MeshGroups::create(world, mesh);
    const size_t r = size_t(groups->global_rank());
    for (size_t b0 = 0; b0 < cases.size(); b0 += kBatch) {
      const size_t b1 = std::min(cases.size(), b0 + kBatch);
      for (size_t k = b0; k < b1; ++k) {
        const Case& c = cases[k];
        Tensor full = exact_random(c.shape, c.dtype, k);
        outs[k - b0][r] = Tensor();
        threw[k - b0][r] = 0;
        try {
          DTensor x = distribute_tensor(full, groups, c.src);
          outs[k - b0][r] = x.redistribute(c.dst, planner).to_local();
        } catch (const ValueError&) {
          threw[k - b0][r] = 1;
        }
      }
      world.barrier()->wait();
      if (r == 0) {
        for (size_t k = b0; k < b1 && failures.size() < 20; ++k) {
          const Case& c = cases[k];
          std::string what = placements_str(c.src) + " -> " + placements_str(c.dst) + " " + shape_str(c.shape) +
                             " " + std::string(dtype_name(c.dtype)) + " on " + mesh.str() + ": ";
          bool expect_error = !valid(c.src, c.src.size()) || !valid(c.dst, c.dst.size()) || refused_pair(c.src, c.dst);
          for (int q = 0; q < n; ++q)
            if (threw[k - b0][size_t(q)] != int(expect_error))
              failures.push_back(what + (expect_error ? "no error on rank " : "unexpected error on rank ") + std::to_string(q));
          if (expect_error || threw[k - b0][0]) continue;
          std::string err = check_locals(DTensorSpec(mesh, c.dst, c.shape, c.dtype), outs[k - b0],
                                         exact_random(c.shape, c.dtype, k));
          if (!err.empty()) failures.push_back(what + err);
        }
      }
      world.barrier()->wait();
    }
  });
  for (const std::string& f : failures) ADD_FAILURE() << f;
}

std::vector<Case> full_product(const Shape& mesh_shape, bool rotate_dtypes = false) {
  std::vector<Case> cases;
  int64_t per = 1;
  for (size_t i = 0; i < mesh_shape.size(); ++i) per *= int64_t(kChoices.size());
  for (int64_t i = 0; i < per; ++i)
    for (int64_t j = 0; j < per; ++j)
      for (const Shape& s : shapes_for(numel(mesh_shape))) {
        const size_t combo = size_t(i + j) + size_t(s[0]);  // rotates the dtype over pairs and shapes
        for (size_t d = 0; d < kDTypes.size(); ++d) {
          if (rotate_dtypes && d != combo % kDTypes.size()) continue;
          cases.push_back({nth(i, mesh_shape.size()), nth(j, mesh_shape.size()), s, kDTypes[d]});
        }
      }
  return cases;
}

std::vector<Case> sample(const Shape& mesh_shape, size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  int64_t per = 1;
  for (size_t i = 0; i < mesh_shape.size(); ++i) per *= int64_t(kChoices.size());
  std::vector<Shape> shapes = shapes_for(numel(mesh_shape));
  std::vector<Case> cases;
  for (size_t k = 0; k < count; ++k)
    cases.push_back({nth(int64_t(rng() % uint64_t(per)), mesh_shape.size()),
                     nth(int64_t(rng() % uint64_t(per)), mesh_shape.size()), shapes[rng() % shapes.size()],
                     kDTypes[rng() % kDTypes.size()]});
  return cases;
}

TEST(ExecutorMatrix, Mesh1) { run_matrix({1}, full_product({1})); }
TEST(ExecutorMatrix, Mesh3) { run_matrix({3}, full_product({3})); }
TEST(ExecutorMatrix, Mesh4) { run_matrix({4}, full_product({4})); }
TEST(ExecutorMatrix, Mesh2x2) {
  std::vector<Case> cases = full_product({2, 2}, /*rotate_dtypes=*/true);
  EXPECT_EQ(cases.size(), 2401u * 5u);
  run_matrix({2, 2}, cases);
}
TEST(ExecutorMatrix, Mesh2x4Sampled) { run_matrix({2, 4}, sample({2, 4}, 800, 24)); }
TEST(ExecutorMatrix, Mesh2x2x2Sampled) { run_matrix({2, 2, 2}, sample({2, 2, 2}, 800, 222)); }

// Strided shards (FSDP over TP): every pair among layouts with SS, plain nested shards, gathers
// and partials on 2-d meshes, with even, uneven, smaller-than-mesh and empty dims.
TEST(ExecutorMatrix, StridedShards) {
  const std::vector<Placements> layouts = {
      parse_placements("SS(0),S(0)"), parse_placements("SS(1),S(1)"), parse_placements("SS(0),S(1)"),
      parse_placements("S(0),S(0)"),  parse_placements("R,S(0)"),     parse_placements("S(0),R"),
      parse_placements("R,R"),        parse_placements("P(sum),S(0)"), parse_placements("SS(0),R")};
  for (const Shape& mesh : {Shape{2, 2}, Shape{4, 2}, Shape{2, 3}}) {
    std::vector<Case> cases;
    for (const Placements& a : layouts)
      for (const Placements& b : layouts)
        for (const Shape& s : {Shape{16, 4}, Shape{10, 7}, Shape{3, 5}, Shape{0, 2}}) cases.push_back({a, b, s, DType::f32});
    run_matrix(mesh, cases);
  }
}

TEST(Planner, StridedGatherOverDpIsOneAllGather) {
  RedistributePlanner planner;
  auto plan = planner.plan({4, 2}, parse_placements("SS(0),S(0)"), parse_placements("R,S(0)"), {16, 8}, DType::f32);
  ASSERT_EQ(plan->steps.size(), 1u);
  EXPECT_EQ(plan->steps[0].kind, StepKind::all_gather);
  EXPECT_EQ(plan->steps[0].mesh_dim, 0);
  // Plain nested S(0),S(0) cannot gather mesh dim 0 alone: it needs more than one step.
  EXPECT_GT(planner.plan({4, 2}, parse_placements("S(0),S(0)"), parse_placements("R,S(0)"), {16, 8}, DType::f32)
                ->steps.size(),
            1u);
}

TEST(Executor, CheckLocalsDetectsWrongData) {
  DeviceMesh mesh({2});
  Tensor full = exact_random({4, 2}, DType::f32, 1);
  DTensorSpec shard(mesh, parse_placements("S(0)"), {4, 2}, DType::f32);
  std::vector<Tensor> locals = {full.narrow(0, 0, 2).clone(), full.narrow(0, 2, 2).clone()};
  EXPECT_EQ(check_locals(shard, locals, full), "");
  locals[1] = full.narrow(0, 0, 2).clone();
  EXPECT_NE(check_locals(shard, locals, full), "");
  DTensorSpec partial(mesh, parse_placements("P(sum)"), {4, 2}, DType::f32);
  std::vector<Tensor> halves = {full.clone(), Tensor::zeros({4, 2})};
  EXPECT_EQ(check_locals(partial, halves, full), "");
  halves[1] = full.clone();
  EXPECT_NE(check_locals(partial, halves, full), "");
  DTensorSpec repl(mesh, parse_placements("R"), {4, 2}, DType::f32);
  EXPECT_NE(check_locals(repl, {full.clone(), Tensor::zeros({4, 2})}, full), "");
}

TEST(Executor, VerifiesLargerUnevenCases) {
  RedistributePlanner planner;
  for (const char* src : {"S(0)", "S(1)", "P(sum)", "R"})
    for (const char* dst : {"S(0)", "S(1)", "R", "P(sum)"}) {
      auto plan = planner.plan({4}, parse_placements(src), parse_placements(dst), {203, 131}, DType::f32);
      EXPECT_EQ(verify_plan(*plan, 5), "") << src << " -> " << dst;
    }
  auto swap = planner.plan({2, 4}, parse_placements("S(0),S(1)"), parse_placements("S(1),S(0)"), {203, 131},
                           DType::bf16);
  EXPECT_EQ(verify_plan(*swap, 6), "");
  auto three = planner.plan({4}, parse_placements("S(2)"), parse_placements("S(0)"), {5, 3, 7}, DType::i64);
  EXPECT_EQ(verify_plan(*three, 7), "");
}

TEST(Executor, UsesGroupIndexNotGlobalRankOnPermutedMeshes) {
  DeviceMesh mesh({2, 2}, {0, 2, 1, 3});  // dim-1 groups [0,2] and [1,3]
  Tensor full = exact_random({9, 5}, DType::f32, 3);
  std::vector<Tensor> outs(4);
  run_on_mesh(mesh, [&](const MeshGroupsPtr& groups) {
    DTensor x = distribute_tensor(full, groups, parse_placements("S(0),S(1)"));
    outs[size_t(groups->global_rank())] = x.redistribute(parse_placements("S(1),S(0)")).to_local();
  });
  EXPECT_EQ(check_locals(DTensorSpec(mesh, parse_placements("S(1),S(0)"), {9, 5}, DType::f32), outs, full), "");
}

TEST(Executor, NeverModifiesOrAliasesTheInput) {
  DeviceMesh mesh({4});
  Tensor full = exact_random({8, 4}, DType::f32, 4);
  run_on_mesh(mesh, [&](const MeshGroupsPtr& groups) {
    DTensor x = distribute_tensor(full, groups, parse_placements("P(sum)"));
    std::vector<double> before = x.to_local().to_doubles();
    DTensor y = x.redistribute(parse_placements("R"));
    EXPECT_EQ(x.to_local().to_doubles(), before);
    EXPECT_FALSE(y.to_local().shares_storage_with(x.to_local()));
    DTensor r = distribute_tensor(full, groups, parse_placements("R"));
    DTensor s = r.redistribute(parse_placements("S(0)"));
    EXPECT_FALSE(s.to_local().shares_storage_with(r.to_local()));
    EXPECT_TRUE(s.to_local().is_contiguous());
  });
}

TEST(Executor, RejectsALocalOfTheWrongShape) {
  RedistributePlanner planner;
  auto plan = planner.plan({2}, parse_placements("S(0)"), parse_placements("R"), {4, 4}, DType::f32);
  run_ranks(2, [&](ProcessGroup& world) {
    auto groups = MeshGroups::create(world, DeviceMesh({2}));
    EXPECT_THROW(execute_plan(*plan, Tensor::zeros({3, 4}), *groups), ShapeError);
    EXPECT_THROW(execute_plan(*plan, Tensor::zeros({2, 4}, DType::i64), *groups), DTypeError);
  });
}

}  // namespace
}  // namespace dt
