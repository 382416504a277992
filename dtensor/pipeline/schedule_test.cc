// Pipeline schedules: PyTorch's orders, the bubble on the unit-cost timeline against theory, and
// every stage's program as IR (send/recv/wait over per-link groups) proven deadlock-free and run on
// the threads backend for p = 2, 3, 4 stages and m = 1, 2, 4, 8 micro-batches.
#include "dtensor/pipeline/schedule.h"

#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "dtensor/core/error.h"
#include "dtensor/ir/builder.h"
#include "dtensor/passes/p2p_order.h"
#include "dtensor/runtime/launcher.h"

namespace dt::pipeline {
namespace {

std::string order_str(const std::vector<Action>& actions) {
  std::string s;
  for (const Action& a : actions) s += (s.empty() ? "" : " ") + std::string(a.forward ? "F" : "B") + std::to_string(a.microbatch);
  return s;
}

TEST(PipelineSchedule, OrdersArePyTorchs) {
  EXPECT_EQ(order_str(stage_actions(Schedule::gpipe, 2, 1, 3)), "F0 F1 F2 B0 B1 B2");
  EXPECT_EQ(order_str(stage_actions(Schedule::one_f_one_b, 2, 0, 3)), "F0 F1 B0 F2 B1 B2");
  EXPECT_EQ(order_str(stage_actions(Schedule::one_f_one_b, 2, 1, 3)), "F0 B0 F1 B1 F2 B2");
  EXPECT_EQ(order_str(stage_actions(Schedule::one_f_one_b, 4, 0, 2)), "F0 F1 B0 B1");
  EXPECT_EQ(order_str(stage_actions(Schedule::one_f_one_b, 4, 1, 8)),
            "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  EXPECT_EQ(parse_schedule("1f1b"), Schedule::one_f_one_b);
  EXPECT_THROW(parse_schedule("zb"), ValueError);
  EXPECT_THROW(stage_actions(Schedule::gpipe, 2, 2, 1), ValueError);
  EXPECT_THROW(stage_actions(Schedule::gpipe, 2, 0, 0), ValueError);
  EXPECT_THROW(stage_actions(Schedule::gpipe, 0, 0, 1), ValueError);
}

TEST(PipelineSchedule, BubbleMatchesTheory) {
  for (Schedule sch : {Schedule::gpipe, Schedule::one_f_one_b})
    for (int p : {1, 2, 3, 4})
      for (int m : {1, 2, 4, 8})
        for (double bc : {1.0, 2.0}) {  // backward as costly as the forward, or twice
          Timeline t = simulate(sch, p, m, 1, bc);
          for (int s = 0; s < p; ++s)
            EXPECT_NEAR(t.bubble(s), theoretical_bubble(p, m), 1e-12)
                << schedule_name(sch) << " p " << p << " m " << m << " stage " << s;
        }
}

// Builds stage s's program: micro-batch k enters stage 0 as input mb<k> (= k+1), each stage's
// forward adds its input %x (= s+1), the last stage's backward starts from its forward's result,
// each backward multiplies by %x; stage 0 returns its backwards' results in micro-batch order.
ir::Graph stage_graph(Schedule sch, int p, int s, int m) {
  ir::Graph g("stage" + std::to_string(s));
  ir::Builder b(g);
  if (s > 0) b.group("link" + std::to_string(s - 1), {s - 1, s});
  if (s < p - 1) b.group("link" + std::to_string(s), {s, s + 1});
  ir::Value* x = b.input("x", DType::f32, {4});
  std::vector<ir::Value*> mbs;
  if (s == 0)
    for (int k = 0; k < m; ++k) mbs.push_back(b.input("mb" + std::to_string(k), DType::f32, {4}));
  using Key = std::tuple<bool, int, int, int>;
  auto key = [](const Message& msg) { return Key{msg.activation, msg.microbatch, msg.from, msg.to}; };
  std::map<Key, ir::Value*> posted, arrived;
  std::vector<ir::Value*> forward(static_cast<size_t>(m)), backward(static_cast<size_t>(m)), outputs;
  auto group_of = [](const Message& msg) { return "link" + std::to_string(msg.link()); };
  auto tag_of = [](const Message& msg) { return int64_t(2 * msg.microbatch + (msg.activation ? 0 : 1)); };
  for (const Step& step : stage_program(sch, p, s, m)) {
    const Message& msg = step.message;
    switch (step.kind) {
      case Step::post_recv:
        posted[key(msg)] = b.recv(group_of(msg), msg.from > msg.to ? 1 : 0, DType::f32, {4}, tag_of(msg));
        break;
      case Step::post_send: {
        ir::Value* v = msg.activation ? forward[size_t(msg.microbatch)] : backward[size_t(msg.microbatch)];
        posted[key(msg)] = b.send(v, group_of(msg), msg.to > msg.from ? 1 : 0, tag_of(msg));
        break;
      }
      case Step::wait:
        arrived[key(msg)] = b.wait_tensor(posted.at(key(msg)));
        break;
      case Step::run: {
        const int k = step.action.microbatch;
        if (step.action.forward) {
          ir::Value* in = s == 0 ? mbs[size_t(k)] : arrived.at(Key{true, k, s - 1, s});
          forward[size_t(k)] = b.add(in, x);
        } else {
          ir::Value* in = s == p - 1 ? forward[size_t(k)] : arrived.at(Key{false, k, s + 1, s});
          backward[size_t(k)] = b.mul(in, x);
        }
        break;
      }
    }
  }
  if (s == 0) outputs = backward;
  else outputs.push_back(x);
  b.outputs(outputs);
  return g;
}

TEST(PipelineSchedule, StageProgramsAreDeadlockFreeAndRunOnThreads) {
  for (Schedule sch : {Schedule::gpipe, Schedule::one_f_one_b})
    for (int p : {2, 3, 4})
      for (int m : {1, 2, 4, 8}) {
        SCOPED_TRACE(std::string(schedule_name(sch)) + " p " + std::to_string(p) + " m " + std::to_string(m));
        std::vector<ir::Graph> graphs;
        std::vector<const ir::Graph*> view;
        std::vector<int> ranks;
        std::vector<runtime::Bindings> bindings(static_cast<size_t>(p));
        for (int s = 0; s < p; ++s) graphs.push_back(stage_graph(sch, p, s, m));
        for (int s = 0; s < p; ++s) {
          view.push_back(&graphs[size_t(s)]);
          ranks.push_back(s);
          bindings[size_t(s)]["x"] = Tensor::full({4}, double(s + 1));
        }
        for (int k = 0; k < m; ++k) bindings[0]["mb" + std::to_string(k)] = Tensor::full({4}, double(k + 1));
        ASSERT_NO_THROW(passes::check_p2p_order(view, ranks, "in the test"));
        std::vector<runtime::RankResult> results = runtime::launch(view, bindings);
        double factorial = 1;
        for (int s = 1; s <= p; ++s) factorial *= s;
        ASSERT_EQ(results[0].outputs.size(), size_t(m));
        for (int k = 0; k < m; ++k)
          EXPECT_EQ(results[0].outputs[size_t(k)].to_doubles(),
                    std::vector<double>(4, (k + 1 + p * (p + 1) / 2.0) * factorial))
              << "micro-batch " << k;
      }
}

}  // namespace
}  // namespace dt::pipeline
