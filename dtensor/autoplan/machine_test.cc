// Machine files and the cost model's refinements: α–β per collective kind and group size, a
// described cluster whose host-spanning groups pay the inter-host α–β, the defaults unchanged
// without them, a machine file changing the search's estimate in the expected direction (a plan
// for 64 ranks searched on this machine), and every malformed file a one-line ValueError.
#include "dtensor/autoplan/machine.h"

#include <gtest/gtest.h>

#include "dtensor/autoplan/search.h"
#include "dtensor/core/error.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/redistribute/planner.h"

namespace dt::autoplan {
namespace {

CostModel measured_model() {
  CostModel m;
  m.measured["all_gather"][2] = {1.0, 100.0};
  m.measured["all_gather"][8] = {50.0, 1.0};
  return m;
}

TEST(CostModel, PricesByKindAndGroupSize) {
  const CostModel m = measured_model();
  const int64_t bytes = 1000;
  EXPECT_DOUBLE_EQ(m.collective_us("all_gather", bytes, {2, 2}), 1.0 + 1000 / 100e3);
  EXPECT_DOUBLE_EQ(m.collective_us("all_gather", bytes, {4, 4}), 1.0 + 1000 / 100e3);  // largest size below
  EXPECT_DOUBLE_EQ(m.collective_us("all_gather", bytes, {8, 8}), 50.0 + 1000 / 1e3);
  EXPECT_DOUBLE_EQ(m.collective_us("all_gather", bytes, {16, 16}), 50.0 + 1000 / 1e3);
  EXPECT_DOUBLE_EQ(m.collective_us("all_reduce", bytes, {8, 8}), m.collective_us(bytes));  // not measured
  EXPECT_DOUBLE_EQ(CostModel{}.collective_us("all_to_all", bytes, {4, 4}), CostModel{}.collective_us(bytes));
}

TEST(CostModel, GroupsSpanningHostsPayTheInterHostPrice) {
  CostModel m;
  m.ranks_per_host = 4;
  m.inter_host = {100.0, 1.0};
  const Shape mesh{2, 4};  // hosts {0..3}, {4..7}: mesh dim 1 stays on a host, dim 0 crosses
  const double intra = step_time_us(m, mesh, 0b10, StepKind::all_gather, 4000);
  const double inter = step_time_us(m, mesh, 0b01, StepKind::all_gather, 4000);
  const double both = step_time_us(m, mesh, 0b11, StepKind::all_reduce, 4000);
  EXPECT_DOUBLE_EQ(intra, CostModel{}.collective_us(4000));
  EXPECT_DOUBLE_EQ(inter, 100.0 + 4000 / 1e3);
  EXPECT_DOUBLE_EQ(both, inter);
  EXPECT_EQ(step_time_us(m, mesh, 0b01, StepKind::chunk, 4000), 0.0);
}

TEST(CostModel, DefaultsPlanAsTheSingleAlphaBeta) {
  // Without refinements every step costs collective_us(bytes), as before they existed.
  RedistributePlanner planner;
  auto p = planner.plan(Shape{2, 4}, {Placement::shard(0), Placement::partial()}, {Placement::replicate(), Placement::replicate()},
                        Shape{64, 48}, DType::f32);
  double want = 0;
  for (const RedistributeStep& s : p->steps) want += is_collective(s.kind) ? CostModel{}.collective_us(s.bytes) : 0.0;
  EXPECT_DOUBLE_EQ(p->total_time_us, want);
  // A slower measured all_reduce makes the same redistribution dearer.
  CostModel slow;
  for (int64_t g : {2, 4, 8}) slow.measured["all_reduce"][g] = {500.0, 0.1};
  RedistributePlanner slow_planner(slow);
  auto q = slow_planner.plan(p->mesh_shape, p->src, p->dst, p->shape, p->dtype);
  EXPECT_GT(q->total_time_us, p->total_time_us);
}

TEST(MachineFile, RoundTripsAndKeepsDefaults) {
  MachineModel m;
  m.gemm_gflops = 33.5;
  m.comm = measured_model();
  m.comm.ranks_per_host = 8;
  m.comm.inter_host = {25.0, 12.5};
  const MachineModel back = parse_machine(machine_json(m, R"({"ranks": 4})"), "m.json");
  EXPECT_EQ(back.gemm_gflops, 33.5);
  EXPECT_EQ(back.mem_gbs, MachineModel{}.mem_gbs);
  EXPECT_TRUE(back.comm == m.comm);
  const MachineModel minimal = parse_machine(R"({"format": "dtensor-machine/1"})", "m.json");
  EXPECT_TRUE(minimal.comm == CostModel{});
  EXPECT_EQ(minimal.gemm_gflops, MachineModel{}.gemm_gflops);
}

TEST(MachineFile, MalformedFilesNameTheFileAndKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"{", "m.json: not valid json"},
      {R"({"gemm_gflops": 3})", "not a machine file"},
      {R"({"format": "dtensor-machine/1", "gemm": 3})", "unknown key 'gemm'"},
      {R"({"format": "dtensor-machine/1", "beta_gbs": -1})", "'beta_gbs' must be a positive finite number, got -1"},
      {R"({"format": "dtensor-machine/1", "gemm_gflops": "fast"})", "'gemm_gflops' must be a positive"},
      {R"({"format": "dtensor-machine/1", "collectives": {"broadcast": []}})", "unknown key 'broadcast'"},
      {R"({"format": "dtensor-machine/1", "collectives": {"all_reduce": [{"group_size": 1, "alpha_us": 1, "beta_gbs": 1}]}})",
       "'group_size' must be an integer >= 2"},
      {R"({"format": "dtensor-machine/1", "collectives": {"all_reduce": [{"group_size": 2, "alpha_us": 1}]}})",
       "group size 2 needs alpha_us and beta_gbs"},
      {R"({"format": "dtensor-machine/1", "collectives": {"all_reduce": [{"group_size": 2, "alpha_us": 1, "beta_gbs": 1},
        {"group_size": 2, "alpha_us": 1, "beta_gbs": 1}]}})", "group size 2 listed twice"},
      {R"({"format": "dtensor-machine/1", "cluster": {"ranks_per_host": 8}})", "needs 'inter_host'"},
      {R"({"format": "dtensor-machine/1", "cluster": {"ranks_per_host": 0, "inter_host": {}}})", "'ranks_per_host' must be"},
      {R"({"format": "dtensor-machine/1", "cluster": {"ranks_per_host": 8, "inter_host": {"alpha_us": 1}}})",
       "inter_host: needs alpha_us and beta_gbs"},
  };
  for (const auto& [text, want] : cases) {
    try {
      parse_machine(text, "m.json");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

// The gpt of the Llama shape family, small, on 64 ranks (8x8): a cluster of hosts of 8 ranks with a
// slow inter-host link makes the estimate dearer than one host at the intra-host price, and
// slower collectives everywhere dearer still; all searched here, nothing run.
TEST(MachineFile, ChangesTheSearchEstimateInTheExpectedDirection) {
  const ir::Graph g = ir::build_gpt({.vocab = 512, .hidden = 128, .heads = 8, .layers = 2, .max_seq = 16, .batch = 8, .seq = 16});
  const DeviceMesh mesh(Shape{8, 8});
  SearchOptions base;
  const SearchResult one_host = search(g, mesh, base);
  SearchOptions cluster = base;
  cluster.machine.comm.ranks_per_host = 8;
  cluster.machine.comm.inter_host = {200.0, 1.0};
  const SearchResult hosts = search(g, mesh, cluster);
  EXPECT_GT(hosts.estimate.step_us, one_host.estimate.step_us);
  // Slower collectives everywhere: more communication time in the chosen plan.
  SearchOptions slow = base;
  slow.machine.comm = CostModel(1000.0, 0.5);
  const SearchResult s = search(g, mesh, slow);
  EXPECT_GT(s.estimate.comm_total_us, one_host.estimate.comm_total_us);
  // A faster GEMM makes compute cheaper.
  SearchOptions fast = base;
  fast.machine.gemm_gflops *= 10;
  EXPECT_LT(search(g, mesh, fast).estimate.compute_us, one_host.estimate.compute_us);
}

}  // namespace
}  // namespace dt::autoplan
