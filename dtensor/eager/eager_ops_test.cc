// Eager DTensor ops dispatch through the sharding rules: placements follow the rules (colwise
// linear -> S(-1), rowwise -> P(sum)), inputs are redistributed when needed, and every result's
// full tensor equals the dense op.
#include <gtest/gtest.h>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/core/rng.h"
#include "dtensor/eager/eager.h"  // the one include of the eager API (eager ops come through it)

namespace dt::eager {
namespace {

TEST(EagerOps, LinearColwiseThenRowwiseMatchesDense) {
  Generator gen(5);
  Tensor x = rand({3, 5}, gen), w1 = rand({7, 5}, gen), b1 = rand({7}, gen), w2 = rand({5, 7}, gen), b2 = rand({5}, gen);
  Tensor h = dt::relu(dt::linear(x, w1, b1));
  Tensor expected = dt::add(x, dt::linear(h, w2, b2));
  run_ranks(2, [&](ProcessGroup& world) {
    auto groups = MeshGroups::create(world, DeviceMesh({2}));
    DTensor dx = distribute_tensor(x, groups, {Placement::replicate()});
    DTensor dw1 = distribute_tensor(w1, groups, {Placement::shard(0)});
    DTensor db1 = distribute_tensor(b1, groups, {Placement::shard(0)});
    DTensor dw2 = distribute_tensor(w2, groups, {Placement::shard(1)});
    DTensor db2 = distribute_tensor(b2, groups, {Placement::replicate()});
    DTensor dh = relu(linear(dx, dw1, db1));
    EXPECT_EQ(placements_str(dh.placements()), "S(1)");
    EXPECT_EQ(dh.to_local().shape(), (Shape{3, world.rank() == 0 ? 4 : 3}));
    DTensor dy = linear(dh, dw2, db2);
    EXPECT_EQ(placements_str(dy.placements()), "P(sum)");
    DTensor out = add(dx, dy);  // the partial is reduced before the residual add
    EXPECT_EQ(placements_str(out.placements()), "R");
    EXPECT_TRUE(allclose(out.full_tensor(), expected, 1e-5, 1e-6));
  });
}

TEST(EagerOps, MatmulAndSoftmaxRedistributeTheirInputs) {
  Generator gen(6);
  Tensor a = rand({5, 3}, gen), b = rand({3, 4}, gen);
  Tensor expected = dt::softmax(dt::matmul(a, b), 1);
  run_ranks(4, [&](ProcessGroup& world) {
    auto groups = MeshGroups::create(world, DeviceMesh({2, 2}));
    DTensor da = distribute_tensor(a, groups, {Placement::shard(1), Placement::shard(0)});
    DTensor db = distribute_tensor(b, groups, {Placement::replicate(), Placement::shard(1)});
    DTensor c = matmul(da, db);
    DTensor sm = softmax(c, 1);  // needs dim 1 whole
    for (const Placement& p : sm.placements()) EXPECT_FALSE(p.is_shard(1));
    EXPECT_TRUE(allclose(sm.full_tensor(), expected, 1e-5, 1e-6));
    EXPECT_TRUE(allclose(sum(c).full_tensor(), dt::sum(dt::matmul(a, b)), 1e-5, 1e-5));
  });
}

}  // namespace
}  // namespace dt::eager
