// Pipeline schedules: PyTorch's orders, the bubble on the unit-cost timeline against theory, and
// every stage's program as IR (send/recv/wait over per-link groups) proven deadlock-free and run on
// the threads backend for p = 2, 3, 4 stages and m = 1, 2, 4, 8 micro-batches.
#include "dtensor/pipeline/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <tuple>

#include "dtensor/core/error.h"
#include "dtensor/ir/builder.h"
#include "dtensor/passes/p2p_order.h"
#include "dtensor/runtime/launcher.h"
#include "tests/support/error_text.h"

namespace dt::pipeline {
namespace {

using test::error_text;

std::string order_str(const std::vector<Action>& actions) {
  std::string s;
  for (const Action& a : actions) {
    s += (s.empty() ? "" : " ") + std::string(a.forward ? "F" : "B") + std::to_string(a.microbatch);
    if (a.chunk > 0) s += "c" + std::to_string(a.chunk);
  }
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

// PyTorch's ScheduleInterleaved1F1B on p = 2 ranks, v = 2 chunks, m = 4 (two rounds of 2): rank 0
// warms up with (v-1)*2 + 2*(p-1) = 4 forwards, rank 1 with 2; "c1" marks chunk 1 (stage s + p).
TEST(PipelineSchedule, InterleavedOrderIsPyTorchs) {
  EXPECT_EQ(order_str(stage_actions(Schedule::interleaved_1f1b, 2, 0, 4, 2)),
            "F0 F1 F0c1 F1c1 F2 B0c1 F3 B1c1 F2c1 B0 F3c1 B1 B2c1 B3c1 B2 B3");
  EXPECT_EQ(order_str(stage_actions(Schedule::interleaved_1f1b, 2, 1, 4, 2)),
            "F0 F1 F0c1 B0c1 F1c1 B1c1 F2 B0 F3 B1 F2c1 B2c1 F3c1 B3c1 B2 B3");
  EXPECT_EQ(parse_schedule("interleaved-1f1b"), Schedule::interleaved_1f1b);
  EXPECT_EQ(schedule_name(Schedule::interleaved_1f1b), "interleaved-1f1b");
  // The conditions, each a one-line ValueError: m a multiple of max(1, m/p) rounds (m = 5 on p = 2
  // is 2 rounds; m = 3 on p = 4 is one round of 3 and runs), p >= 2, v > 1 only interleaved.
  EXPECT_NE(error_text([] { check_schedule(Schedule::interleaved_1f1b, 2, 5, 2); }).find("multiple of its rounds"),
            std::string::npos);
  EXPECT_NO_THROW(check_schedule(Schedule::interleaved_1f1b, 4, 3, 2));
  EXPECT_NE(error_text([] { check_schedule(Schedule::interleaved_1f1b, 1, 4, 2); }).find("at least 2 pipeline ranks"),
            std::string::npos);
  EXPECT_NE(error_text([] { check_schedule(Schedule::one_f_one_b, 2, 4, 2); }).find("use interleaved-1f1b"),
            std::string::npos);
  for (const std::string& text : {error_text([] { check_schedule(Schedule::interleaved_1f1b, 2, 5, 2); }),
                                  error_text([] { check_schedule(Schedule::gpipe, 2, 4, 3); })})
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
}

TEST(PipelineSchedule, InterleavedBubbleMatchesTheory) {
  // (p-1)/(v*m+p-1) when p divides m; never below it otherwise (m < p: one short round).
  for (int p : {2, 3, 4})
    for (int v : {1, 2, 3})
      for (int m : {1, 2, 3, 4, 6, 8, 12}) {
        if (m % std::max(1, m / p) != 0) continue;
        for (double bc : {1.0, 2.0}) {
          Timeline t = simulate(Schedule::interleaved_1f1b, p, m, 1, bc, v);
          for (int s = 0; s < p; ++s) {
            if (m % p == 0)
              EXPECT_NEAR(t.bubble(s), theoretical_bubble(p, m, v), 1e-12) << "p " << p << " v " << v << " m " << m;
            else
              EXPECT_GE(t.bubble(s), theoretical_bubble(p, m, v) - 1e-12) << "p " << p << " v " << v << " m " << m;
          }
        }
      }
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

// Builds rank s's program with v chunks (virtual stages s, s+p, ...): micro-batch k enters
// stage 0 as input mb<k> (= k+1), each stage's forward adds its rank's input %x (= s+1), the last
// stage's backward starts from its forward's result, each backward multiplies by %x; rank 0
// returns its first stage's backwards' results in micro-batch order.
ir::Graph stage_graph(Schedule sch, int p, int s, int m, int v = 1) {
  const int n = p * v;
  ir::Graph g("stage" + std::to_string(s));
  ir::Builder b(g);
  for (int c = s; c < n; c += p)
    for (int link : {c - 1, c})
      if (link >= 0 && link < n - 1) b.group("link" + std::to_string(link), {link % p, (link + 1) % p});
  ir::Value* x = b.input("x", DType::f32, {4});
  std::vector<ir::Value*> mbs;
  if (s == 0)
    for (int k = 0; k < m; ++k) mbs.push_back(b.input("mb" + std::to_string(k), DType::f32, {4}));
  using Key = std::tuple<bool, int, int, int>;
  auto key = [](const Message& msg) { return Key{msg.activation, msg.microbatch, msg.from, msg.to}; };
  std::map<Key, ir::Value*> posted, arrived;
  std::map<std::pair<int, int>, ir::Value*> forward, backward;  // (stage, micro-batch)
  std::vector<ir::Value*> outputs;
  auto group_of = [](const Message& msg) { return "link" + std::to_string(msg.link()); };
  // Links k and k+p join the same two ranks: their tags differ.
  auto tag_of = [m](const Message& msg) { return int64_t(2 * (msg.link() * m + msg.microbatch) + (msg.activation ? 0 : 1)); };
  for (const Step& step : stage_program(sch, p, s, m, v)) {
    const Message& msg = step.message;
    switch (step.kind) {
      case Step::post_recv:
        posted[key(msg)] = b.recv(group_of(msg), msg.from > msg.to ? 1 : 0, DType::f32, {4}, tag_of(msg));
        break;
      case Step::post_send: {
        auto& values = msg.activation ? forward : backward;
        posted[key(msg)] = b.send(values.at({msg.from, msg.microbatch}), group_of(msg), msg.to > msg.from ? 1 : 0, tag_of(msg));
        break;
      }
      case Step::wait:
        arrived[key(msg)] = b.wait_tensor(posted.at(key(msg)));
        break;
      case Step::run: {
        const int k = step.action.microbatch, c = step.action.chunk * p + s;
        if (step.action.forward) {
          ir::Value* in = c == 0 ? mbs[size_t(k)] : arrived.at(Key{true, k, c - 1, c});
          forward[{c, k}] = b.add(in, x);
        } else {
          ir::Value* in = c == n - 1 ? forward.at({c, k}) : arrived.at(Key{false, k, c + 1, c});
          backward[{c, k}] = b.mul(in, x);
          if (c == 0) outputs.push_back(backward[{c, k}]);
        }
        break;
      }
    }
  }
  if (s != 0) outputs = {x};
  b.outputs(outputs);
  return g;
}

TEST(PipelineSchedule, StageProgramsAreDeadlockFreeAndRunOnThreads) {
  struct Config {
    Schedule sch;
    int v;
  };
  for (Config cfg : {Config{Schedule::gpipe, 1}, Config{Schedule::one_f_one_b, 1}, Config{Schedule::interleaved_1f1b, 1},
                     Config{Schedule::interleaved_1f1b, 2}, Config{Schedule::interleaved_1f1b, 3}})
    for (int p : {2, 3, 4})
      for (int m : {1, 2, 4, 8}) {
        const Schedule sch = cfg.sch;
        const int v = cfg.v;
        if (sch == Schedule::interleaved_1f1b && m % std::max(1, m / p) != 0) continue;
        SCOPED_TRACE(std::string(schedule_name(sch)) + " p " + std::to_string(p) + " v " + std::to_string(v) + " m " +
                     std::to_string(m));
        std::vector<ir::Graph> graphs;
        std::vector<const ir::Graph*> view;
        std::vector<int> ranks;
        std::vector<runtime::Bindings> bindings(static_cast<size_t>(p));
        for (int s = 0; s < p; ++s) graphs.push_back(stage_graph(sch, p, s, m, v));
        for (int s = 0; s < p; ++s) {
          view.push_back(&graphs[size_t(s)]);
          ranks.push_back(s);
          bindings[size_t(s)]["x"] = Tensor::full({4}, double(s + 1));
        }
        for (int k = 0; k < m; ++k) bindings[0]["mb" + std::to_string(k)] = Tensor::full({4}, double(k + 1));
        ASSERT_NO_THROW(passes::check_p2p_order(view, ranks, "in the test"));
        std::vector<runtime::RankResult> results = runtime::launch(view, bindings);
        // Every one of the p*v stages adds its rank's x going forward and multiplies by it going back.
        double product = 1;
        for (int s = 1; s <= p; ++s) product *= std::pow(double(s), v);
        ASSERT_EQ(results[0].outputs.size(), size_t(m));
        for (int k = 0; k < m; ++k)
          EXPECT_EQ(results[0].outputs[size_t(k)].to_doubles(),
                    std::vector<double>(4, (k + 1 + v * p * (p + 1) / 2.0) * product))
              << "micro-batch " << k;
      }
}

}  // namespace
}  // namespace dt::pipeline
