// PyTorch's DTensor redistribution semantics of issue 27.9, ported from its tests (each test names
// the PyTorch test it answers): mixed partial ops on one tensor, Partial("prod"), and the
// reduce_scatter on a flattened mesh dim.
#include <gtest/gtest.h>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/eager/dtensor.h"
#include "dtensor/eager/plan_check.h"
#include "dtensor/redistribute/executor.h"
#include "dtensor/redistribute/planner.h"

namespace dt {
namespace {

// Runs plan(src -> dst) on every rank of `mesh` from the given locals; returns the results.
std::vector<Tensor> run_plan(const DeviceMesh& mesh, const RedistributePlan& plan, const std::vector<Tensor>& locals) {
  std::vector<Tensor> outs(size_t(mesh.size()));
  run_ranks(int(mesh.size()), [&](ProcessGroup& world) {
    auto groups = MeshGroups::create(world, mesh);
    outs[size_t(groups->global_rank())] = execute_plan(plan, locals[size_t(groups->global_rank())], *groups);
  });
  return outs;
}

// PyTorch: test_redistribute.py, test_ordered_redistribute_with_partial. On a 2x2x2 mesh, every
// choice of 3 placements from S(0), S(1), S(2), P(sum), P(min), R valid for the shape, each rank
// holding its own random local (DTensor.from_local: a generic partial, not a partition of a known
// value). Its value is the fixed-order reduction (the last mesh dim first, dtensor_spec.h), and
// redistributing it to R,R,R and to sharded layouts keeps that value. The mixed cases (P(sum) and
// P(min) together) are counted: the reduction order matters for them.
TEST(PyTorchSemantics, MixedPartialsRedistributeInTheirFixedOrder) {
  const DeviceMesh mesh(Shape{2, 2, 2});
  const std::vector<Placement> choice = {Placement::shard(0), Placement::shard(1), Placement::shard(2),
                                         Placement::partial(ReduceOp::sum), Placement::partial(ReduceOp::min),
                                         Placement::replicate()};
  int cases = 0, mixed = 0;
  uint64_t seed = 21;
  for (const Shape& shape : {Shape{16, 8}, Shape{17, 5}, Shape{13, 2, 13}}) {
    const int64_t rank = int64_t(shape.size());
    for (size_t a = 0; a < choice.size(); ++a)
      for (size_t b = a + 1; b < choice.size(); ++b)
        for (size_t c = b + 1; c < choice.size(); ++c) {
          const Placements src = {choice[a], choice[b], choice[c]};
          bool ok = true;
          for (const Placement& p : src) ok = ok && (!p.is_shard() || p.dim() < rank);
          if (!ok) continue;
          ++cases;
          const bool both = std::count(src.begin(), src.end(), Placement::partial(ReduceOp::sum)) &&
                            std::count(src.begin(), src.end(), Placement::partial(ReduceOp::min));
          mixed += both;
          const DTensorSpec spec(mesh, src, shape, DType::f64);
          std::vector<Tensor> locals;
          for (int r : mesh.ranks()) {  // replicas (ranks differing in R coordinates only) hold the same
            std::vector<int64_t> c = *mesh.coordinate(r);
            for (size_t m = 0; m < c.size(); ++m)
              if (src[m].is_replicate()) c[m] = 0;
            locals.push_back(exact_random(spec.local_shape_at(c), DType::f64, seed + uint64_t(mesh.rank_at(c))));
          }
          seed += 8;
          const Tensor value = Tensor::from_vector<double>(reduce_locals(spec, locals), shape);
          for (const Placements& dst : {Placements{Placement::replicate(), Placement::replicate(), Placement::replicate()},
                                        Placements{Placement::shard(0), Placement::replicate(), Placement::shard(1)},
                                        Placements{Placement::replicate(), Placement::shard(1), Placement::shard(0)}}) {
            const RedistributePlan plan = default_planner().plan_uncached(mesh.shape(), src, dst, shape, DType::f64);
            const std::string error =
                check_locals(DTensorSpec(mesh, dst, shape, DType::f64), run_plan(mesh, plan, locals), value);
            EXPECT_EQ(error, "") << placements_str(src) << " -> " << placements_str(dst) << " of " << shape_str(shape)
                                 << "\n" << plan.table();
          }
        }
  }
  std::printf("%d placement choices, %d with P(sum) and P(min) together\n", cases, mixed);
  EXPECT_EQ(cases, 10 + 10 + 20);
  EXPECT_EQ(mixed, 3 + 3 + 4);  // the third placement: a valid shard or R
}

// The order is fixed: P(sum),P(min) -> R,R takes mesh dim 1's min first (sum over mesh dim 0 of
// min over mesh dim 1), whichever order would be cheaper; the values tell the orders apart.
TEST(PyTorchSemantics, MixedPartialsReduceTheLastMeshDimFirst) {
  const DeviceMesh mesh(Shape{2, 2});
  const Placements src = {Placement::partial(ReduceOp::sum), Placement::partial(ReduceOp::min)};
  const RedistributePlan plan = default_planner().plan_uncached(mesh.shape(), src, {Placement(), Placement()}, {2},
                                                                DType::f64);
  ASSERT_EQ(plan.num_collectives(), 2);
  EXPECT_EQ(plan.steps[0].mesh_dim, 1);
  EXPECT_EQ(plan.steps[0].src, Placement::partial(ReduceOp::min));
  // Ranks (i, j) hold [10i + j, -j]: min over j gives [10i, -1]; the sum over i [10, -2]. Summing
  // first would give [min(1, 21), min(0, -2)] = [1, -2].
  std::vector<Tensor> locals;
  for (int r : mesh.ranks()) {
    const auto c = *mesh.coordinate(r);
    locals.push_back(Tensor::from_vector<double>({double(10 * c[0] + c[1]), double(-c[1])}, {2}));
  }
  EXPECT_EQ(reduce_locals(DTensorSpec(mesh, src, {2}, DType::f64), locals), (std::vector<double>{10, -2}));
  for (const Tensor& out : run_plan(mesh, plan, locals)) EXPECT_EQ(out.to_doubles(), (std::vector<double>{10, -2}));
  // Creating the mixed layout: mesh dim 0's sum before mesh dim 1's min, and the plan verifies.
  const RedistributePlan back = default_planner().plan_uncached(mesh.shape(), {Placement(), Placement()}, src, {6, 4},
                                                                DType::f32);
  EXPECT_EQ(verify_plan(back, 3), "") << back.table();
}

// Partial("prod"), which PyTorch's Partial takes like any c10d reduce op (ReduceOp.PRODUCT; its
// test_replicate_to_partial_different_reduce_ops checks R -> P(op) for each op): R -> P(prod)
// keeps the value on index 0 and 1 elsewhere, P(prod) -> R multiplies, P(prod) -> S reduce-scatters,
// on one and two mesh dims, mixed with P(sum) too.
TEST(PyTorchSemantics, PartialProd) {
  const Placement prod = Placement::partial(ReduceOp::prod);
  EXPECT_EQ(Placement::parse("P(prod)"), prod);
  EXPECT_EQ(prod.str(), "P(prod)");
  struct Case {
    Shape mesh;
    Placements src, dst;
  };
  const Placement R, S0 = Placement::shard(0), S1 = Placement::shard(1), sum = Placement::partial(ReduceOp::sum);
  for (const Case& c : {Case{{4}, {prod}, {R}}, Case{{4}, {R}, {prod}}, Case{{4}, {prod}, {S1}}, Case{{4}, {S0}, {prod}},
                        Case{{2, 2}, {prod, prod}, {R, R}}, Case{{2, 2}, {prod, S0}, {S1, R}},
                        Case{{2, 2}, {sum, prod}, {R, R}}, Case{{2, 2}, {R, R}, {prod, sum}}}) {
    const RedistributePlan plan = default_planner().plan_uncached(c.mesh, c.src, c.dst, {6, 4}, DType::f32);
    EXPECT_EQ(verify_plan(plan, 5), "") << plan.table();
  }
  // A generic P(prod) (each rank its own local) reduces to the product.
  const DeviceMesh mesh(Shape{4});
  std::vector<Tensor> locals;
  for (int r = 0; r < 4; ++r) locals.push_back(Tensor::from_vector<double>({double(r + 1), 2.0}, {2}));
  const RedistributePlan plan = default_planner().plan_uncached(mesh.shape(), {prod}, {R}, {2}, DType::f64);
  EXPECT_EQ(plan.collective_counts(), (std::map<std::string, int>{{"all_reduce", 1}}));
  for (const Tensor& out : run_plan(mesh, plan, locals)) EXPECT_EQ(out.to_doubles(), (std::vector<double>{24, 16}));
}

// PyTorch: FlattenedReductionIntegrationTest (test_merging_reductions) and the reduce_scatter
// case of its flattened-mesh optimisation: P(sum),P(sum) -> S(0),S(0) on 4x2 is one reduce_scatter
// over the flattened group of 8, half the bytes of the flattened all_reduce it was before.
TEST(PyTorchSemantics, FlattenedReduceScatter) {
  const Shape mesh = {4, 2}, shape = {16, 8};
  const Placement sum = Placement::partial(ReduceOp::sum), S0 = Placement::shard(0);
  const RedistributePlan rs = default_planner().plan_uncached(mesh, {sum, sum}, {S0, S0}, shape, DType::f32);
  ASSERT_EQ(rs.steps.size(), 1u) << rs.table();
  EXPECT_EQ(rs.steps[0].kind, StepKind::reduce_scatter);
  EXPECT_EQ(rs.steps[0].flat_dims, 3u);
  const RedistributePlan ar = default_planner().plan_uncached(mesh, {sum, sum}, {Placement(), Placement()}, shape, DType::f32);
  ASSERT_EQ(ar.steps.size(), 1u) << ar.table();
  EXPECT_EQ(2 * rs.total_bytes, ar.total_bytes);
  EXPECT_EQ(rs.total_bytes, 7 * 2 * 8 * 4);  // (N - 1) chunks of 2 rows
  EXPECT_EQ(verify_plan(rs, 7), "") << rs.table();
  // Not flattened where the pieces would not follow the nested split order or be even.
  const RedistributePlan uneven = default_planner().plan_uncached(mesh, {sum, sum}, {S0, S0}, {12, 8}, DType::f32);
  for (const RedistributeStep& s : uneven.steps) EXPECT_FALSE(s.flattened() && s.kind == StepKind::reduce_scatter);
  EXPECT_EQ(verify_plan(uneven, 7), "") << uneven.table();
  // Mixed ops are never reduced at once: P(sum),P(min) -> S(0),S(0) reduces mesh dim 1 first.
  const RedistributePlan mixed = default_planner().plan_uncached(mesh, {sum, Placement::partial(ReduceOp::min)},
                                                                 {S0, S0}, shape, DType::f32);
  EXPECT_EQ(verify_plan(mixed, 7), "") << mixed.table();
}

}  // namespace
}  // namespace dt
