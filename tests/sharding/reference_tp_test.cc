// The reference models of ../shared/reference, run sharded with the example plans
// (examples/mlp_tp.json, examples/gpt_tp.json on meshes 1, 2, 4; examples/gpt_fsdp_tp.json on 2x2
// and 4x2; examples/gpt_tp_vocab.json and examples/gpt_sp.json on 2, 3, 4),
// match PyTorch's outputs within 1e-4 relative: every element within 1e-5 + 1e-4·|torch| and the
// largest difference within 1e-4 of the largest |torch|; the losses within 1e-4 relative.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dtensor/kernels/ops.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/ir/example_models.h"
#include "tests/sharding/sharded_run.h"

namespace dt::sharding {
namespace {

const std::string kRef = DTENSOR_REFERENCE_DIR;
const std::string kExamples = DTENSOR_EXAMPLES_DIR;

struct Case {
  std::string model, plan, mesh;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model << "/" << c.plan << "/" << c.mesh; }

class ReferenceTp : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceTp, MatchesPyTorch) {
  const Case& c = GetParam();
  const std::string dir = kRef + "/" + c.model;
  ASSERT_TRUE(std::filesystem::exists(dir)) << "reference folder absent: " << dir;
  ir::Graph g = c.model == "mlp" ? ir::build_mlp({.loss = true}) : ir::build_gpt({.loss = true});
  TensorMap weights = io::read_safetensors(dir + "/weights.safetensors");
  TensorMap inputs = io::read_safetensors(dir + "/inputs.safetensors");
  Tensor expected = io::read_safetensors(dir + "/outputs.safetensors").at("output");
  std::ifstream cfg(dir + "/config.json");
  const double expected_loss = nlohmann::json::parse(cfg)["loss"].get<double>();

  ParallelPlan plan = ParallelPlan::load(kExamples + "/" + c.plan);
  auto run = testing::run_sharded(g, plan, DeviceMesh::parse(c.mesh), weights, inputs);
  double max_abs = 0;
  for (double v : expected.to_doubles()) max_abs = std::max(max_abs, std::abs(v));
  DiffReport d = compare(run.outputs[0], expected, /*rtol=*/1e-4, /*atol=*/1e-5);
  const double loss = run.outputs[1].item();
  std::printf("%s %s mesh %s: max_abs_diff %.3g (max |torch| %.3g), loss %.9g vs torch %.9g\n", c.model.c_str(),
              c.plan.c_str(), c.mesh.c_str(), d.max_abs_diff, max_abs, loss, expected_loss);
  EXPECT_TRUE(d.shapes_match);
  EXPECT_EQ(d.mismatches, 0) << "max_abs_diff " << d.max_abs_diff;
  EXPECT_LE(d.max_abs_diff, 1e-4 * max_abs);
  EXPECT_NEAR(loss, expected_loss, 1e-4 * std::abs(expected_loss));
}

INSTANTIATE_TEST_SUITE_P(Examples, ReferenceTp,
                         ::testing::Values(Case{"mlp", "mlp_tp.json", "1"}, Case{"mlp", "mlp_tp.json", "2"},
                                           Case{"mlp", "mlp_tp.json", "4"}, Case{"gpt", "gpt_tp.json", "1"},
                                           Case{"gpt", "gpt_tp.json", "2"}, Case{"gpt", "gpt_tp.json", "4"},
                                           Case{"gpt", "gpt_fsdp_tp.json", "2x2"}, Case{"gpt", "gpt_fsdp_tp.json", "4x2"},
                                           Case{"gpt", "gpt_tp_vocab.json", "2"}, Case{"gpt", "gpt_tp_vocab.json", "3"},
                                           Case{"gpt", "gpt_tp_vocab.json", "4"}, Case{"gpt", "gpt_sp.json", "2"},
                                           Case{"gpt", "gpt_sp.json", "3"}, Case{"gpt", "gpt_sp.json", "4"}));

}  // namespace
}  // namespace dt::sharding
