#include "dtensor/runtime/trace.h"

#include <gtest/gtest.h>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/ir/parser.h"

namespace dt::runtime {
namespace {

TEST(Trace, OneTrackPerRankWithCollectiveSlices) {
  ir::Graph g = ir::parse(R"(graph t {
  group tp = [0, 1]
  input %x : f32[64, 64]
  %ar = all_reduce(%x) {group = tp} : f32[64, 64]
  %h = matmul(%x, %x) : f32[64, 64]
  %ar_w = wait_tensor(%ar) : f32[64, 64]
  %y = add(%ar_w, %h) : f32[64, 64]
  return %y
}
)");
  TraceRecorder trace(2);
  run_ranks(2, [&](ProcessGroup& world) {
    Interpreter interp(g);
    interp.set_node_hook(trace.hook(world.rank()));
    interp.run({{"x", Tensor::ones({64, 64})}}, make_groups(g, world));
  });
  nlohmann::json j = trace.to_json();
  ASSERT_TRUE(j.contains("traceEvents"));
  int complete[2] = {0, 0}, begins[2] = {0, 0}, ends[2] = {0, 0}, names = 0;
  double begin_ts[2] = {0, 0}, end_ts[2] = {0, 0};
  for (const auto& e : j["traceEvents"]) {
    int tid = e["tid"].get<int>();
    std::string ph = e["ph"];
    if (ph == "M") ++names;
    if (ph == "X") ++complete[tid];
    if (ph == "b") ++begins[tid], begin_ts[tid] = e["ts"].get<double>();
    if (ph == "e") ++ends[tid], end_ts[tid] = e["ts"].get<double>();
  }
  EXPECT_EQ(names, 2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(complete[r], 4);  // all_reduce, matmul, wait, add
    EXPECT_EQ(begins[r], 1);
    EXPECT_EQ(ends[r], 1);
    EXPECT_LE(begin_ts[r], end_ts[r]);
  }
}

}  // namespace
}  // namespace dt::runtime
