// launch(): each rank runs its own program with its own bindings; collectives between the
// programs complete; a failing rank fails the launch without hanging.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "dtensor/core/error.h"
#include "dtensor/ir/builder.h"
#include "dtensor/ir/parser.h"
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

// before_run is called once per run, on rank 0 only, with no rank inside a run: each rank's node
// hook counts the runs it has started, and every count is the run index when the call comes.
TEST(Launcher, BeforeRunIsCalledBetweenRunsOnRankZero) {
  const int n = 3;
  ir::Graph g = sum_program(n, 4);
  std::vector<const ir::Graph*> programs(n, &g);
  std::vector<Bindings> bindings(n, Bindings{{"x", Tensor::ones({2, 4})}});
  std::vector<std::atomic<int>> nodes_seen(n);
  LaunchOptions options;
  options.repeat = 4;
  options.node_hook = [&](int rank) -> NodeHook {
    return [&, rank](const ir::Node&, size_t, Clock::time_point, Clock::time_point) { ++nodes_seen[size_t(rank)]; };
  };
  std::vector<int> calls;
  std::vector<std::vector<int>> seen_at_call;
  options.before_run = [&](int run) {
    calls.push_back(run);
    std::vector<int> now;
    for (auto& c : nodes_seen) now.push_back(c.load());
    seen_at_call.push_back(now);
  };
  launch(programs, bindings, options);
  ASSERT_EQ(calls, (std::vector<int>{0, 1, 2, 3}));
  const int nodes_per_run = seen_at_call[1][0];  // every rank runs the same program
  EXPECT_GT(nodes_per_run, 0);
  for (size_t run = 0; run < calls.size(); ++run)
    EXPECT_EQ(seen_at_call[run], std::vector<int>(n, int(run) * nodes_per_run)) << "run " << run;
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

// A 3-stage chain over group pp = [0, 2, 1] (the group index, not the global rank, names a peer):
// stage k receives from stage k-1, adds its input and sends on; the last stage sends the result
// back to the first (a "gradient"). Shapes are uneven and one message is empty; the text form
// is parsed, so the ops' printed spelling is what runs.
TEST(Launcher, SendAndRecvMoveTensorsBetweenStages) {
  const char* texts[3] = {
      R"(graph first {
  group pp = [0, 2, 1]
  input %x : f32[2, 3]
  input %e : f32[0]
  %s = send(%x) {group = pp, peer = 1, tag = 0} : f32[2, 3]
  %se = send(%e) {group = pp, peer = 1, tag = 1} : f32[0]
  %g = recv() {group = pp, peer = 2, tag = 2, shape = [3, 2], dtype = f32} : f32[3, 2]
  %sw = wait_tensor(%s) : f32[2, 3]
  %sew = wait_tensor(%se) : f32[0]
  %gw = wait_tensor(%g) : f32[3, 2]
  return %gw
})",
      R"(graph last {
  group pp = [0, 2, 1]
  input %x : f32[2, 3]
  %a = recv() {group = pp, peer = 1, tag = 0, shape = [2, 3], dtype = f32} : f32[2, 3]
  %aw = wait_tensor(%a) : f32[2, 3]
  %y = add(%aw, %x) : f32[2, 3]
  %v = reshape(%y) {shape = [3, 2]} : f32[3, 2]
  %s = send(%v) {group = pp, peer = 0, tag = 2} : f32[3, 2]
  %sw = wait_tensor(%s) : f32[3, 2]
  return %y
})",
      R"(graph middle {
  group pp = [0, 2, 1]
  input %x : f32[2, 3]
  %a = recv() {group = pp, peer = 0, tag = 0, shape = [2, 3], dtype = f32} : f32[2, 3]
  %e = recv() {group = pp, peer = 0, tag = 1, shape = [0], dtype = f32} : f32[0]
  %aw = wait_tensor(%a) : f32[2, 3]
  %ew = wait_tensor(%e) : f32[0]
  %y = add(%aw, %x) : f32[2, 3]
  %s = send(%y) {group = pp, peer = 2, tag = 0} : f32[2, 3]
  %sw = wait_tensor(%s) : f32[2, 3]
  return %ew
})"};
  std::vector<ir::Graph> gs;
  for (const char* t : texts) gs.push_back(ir::parse(t));
  std::vector<Bindings> bindings(3);
  for (int r = 0; r < 3; ++r) {
    std::vector<float> v(6);
    for (int i = 0; i < 6; ++i) v[size_t(i)] = float(10 * r + i);
    bindings[size_t(r)]["x"] = Tensor::from_vector<float>(v, {2, 3});
  }
  bindings[0]["e"] = Tensor::full({0}, 0.0);
  auto results = launch({&gs[0], &gs[1], &gs[2]}, bindings);
  // rank 0's x + rank 2's x + rank 1's x = 30 + 3i.
  std::vector<double> want;
  for (int i = 0; i < 6; ++i) want.push_back(30.0 + 3 * i);
  EXPECT_EQ(results[0].outputs[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(results[0].outputs[0].to_doubles(), want);
  EXPECT_EQ(results[1].outputs[0].to_doubles(), want);
  EXPECT_EQ(results[2].outputs[0].numel(), 0);  // rank 2 is the middle stage
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
