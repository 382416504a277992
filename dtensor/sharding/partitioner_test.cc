// Partitioner tests in the spirit of PyTorch's TP tests: collective counts per block, fallback of
// an op without a rule, local view sizes for split attention heads, uneven sizes, and every
// sharded run equal to the single-device run.
#include <gtest/gtest.h>

#include "dtensor/kernels/ops.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/builder.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/printer.h"
#include "tests/sharding/sharded_run.h"

namespace dt::sharding {
namespace {

using testing::count_ops;
using testing::run_sharded;
using testing::run_single;

ParallelPlan mlp_plan() {
  return ParallelPlan::parse(R"({"mesh_dims": ["tp"], "modules": [
      {"pattern": "layers.*.fc1", "style": "colwise"}, {"pattern": "layers.*.fc2", "style": "rowwise"}]})");
}

ParallelPlan gpt_plan() {
  return ParallelPlan::parse(R"({"mesh_dims": ["tp"], "modules": [
      {"pattern": "h.*.attn.[qkv]_proj", "style": "colwise"}, {"pattern": "h.*.attn.o_proj", "style": "rowwise"},
      {"pattern": "h.*.mlp.fc_in", "style": "colwise"}, {"pattern": "h.*.mlp.fc_out", "style": "rowwise"},
      {"pattern": "lm_head", "style": "colwise"}]})");
}

TensorMap random_inputs(const ir::Graph& g, uint64_t seed, int64_t vocab = 0) {
  Generator gen(seed);
  TensorMap m;
  for (const ir::Value* v : g.inputs()) {
    if (v->type.dtype == DType::i64) m[v->name] = rand(v->type.shape, gen, DType::f32, 0, double(vocab) - 0.01).to(DType::i64);
    else m[v->name] = rand(v->type.shape, gen, v->type.dtype, -1, 1);
  }
  return m;
}

void expect_matches_single(const ir::Graph& g, const ParallelPlan& plan, const DeviceMesh& mesh, int64_t vocab = 0) {
  TensorMap w = ir::random_weights(g, 7);
  TensorMap in = random_inputs(g, 11, vocab);
  auto single = run_single(g, w, in);
  auto sharded = run_sharded(g, plan, mesh, w, in);
  ASSERT_EQ(single.size(), sharded.outputs.size());
  for (size_t k = 0; k < single.size(); ++k) {
    DiffReport d = compare(sharded.outputs[k], single[k], 1e-4, 1e-5);
    EXPECT_TRUE(d.shapes_match);
    EXPECT_EQ(d.mismatches, 0) << "output " << k << " on mesh " << mesh.str() << ": max_abs_diff " << d.max_abs_diff;
  }
}

TEST(Partitioner, MlpColwiseRowwiseHasOneAllReducePerBlock) {
  for (int64_t tp : {2, 4}) {
    ir::Graph g = ir::build_mlp({.hidden = 16, .layers = 2, .batch = 4});
    CompiledModel c = compile(g, mlp_plan(), DeviceMesh({tp}));
    ASSERT_EQ(c.programs.size(), size_t(tp));
    for (const ir::Graph& p : c.programs) {
      EXPECT_EQ(count_ops(p, ir::OpKind::all_reduce), 2) << ir::print(p);
      EXPECT_EQ(count_ops(p, ir::OpKind::wait_tensor), 2);
      EXPECT_EQ(collective_stats(p, 0).total, 2);
      ASSERT_NE(p.find("layers.0.fc1.weight"), nullptr);
      EXPECT_EQ(p.find("layers.0.fc1.weight")->type.shape, (Shape{64 / tp, 16}));
      EXPECT_EQ(p.find("layers.0.fc2.weight")->type.shape, (Shape{16, 64 / tp}));
    }
    expect_matches_single(g, mlp_plan(), DeviceMesh({tp}));
  }
}

// A 2-block MLP whose linears have no bias.
ir::Graph mlp_without_bias(int64_t h, int64_t layers, int64_t batch) {
  ir::Graph g("mlp_nobias");
  ir::Builder b(g);
  ir::Value* x = b.input("input", DType::f32, {batch, h});
  for (int64_t i = 0; i < layers; ++i) {
    std::string p = "layers." + std::to_string(i);
    ir::Value* w1 = b.param(p + ".fc1.weight", DType::f32, {4 * h, h});
    ir::Value* w2 = b.param(p + ".fc2.weight", DType::f32, {h, 4 * h});
    x = b.add(x, b.linear(b.relu(b.linear(x, w1)), w2));
  }
  b.outputs({x});
  return g;
}

TEST(Partitioner, MlpWithoutBiasHasOneAllReducePerBlock) {
  ir::Graph g = mlp_without_bias(8, 2, 3);
  CompiledModel c = compile(g, mlp_plan(), DeviceMesh({2}));
  for (const ir::Graph& p : c.programs) {
    EXPECT_EQ(count_ops(p, ir::OpKind::all_reduce), 2) << ir::print(p);
    EXPECT_EQ(collective_stats(p, 0).total, 2);
  }
  expect_matches_single(g, mlp_plan(), DeviceMesh({2}));
}

// Column-wise then row-wise over both mesh dims (2-d tensor parallelism): the row-wise output is
// partial on both, and the planner reduces it with one all_reduce on the flattened group "dp_tp"
// instead of one per mesh dim (PyTorch issues one here too). Realistic width, uneven batch.
TEST(Partitioner, PartialOnTwoMeshDimsIsOneAllReduceOnTheFlattenedGroup) {
  ParallelPlan plan = ParallelPlan::parse(R"({"mesh_dims": ["dp", "tp"], "modules": [
      {"pattern": "layers.*.fc1", "style": "colwise", "mesh_dim": "dp"},
      {"pattern": "layers.*.fc1", "style": "colwise", "mesh_dim": "tp"},
      {"pattern": "layers.*.fc2", "style": "rowwise", "mesh_dim": "dp"},
      {"pattern": "layers.*.fc2", "style": "rowwise", "mesh_dim": "tp"}]})");
  ir::Graph g = mlp_without_bias(512, 2, 5);
  for (const char* m : {"2x2", "4x2"}) {
    DeviceMesh mesh = DeviceMesh::parse(m);
    CompiledModel c = compile(g, plan, mesh);
    for (const ir::Graph& p : c.programs) {
      ASSERT_NE(p.find_group("dp_tp"), nullptr) << ir::print(p);
      EXPECT_EQ(p.find_group("dp_tp")->ranks.size(), size_t(mesh.size()));
      int on_flat = 0;
      for (const ir::Node* n : p.nodes())
        if (n->op == ir::OpKind::all_reduce && n->attr_str("group") == "dp_tp") ++on_flat;
      EXPECT_EQ(on_flat, 2) << ir::print(p);
      EXPECT_EQ(collective_stats(p, 0).total, 2) << ir::print(p);
    }
    expect_matches_single(g, plan, mesh);
  }
}

TEST(Partitioner, RowwiseBiasIsAddedOnGroupIndexZeroOnly) {
  ir::Graph g = ir::build_mlp({.hidden = 8, .layers = 1, .batch = 2});
  CompiledModel c = compile(g, mlp_plan(), DeviceMesh({2}));
  auto linear_operands = [](const ir::Graph& p, int which) {
    int seen = 0;
    for (const auto& n : p.nodes())
      if (n->op == ir::OpKind::linear && seen++ == which) return n->operands.size();
    return size_t(0);
  };
  EXPECT_EQ(linear_operands(c.programs[0], 1), 3u);  // fc2 on rank 0 adds the bias
  EXPECT_EQ(linear_operands(c.programs[1], 1), 2u);  // rank 1 does not
}

// A residual add after a rowwise linear (x + fc2(...)) is P(sum) + R: group index 0 adds the
// residual to its partial sums and the other ranks add nothing; the reduction moves to the
// stream's next reader (the next block's fc1, or the output), so the all_reduce count stays one
// per block and reduces the add's result. Three blocks on tp 2 and 4, an uneven batch.
TEST(Partitioner, ResidualIsAddedOnGroupIndexZeroBeforeTheReduction) {
  ir::Graph g = mlp_without_bias(16, 3, 3);
  for (int64_t tp : {2, 4}) {
    CompiledModel c = compile(g, mlp_plan(), DeviceMesh({tp}));
    for (int64_t r = 0; r < tp; ++r) {
      const ir::Graph& p = c.programs[size_t(r)];
      EXPECT_EQ(count_ops(p, ir::OpKind::all_reduce), 3) << ir::print(p);
      EXPECT_EQ(count_ops(p, ir::OpKind::add), r == 0 ? 3 : 0) << "rank " << r << "\n" << ir::print(p);
      int reduced_sums = 0;
      for (const ir::Node* n : p.nodes())
        if (n->op == ir::OpKind::all_reduce) reduced_sums += n->operands[0]->producer->op == ir::OpKind::add;
      EXPECT_EQ(reduced_sums, r == 0 ? 3 : 0) << "rank " << r << "\n" << ir::print(p);
    }
    expect_matches_single(g, mlp_plan(), DeviceMesh({tp}));
  }
}

// The reduction is not deferred where that would not save it: the partial operand has another
// reader (it is an output too), or the R operand broadcasts (the reduced tensor would grow).
TEST(Partitioner, ResidualAddReducesFirstWhenDeferringSavesNothing) {
  for (bool broadcast : {false, true}) {
    ir::Graph g("residual");
    ir::Builder b(g);
    ir::Value* x = b.input("input", DType::f32, {3, 8});
    ir::Value* h = broadcast ? b.input("bias", DType::f32, {8}) : x;
    ir::Value* w1 = b.param("layers.0.fc1.weight", DType::f32, {32, 8});
    ir::Value* w2 = b.param("layers.0.fc2.weight", DType::f32, {8, 32});
    ir::Value* y = b.linear(b.relu(b.linear(x, w1)), w2);
    ir::Value* s = b.relu(b.add(y, h));
    if (broadcast) b.outputs({s});
    else b.outputs({s, y});
    CompiledModel c = compile(g, mlp_plan(), DeviceMesh({2}));
    for (const ir::Graph& p : c.programs) {
      EXPECT_EQ(count_ops(p, ir::OpKind::all_reduce), 1) << ir::print(p);
      EXPECT_EQ(count_ops(p, ir::OpKind::add), 1) << ir::print(p);
      for (const ir::Node* n : p.nodes())
        if (n->op == ir::OpKind::all_reduce) EXPECT_EQ(n->operands[0]->producer->op, ir::OpKind::linear) << ir::print(p);
    }
    expect_matches_single(g, mlp_plan(), DeviceMesh({2}));
  }
}

TEST(Partitioner, OpWithoutRuleFallsBackToAllGatherBeforeIt) {
  const ir::RuleFn saved = ir::replace_sharding_rule_for_test(ir::OpKind::relu, nullptr);
  ir::Graph g = ir::build_mlp({.hidden = 8, .layers = 1, .batch = 2});
  CompiledModel c = compile(g, mlp_plan(), DeviceMesh({2}));
  ir::replace_sharding_rule_for_test(ir::OpKind::relu, saved);
  ASSERT_EQ(c.sharding.warnings.size(), 1u);
  EXPECT_NE(c.sharding.warnings[0].find("relu"), std::string::npos);
  const ir::Graph& p = c.programs[0];
  // fc1 (colwise) -> all_gather -> wait -> (view, permute, reshape: the members' blocks joined
  // along the feature dim) -> relu
  const ir::Node* relu = nullptr;
  for (const auto& n : p.nodes())
    if (n->op == ir::OpKind::relu) relu = n;
  ASSERT_NE(relu, nullptr);
  const ir::Node* producer = relu->operands[0]->producer;
  while (producer && (producer->op == ir::OpKind::view || producer->op == ir::OpKind::permute ||
                      producer->op == ir::OpKind::reshape))
    producer = producer->operands[0]->producer;
  ASSERT_NE(producer, nullptr);
  EXPECT_EQ(producer->op, ir::OpKind::wait_tensor) << ir::print(p);
  EXPECT_EQ(producer->operands[0]->producer->op, ir::OpKind::all_gather_into_tensor);
  EXPECT_EQ(relu->operands[0]->type.shape, (Shape{2, 32}));
}

TEST(Partitioner, AttentionHeadsSplitAcrossRanksInLocalViews) {
  ir::Graph g = ir::build_gpt({.vocab = 64, .hidden = 32, .heads = 4, .layers = 1, .max_seq = 8, .batch = 2, .seq = 8});
  CompiledModel c = compile(g, gpt_plan(), DeviceMesh({2}));
  const ir::Graph& p = c.programs[1];
  int views = 0;
  for (const auto& n : p.nodes())
    if (n->op == ir::OpKind::view && n->result()->type.rank() == 4 &&
        !(n->operands[0]->producer && n->operands[0]->producer->op == ir::OpKind::wait_tensor)) {  // not the logits gather's blocks
      EXPECT_EQ(n->attr_ints("shape"), (std::vector<int64_t>{2, 8, 2, 8}));
      ++views;
    }
  EXPECT_EQ(views, 3);
  // One all_reduce after attention, one after the MLP, one all_gather of the logits.
  EXPECT_EQ(count_ops(p, ir::OpKind::all_reduce), 2) << ir::print(p);
  EXPECT_EQ(count_ops(p, ir::OpKind::all_gather_into_tensor), 1);
  expect_matches_single(g, gpt_plan(), DeviceMesh({2}), 64);
}

TEST(Partitioner, UnevenSizesStayCorrect) {
  // fc1 out = 40 over 3 ranks (14, 14, 12); hidden 10 over 4 (3, 3, 3, 1).
  expect_matches_single(ir::build_mlp({.hidden = 10, .layers = 2, .batch = 3}), mlp_plan(), DeviceMesh({3}));
  expect_matches_single(ir::build_mlp({.hidden = 10, .layers = 1, .batch = 3}), mlp_plan(), DeviceMesh({4}));
  // vocab 61 not divisible by 4; 4 heads over 3 ranks cannot split evenly: the views gather first.
  ir::Graph g = ir::build_gpt({.vocab = 61, .hidden = 24, .heads = 4, .layers = 1, .max_seq = 8, .batch = 2, .seq = 5});
  expect_matches_single(g, gpt_plan(), DeviceMesh({4}), 61);
  expect_matches_single(g, gpt_plan(), DeviceMesh({3}), 61);
  // More ranks than heads or rows: empty shards.
  expect_matches_single(ir::build_mlp({.hidden = 2, .layers = 1, .batch = 1}), mlp_plan(), DeviceMesh({3}));
}

TEST(Partitioner, SequenceStyleTurnsAllReduceIntoReduceScatterAndAllGather) {
  ParallelPlan plan = ParallelPlan::parse(R"J({"mesh_dims": ["tp"], "inputs": {"input": "S(0)"}, "modules": [
      {"pattern": "layers.*.ln", "style": "sequence", "dim": 0},
      {"pattern": "layers.*.fc1", "style": "colwise"}, {"pattern": "layers.*.fc2", "style": "rowwise"}]})J");
  ir::Graph g = ir::build_mlp({.hidden = 8, .layers = 2, .batch = 4});
  CompiledModel c = compile(g, plan, DeviceMesh({2}));
  for (const ir::Graph& p : c.programs) {
    EXPECT_EQ(count_ops(p, ir::OpKind::all_reduce), 0) << ir::print(p);
    EXPECT_EQ(count_ops(p, ir::OpKind::reduce_scatter_tensor), 2);
    EXPECT_EQ(count_ops(p, ir::OpKind::all_gather_into_tensor), 3);  // before each fc1, and the output
  }
  expect_matches_single(g, plan, DeviceMesh({2}));
  expect_matches_single(ir::build_mlp({.hidden = 8, .layers = 2, .batch = 5}), plan, DeviceMesh({2}));  // uneven
}

TEST(Partitioner, EveryProgramVerifiesAndKeepsNames) {
  ir::Graph g = ir::build_gpt({.vocab = 32, .hidden = 16, .heads = 2, .layers = 2, .max_seq = 8, .batch = 1, .seq = 4});
  CompiledModel c = compile(g, gpt_plan(), DeviceMesh({2}));
  for (const ir::Graph& p : c.programs) {
    EXPECT_NE(p.find("logits"), nullptr);
    ASSERT_EQ(p.groups().size(), 1u);
    EXPECT_EQ(p.groups()[0].name, "tp");
  }
}

}  // namespace
}  // namespace dt::sharding
