// The example gpt on the fsdp x tp plan (mesh 2x2, 4 ranks): the per-rank programs with the
// default pipeline compute the same bits as without passes (bucketed all_gathers move data only;
// the one-shot and two-shot all_reduces both reduce in rank order), and the pipeline cuts the
// collectives launched per rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "dtensor/comm/symmetric_arena.h"
#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/core/rng.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/io/tensor_binding.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/parser.h"
#include "dtensor/passes/buffer_planner.h"
#include "dtensor/passes/memory_estimate.h"
#include "dtensor/passes/pass_manager.h"
#include "dtensor/runtime/launcher.h"
#include "dtensor/sharding/compiler.h"
#include "dtensor/sharding/tensor_sharding.h"

namespace dt::passes {
namespace {

size_t count_collectives(const ir::Graph& g) {
  size_t n = 0;
  for (const auto& node : g.nodes()) n += ir::op_def(node->op).is_collective();
  return n;
}

// The fsdp x tp programs of the example gpt on a 2x2 mesh, one per rank in rank order.
std::vector<ir::Graph> gpt_fsdp_tp_programs() {
  const std::string root = DTENSOR_SOURCE_DIR;
  ir::Graph model = ir::parse_file(root + "/examples/gpt.dt");
  sharding::CompiledModel c =
      sharding::compile(model, sharding::ParallelPlan::load(root + "/examples/gpt_fsdp_tp.json"), DeviceMesh::parse("2x2"));
  std::vector<ir::Graph> out(c.programs.size());
  for (size_t i = 0; i < c.ranks.size(); ++i) out[size_t(c.ranks[i])] = c.programs[i].clone();
  return out;
}

ir::Graph run_default(const ir::Graph& g, const PassOptions& o = {}) {
  ir::Graph out = g.clone();
  PassManager pm;
  pm.add(parse_pipeline("default", o));
  pm.run(out);
  return out;
}

int64_t largest_all_gather(const ir::Graph& g) {
  int64_t m = 0;
  for (const auto& n : g.nodes())
    if (n->op == ir::OpKind::all_gather_into_tensor) m = std::max(m, int64_t(n->result()->type.nbytes()));
  return m;
}

// Per-rank programs differ (the rowwise bias is gathered on tp rank 0 only), yet every member of
// a group must issue the same collectives in the same order: bucketing decides membership from
// the group's own collectives only.
TEST(PassesGpt, GroupMembersIssueTheSameCollectives) {
  std::vector<ir::Graph> programs = gpt_fsdp_tp_programs();
  using Issued = std::vector<std::tuple<int, size_t, size_t>>;  // op, operand bytes, result bytes
  std::map<std::vector<int>, std::map<int, Issued>> by_group;
  for (size_t r = 0; r < programs.size(); ++r) {
    ir::Graph g = run_default(programs[r], PassOptions{});
    for (const auto& n : g.nodes()) {
      const ir::OpDef& def = ir::op_def(n->op);
      if (!def.is_collective()) continue;
      const ir::GroupDecl* group = g.find_group(n->attr_str("group"));
      ASSERT_NE(group, nullptr);
      by_group[group->ranks][int(r)].emplace_back(int(n->op), n->operands[0]->type.nbytes(), n->result()->type.nbytes());
    }
  }
  ASSERT_FALSE(by_group.empty());
  for (const auto& [ranks, per_rank] : by_group) {
    ASSERT_EQ(per_rank.size(), ranks.size());
    for (const auto& [r, issued] : per_rank) EXPECT_EQ(issued, per_rank.begin()->second) << "rank " << r;
  }
}

// The scheduled program's live-bytes estimate stays within the budget: the default (input peak
// plus twice the largest gather) and explicit ones down to the input's own peak plus one bucket.
TEST(PassesGpt, BucketedScheduleStaysWithinMemoryBudget) {
  for (const ir::Graph& p : gpt_fsdp_tp_programs()) {
    const int64_t peak = estimate_peak_bytes(p), largest = largest_all_gather(p);
    ir::Graph g = run_default(p);
    EXPECT_LE(estimate_peak_bytes(g), peak + 2 * largest);
    for (int64_t budget : {peak + 4 * largest, peak + largest}) {
      PassOptions o;
      o.memory_budget_bytes = size_t(budget);
      EXPECT_LE(estimate_peak_bytes(run_default(p, o)), budget) << "budget " << budget;
    }
  }
}

// FSDP-like prefetch: some bucketed all_gather has compute (a linear) between its issue and its
// wait, so communication overlaps compute; and buckets are smaller than the whole model (more than
// one bucketed gather per group).
TEST(PassesGpt, BucketsArePrefetchedAndOverlapCompute) {
  ir::Graph g = run_default(gpt_fsdp_tp_programs()[0]);
  size_t overlapped = 0, buckets = 0;
  const auto& nodes = g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    // A bucket: bucket_copy_in -> all_gather, lowered by comm-lowering to the in-place form.
    const ir::Node* in = nodes[i]->operands.empty() ? nullptr : nodes[i]->operands[0]->producer;
    const bool bucket = in && ((nodes[i]->op == ir::OpKind::all_gather_into_tensor && in->op == ir::OpKind::bucket_copy_in) ||
                               (nodes[i]->op == ir::OpKind::all_gather_into_tensor_ && in->op == ir::OpKind::all_gather_copy_in));
    if (!bucket) continue;
    ++buckets;
    for (size_t j = i + 1; j < nodes.size(); ++j) {
      if (nodes[j]->op == ir::OpKind::wait_tensor && nodes[j]->operands[0] == nodes[i]->result()) break;
      if (nodes[j]->op == ir::OpKind::linear) {
        ++overlapped;
        break;
      }
    }
  }
  EXPECT_GE(buckets, 3u);
  EXPECT_GE(overlapped, 2u);
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

// Uneven shards on 2x2 (vocab 61, 3 heads' worth of rows per tp rank and such): the ranks of
// different groups issue different collectives, so their comm buffers do not correspond and
// each rank keeps its own arena plan; the run still computes the same bits as without passes.
TEST(PassesGpt, UnevenShardsKeepPerRankArenaPlansAndTheSameBits) {
  const std::string root = DTENSOR_SOURCE_DIR;
  ir::Graph model = ir::build_gpt({.vocab = 61, .hidden = 48, .heads = 4, .layers = 2, .max_seq = 16, .batch = 3, .seq = 10});
  io::TensorMap weights = ir::random_weights(model, 7);
  Generator gen(11);
  io::TensorMap inputs = {{"input", randint({3, 10}, 0, 61, gen, DType::i64)}};
  sharding::CompiledModel c =
      sharding::compile(model, sharding::ParallelPlan::load(root + "/examples/gpt_fsdp_tp.json"), DeviceMesh::parse("2x2"));
  std::vector<runtime::Bindings> bindings(4);
  std::vector<ir::Graph> optimized;
  std::vector<ir::Graph*> all;
  std::vector<const ir::Graph*> off(4), on(4);
  for (size_t i = 0; i < c.ranks.size(); ++i) {
    const int r = c.ranks[i];
    bindings[size_t(r)] = sharding::shard_weights(model, c.sharding, weights, r);
    for (auto& [k, v] : sharding::shard_inputs(model, c.sharding, inputs, r)) bindings[size_t(r)][k] = v;
    optimized.push_back(run_default(c.programs[i]));
  }
  for (ir::Graph& g : optimized) all.push_back(&g);
  EXPECT_FALSE(plan_symmetric_comm_buffers(all).has_value());
  for (size_t i = 0; i < c.ranks.size(); ++i) {
    off[size_t(c.ranks[i])] = &c.programs[i];
    on[size_t(c.ranks[i])] = &optimized[i];
  }
  EXPECT_FALSE(same_arena_layout(on));
  auto a = runtime::launch(off, bindings);
  auto b = runtime::launch(on, bindings);
  expect_same_bits(a, b);
  for (const auto& r : b) EXPECT_GT(r.stats.arena_buffers, 0u);
}

}  // namespace
}  // namespace dt::passes
