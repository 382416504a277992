// The eager DTensor API on the threads backend.
#include "dtensor/eager/dtensor.h"

#include <gtest/gtest.h>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/core/error.h"
#include "dtensor/eager/plan_check.h"
#include "tests/support/run_on_mesh.h"

namespace dt {
namespace {

using test::MeshGroupsPtr;
using test::run_on_mesh;

TEST(DTensor, DistributeThenFullTensorRoundTrips) {
  DeviceMesh mesh({2, 2});
  Tensor full = exact_random({5, 3}, DType::f32, 11);
  for (const char* p : {"S(0),S(1)", "S(0),S(0)", "R,S(1)", "P(sum),S(0)", "P(max),R", "P(avg),P(sum)", "R,R"}) {
    run_on_mesh(mesh, [&](const MeshGroupsPtr& groups) {
      DTensor x = distribute_tensor(full, groups, parse_placements(p));
      EXPECT_EQ(x.to_local().shape(), x.spec().local_shape(groups->global_rank()));
      EXPECT_EQ(x.full_tensor().to_doubles(), full.to_doubles()) << p;
    });
  }
}

TEST(DTensor, PartialSumKeepsTheValueOnGroupIndexZero) {
  DeviceMesh mesh({2, 2});
  Tensor full = exact_random({4, 4}, DType::i64, 12);
  run_on_mesh(mesh, [&](const MeshGroupsPtr& groups) {
    DTensor x = distribute_tensor(full, groups, parse_placements("P(sum),R"));
    bool holds = groups->coordinate()[0] == 0;
    EXPECT_EQ(x.to_local().to_doubles(), holds ? full.to_doubles() : Tensor::zeros({4, 4}, DType::i64).to_doubles());
    DTensor y = distribute_tensor(full, groups, parse_placements("P(max),R"));
    EXPECT_EQ(y.to_local().to_doubles(), full.to_doubles());
  });
}

TEST(DTensor, FromLocalChecksTheLocalShape) {
  DeviceMesh mesh({4});
  run_on_mesh(mesh, [&](const MeshGroupsPtr& groups) {
    int r = groups->global_rank();
    // 10 rows over 4 ranks: 3, 3, 3, 1.
    Tensor good = Tensor::zeros({r == 3 ? 1 : 3, 2});
    DTensor x = from_local(good, groups, parse_placements("S(0)"), {10, 2});
    EXPECT_EQ(x.shape(), (Shape{10, 2}));
    EXPECT_TRUE(x.to_local().shares_storage_with(good));
    try {
      from_local(Tensor::zeros({3, 2}), groups, parse_placements("S(0)"), {10, 2});
      EXPECT_NE(r, 3) << "rank 3 must reject a [3, 2] shard";
    } catch (const ShapeError& e) {
      EXPECT_EQ(r, 3);
      EXPECT_NE(std::string(e.what()).find("gives [1, 2]"), std::string::npos) << e.what();
    }
    // Cross-rank: one rank is wrong, every rank raises.
    Tensor local = Tensor::zeros({r == 1 ? 2 : (r == 3 ? 1 : 3), 2});
    EXPECT_THROW(from_local(local, groups, parse_placements("S(0)"), {10, 2}, /*check_cross_rank=*/true), ShapeError);
    // Cross-rank: ranks disagree on the global shape.
    Shape global = r == 2 ? Shape{12, 2} : Shape{10, 2};
    Tensor l2 = Tensor::zeros(DTensorSpec(mesh, parse_placements("S(0)"), global, DType::f32).local_shape(r));
    EXPECT_THROW(from_local(l2, groups, parse_placements("S(0)"), global, /*check_cross_rank=*/true), ValueError);
    EXPECT_NO_THROW(from_local(good, groups, parse_placements("S(0)"), {10, 2}, /*check_cross_rank=*/true));
  });
}

TEST(DTensor, RedistributeIsANoOpForTheSamePlacements) {
  DeviceMesh mesh({2});
  Tensor full = exact_random({4, 4}, DType::f32, 13);
  run_on_mesh(mesh, [&](const MeshGroupsPtr& groups) {
    DTensor x = distribute_tensor(full, groups, parse_placements("S(1)"));
    DTensor y = x.redistribute({Placement::shard(-1)});
    EXPECT_TRUE(y.to_local().shares_storage_with(x.to_local()));
    EXPECT_THROW(x.redistribute(DeviceMesh({2}, {1, 0}), parse_placements("R")), ValueError);
    EXPECT_THROW(x.redistribute(parse_placements("S(2)")), DimError);
  });
}

}  // namespace
}  // namespace dt
