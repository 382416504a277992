#include "dtensor/eager/comm_tensor.h"

#include <gtest/gtest.h>

#include <atomic>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/ir/printer.h"
#include "dtensor/ir/verifier.h"

namespace dt::eager {
namespace {

// A Work that counts waits, to check exactly when a CommTensor waits.
struct CountingWork : Work {
  int waits = 0;
  void wait() override { ++waits; }
  void wait(Duration) override { ++waits; }
  bool is_completed() override { return waits > 0; }
};

TEST(CommTensor, FirstReaderWaitsExactlyOnce) {
  auto work = std::make_shared<CountingWork>();
  CommTensor ct(Tensor::ones({3}), work);
  EXPECT_TRUE(ct.pending());
  EXPECT_EQ(work->waits, 0);  // issuing returns at once
  Tensor y = dt::add(ct, Tensor::ones({3}));  // the conversion to const Tensor& waits
  EXPECT_EQ(work->waits, 1);
  EXPECT_FALSE(ct.pending());
  Tensor z = dt::add(ct, y);
  EXPECT_EQ(work->waits, 1);  // later readers do not wait again
  EXPECT_EQ(z.to_doubles(), (std::vector<double>{3, 3, 3}));
}

TEST(CommTensor, EagerCollectivesOnFourRanks) {
  std::atomic<int> bad{0};
  run_ranks(4, [&](ProcessGroup& pg) {
    const double me = pg.rank() + 1;
    CommTensor ar = all_reduce_(pg, Tensor::full({2, 3}, me));
    CommTensor ag = all_gather(pg, Tensor::full({1, 2}, me));
    CommTensor rs = reduce_scatter(pg, Tensor::full({8}, me));
    // Compute between issue and first read overlaps the collectives.
    Tensor local = dt::mul(Tensor::full({2, 3}, me), Tensor::full({2, 3}, 2.0));
    Tensor sum = dt::add(ar, local);
    if (sum.to_doubles() != std::vector<double>(6, 10 + 2 * me)) ++bad;
    if (ag.wait().to_doubles() != (std::vector<double>{1, 1, 2, 2, 3, 3, 4, 4})) ++bad;
    if (rs.wait().to_doubles() != std::vector<double>(2, 10)) ++bad;
  });
  EXPECT_EQ(bad.load(), 0);
}

TEST(CommTensor, TracingPutsTheWaitRightBeforeTheFirstConsumer) {
  ir::Graph g("traced");
  ir::Builder b(g);
  b.group("tp", {0, 1});
  ir::Value* x = b.input("x", DType::f32, {4});
  ir::Value* y = b.input("y", DType::f32, {4});
  CommTensor ar = all_reduce_(b, x, "tp");
  CommTensor ag = all_gather(b, y, "tp");
  ir::Value* h = b.relu(y);  // independent compute: recorded before any wait
  ir::Value* s = b.add(ar.value(), h);
  ir::Value* t = b.mul(ar.value(), s);  // second read: no second wait
  b.outputs({t, ag.value()});
  ir::verify(g);
  std::vector<std::string> ops;
  for (const auto& n : g.nodes()) ops.emplace_back(ir::op_name(n->op));
  EXPECT_EQ(ops, (std::vector<std::string>{"all_reduce", "all_gather_into_tensor", "relu", "wait_tensor", "add", "mul",
                                           "wait_tensor"}))
      << ir::print(g);
}

}  // namespace
}  // namespace dt::eager
