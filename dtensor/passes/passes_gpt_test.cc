// The example gpt on the fsdp x tp plan (mesh 2x2, 4 ranks): the per-rank programs with the
// default pipeline compute the same bits as without passes (bucketed all_gathers move data only;
// the one-shot and two-shot all_reduces both reduce in rank order), and the pipeline cuts the
// collectives launched per rank.
#include <gtest/gtest.h>

#include <cstring>

#include "dtensor/io/safetensors.h"
#include "dtensor/io/tensor_binding.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/parser.h"
#include "dtensor/passes/pass_manager.h"
#include "dtensor/runtime/launcher.h"
#include "dtensor/sharding/compiler.h"
#include "dtensor/sharding/tensor_sharding.h"

namespace dt::passes {
namespace {

size_t count_collectives(const ir::Graph& g) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += ir::op_def(node->op).is_collective || node->op == ir::OpKind::one_shot_all_reduce;
  return n;
}

TEST(PassesGpt, FsdpTpSameBitsWithPassesOnAndOff) {
  const std::string root = DTENSOR_SOURCE_DIR;
  const std::string ref = root + "/tests/reference/gpt";
  ir::Graph model = ir::parse_file(root + "/examples/gpt.dt");
  io::TensorMap weights = io::bind_params(model, io::SafetensorsFile::open(ref + "/weights.safetensors"));
  io::TensorMap inputs = io::bind_inputs(model, io::SafetensorsFile::open(ref + "/inputs.safetensors"));
  const DeviceMesh mesh = DeviceMesh::parse("2x2");
  sharding::CompiledModel c = sharding::compile(model, sharding::ParallelPlan::load(root + "/examples/gpt_fsdp_tp.json"), mesh);
  ASSERT_EQ(c.programs.size(), 4u);

  std::vector<runtime::Bindings> bindings(4);
  for (size_t i = 0; i < c.ranks.size(); ++i) {
    const int r = c.ranks[i];
    bindings[size_t(r)] = sharding::shard_weights(model, c.sharding, weights, r);
    for (auto& [k, v] : sharding::shard_inputs(model, c.sharding, inputs, r)) bindings[size_t(r)][k] = v;
  }
  std::vector<ir::Graph> optimized;
  size_t before = 0, after = 0;
  for (const ir::Graph& p : c.programs) {
    optimized.push_back(p.clone());
    PassManager pm;
    pm.add(parse_pipeline("default"));
    pm.run(optimized.back());
    before += count_collectives(p);
    after += count_collectives(optimized.back());
  }
  EXPECT_LT(after, before);
  std::vector<const ir::Graph*> off(4), on(4);
  for (size_t i = 0; i < c.ranks.size(); ++i) {
    off[size_t(c.ranks[i])] = &c.programs[i];
    on[size_t(c.ranks[i])] = &optimized[i];
  }
  auto a = runtime::launch(off, bindings);
  auto b = runtime::launch(on, bindings);
  for (size_t r = 0; r < 4; ++r) {
    ASSERT_EQ(a[r].outputs.size(), b[r].outputs.size());
    for (size_t k = 0; k < a[r].outputs.size(); ++k) {
      Tensor x = a[r].outputs[k].contiguous(), y = b[r].outputs[k].contiguous();
      ASSERT_EQ(x.shape(), y.shape());
      EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()), 0) << "rank " << r << " output " << k;
    }
  }
}

}  // namespace
}  // namespace dt::passes
