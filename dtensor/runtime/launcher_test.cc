// launch(): each rank runs its own program with its own bindings; collectives between the
// programs complete; a failing rank fails the launch without hanging.
#include <gtest/gtest.h>

#include "dtensor/core/error.h"
#include "dtensor/ir/builder.h"
#include "dtensor/runtime/launcher.h"

namespace dt::runtime {
namespace {

// Returns a program computing all_reduce(relu(x)) over the group of all `n` ranks, x [2, cols].
ir::Graph sum_program(int n, int64_t cols) {
  ir::Graph g("sum");
  ir::Builder b(g);
  std::vector<int> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(r);
  b.group("tp", ranks);
  ir::Value* x = b.input("x", DType::f32, {2, cols});
  b.outputs({b.wait_tensor(b.all_reduce(b.relu(x), "tp"))});
  return g;
}

TEST(Launcher, RunsOneProgramPerRankWithItsBindings) {
  const int n = 3;
  ir::Graph g = sum_program(n, 4);
  std::vector<const ir::Graph*> programs(n, &g);
  std::vector<Bindings> bindings(n);
  for (int r = 0; r < n; ++r) bindings[size_t(r)]["x"] = Tensor::full({2, 4}, double(r + 1));
  LaunchOptions options;
  options.repeat = 2;
  auto results = launch(programs, bindings, options);
  ASSERT_EQ(results.size(), size_t(n));
  for (const RankResult& r : results) {
    ASSERT_EQ(r.outputs.size(), 1u);
    EXPECT_EQ(r.outputs[0].to_doubles(), std::vector<double>(8, 6.0));
    EXPECT_GT(r.stats.nodes, 0u);
  }
}

TEST(Launcher, DifferentProgramsPerRank) {
  // Programs differ per rank: rank 0 sends 1 element to each rank, rank 1 sends 2 (exact sizes).
  ir::Graph g0("a"), g1("b");
  for (int r = 0; r < 2; ++r) {
    ir::Graph& g = r == 0 ? g0 : g1;
    ir::Builder b(g);
    b.group("tp", {0, 1});
    const int64_t rows = r == 0 ? 1 : 2;
    ir::Value* x = b.input("x", DType::f32, {rows * 2});
    ir::Value* y = b.wait_tensor(b.all_to_all_single(x, "tp", {1, 2}, {rows, rows}));
    b.outputs({y});
  }
  std::vector<Bindings> bindings(2);
  bindings[0]["x"] = Tensor::from_vector<float>({1, 1}, {2});
  bindings[1]["x"] = Tensor::from_vector<float>({2, 3, 2, 3}, {4});
  auto results = launch({&g0, &g1}, bindings);
  EXPECT_EQ(results[0].outputs[0].to_doubles(), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(results[1].outputs[0].to_doubles(), (std::vector<double>{1, 2, 3}));
}

TEST(Launcher, RefusesMismatchedArguments) {
  ir::Graph g = sum_program(1, 2);
  EXPECT_THROW(launch({&g}, {}), ValueError);
  EXPECT_THROW(launch({}, {}), ValueError);
}

TEST(Launcher, AFailingRankFailsTheLaunch) {
  ir::Graph g = sum_program(2, 4);
  std::vector<Bindings> bindings(2);
  bindings[0]["x"] = Tensor::full({2, 4}, 1.0);  // rank 1 lacks its input
  LaunchOptions o;
  o.comm.timeout = Duration(2000);
  EXPECT_THROW(launch({&g, &g}, bindings, o), Error);
}

}  // namespace
}  // namespace dt::runtime
