// The example gpt on the fsdp x tp plan (mesh 2x2, 4 ranks): the per-rank programs with the
// default pipeline compute the same bits as without passes (bucketed all_gathers move data only;
// the one-shot and two-shot all_reduces both reduce in rank order), and the pipeline cuts the
// collectives launched per rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "dtensor/comm/symmetric_arena.h"
#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/io/tensor_binding.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/parser.h"
#include "dtensor/passes/buffer_planner.h"
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

// The example gpt compiled on the fsdp x tp plan (mesh 2x2) with every rank's bindings.
struct GptFsdpTp {
  ir::Graph model;
  sharding::CompiledModel c;
  std::vector<runtime::Bindings> bindings{4};

  GptFsdpTp() {
    const std::string root = DTENSOR_SOURCE_DIR;
    const std::string ref = root + "/tests/reference/gpt";
    model = ir::parse_file(root + "/examples/gpt.dt");
    io::TensorMap weights = io::bind_params(model, io::SafetensorsFile::open(ref + "/weights.safetensors"));
    io::TensorMap inputs = io::bind_inputs(model, io::SafetensorsFile::open(ref + "/inputs.safetensors"));
    c = sharding::compile(model, sharding::ParallelPlan::load(root + "/examples/gpt_fsdp_tp.json"),
                          DeviceMesh::parse("2x2"));
    for (size_t i = 0; i < c.ranks.size(); ++i) {
      const int r = c.ranks[i];
      bindings[size_t(r)] = sharding::shard_weights(model, c.sharding, weights, r);
      for (auto& [k, v] : sharding::shard_inputs(model, c.sharding, inputs, r)) bindings[size_t(r)][k] = v;
    }
  }

  // Returns the programs after the default pipeline, comm buffers planned over all ranks together.
  std::vector<ir::Graph> optimized() const {
    std::vector<ir::Graph> out;
    std::vector<ir::Graph*> all;
    for (const ir::Graph& p : c.programs) {
      out.push_back(p.clone());
      PassManager pm;
      pm.add(parse_pipeline("default"));
      pm.run(out.back());
    }
    for (ir::Graph& g : out) all.push_back(&g);
    plan_symmetric_comm_buffers(all);
    return out;
  }

  // Returns programs indexed by global rank.
  std::vector<const ir::Graph*> by_rank(const std::vector<ir::Graph>& programs) const {
    std::vector<const ir::Graph*> out(4);
    for (size_t i = 0; i < c.ranks.size(); ++i) out[size_t(c.ranks[i])] = &programs[i];
    return out;
  }
};

void expect_same_bits(const std::vector<runtime::RankResult>& a, const std::vector<runtime::RankResult>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].outputs.size(), b[r].outputs.size());
    for (size_t k = 0; k < a[r].outputs.size(); ++k) {
      Tensor x = a[r].outputs[k].contiguous(), y = b[r].outputs[k].contiguous();
      ASSERT_EQ(x.shape(), y.shape());
      EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()), 0) << "rank " << r << " output " << k;
    }
  }
}

TEST(PassesGpt, FsdpTpSameBitsWithPassesOnAndOff) {
  GptFsdpTp gpt;
  ASSERT_EQ(gpt.c.programs.size(), 4u);
  std::vector<ir::Graph> optimized = gpt.optimized();
  size_t before = 0, after = 0;
  for (size_t i = 0; i < optimized.size(); ++i) {
    before += count_collectives(gpt.c.programs[i]);
    after += count_collectives(optimized[i]);
  }
  EXPECT_LT(after, before);
  auto off = runtime::launch(gpt.by_rank(gpt.c.programs), gpt.bindings);
  auto on = runtime::launch(gpt.by_rank(optimized), gpt.bindings);
  expect_same_bits(off, on);
  // The comm buffers really were in the arena.
  for (const auto& r : on) EXPECT_GT(r.stats.arena_buffers, 0u);
}

// Every rank places its comm buffers at the same arena offsets, in each of three runs (the arena
// itself throws CommError on a mismatch; this checks the recorded placements too), and the bits
// equal a run with the buffers allocated normally.
TEST(PassesGpt, CommBuffersAtIdenticalArenaOffsetsOnFourRanksOverThreeRuns) {
  GptFsdpTp gpt;
  std::vector<ir::Graph> optimized = gpt.optimized();
  std::vector<const ir::Graph*> programs = gpt.by_rank(optimized);
  size_t bytes = 0;
  for (const ir::Graph* p : programs) bytes = std::max(bytes, check_comm_buffer_plan(*p));
  ASSERT_GT(bytes, 0u);
  auto arena = std::make_shared<SymmetricArena>(4, bytes);
  std::vector<std::vector<std::vector<size_t>>> offsets(4);  // [rank][run] -> offsets in order
  std::vector<std::vector<Tensor>> outputs(4);
  run_ranks(4, [&](ProcessGroup& world) {
    const int r = world.rank();
    runtime::GroupMap groups = runtime::make_groups(*programs[size_t(r)], world);
    runtime::Interpreter interp(*programs[size_t(r)]);
    interp.set_comm_arena(arena, r);
    for (int run = 0; run < 3; ++run) {
      outputs[size_t(r)] = interp.run(gpt.bindings[size_t(r)], groups);
      std::vector<size_t> placed;
      for (const auto& [value, offset] : interp.last_placements()) placed.push_back(offset);
      offsets[size_t(r)].push_back(placed);
    }
  });
  ASSERT_FALSE(offsets[0][0].empty());
  for (size_t r = 0; r < 4; ++r)
    for (size_t run = 0; run < 3; ++run) EXPECT_EQ(offsets[r][run], offsets[0][0]) << "rank " << r << " run " << run;

  runtime::LaunchOptions no_arena;
  no_arena.comm_arena = false;
  auto plain = runtime::launch(programs, gpt.bindings, no_arena);
  std::vector<runtime::RankResult> in_arena(4);
  for (size_t r = 0; r < 4; ++r) in_arena[r].outputs = outputs[r];
  expect_same_bits(plain, in_arena);
  for (const auto& r : plain) EXPECT_EQ(r.stats.arena_buffers, 0u);
}

}  // namespace
}  // namespace dt::passes
