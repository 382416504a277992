#include "dtensor/runtime/interpreter.h"

#include <gtest/gtest.h>

#include <cstring>
#include <mutex>

#include "dtensor/autodiff/train_step.h"
#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/core/error.h"
#include "dtensor/kernels/gemm_f32_packed.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/builder.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/ir/parser.h"
#include "dtensor/io/safetensors.h"
#include "tests/support/error_text.h"

namespace dt::runtime {
namespace {

using ir::Builder;
using ir::Graph;
using ir::Value;

TEST(Interpreter, ReleasesEachBufferAfterItsLastUse) {
  Graph g("chain");
  Builder b(g);
  Value* x = b.input("x", DType::f32, {1000});
  Value* a = b.relu(x);     // node 0: a lives until node 2
  Value* c = b.relu(a);     // node 1
  Value* d = b.add(a, c);   // node 2: a, c released after it
  Value* e = b.relu(d);     // node 3: d released
  b.outputs({e});
  Interpreter interp(g);
  EXPECT_EQ(interp.release_plan()[0], std::vector<int>{});
  EXPECT_EQ(interp.release_plan()[2], (std::vector<int>{a->id, c->id}));
  EXPECT_EQ(interp.release_plan()[3], std::vector<int>{d->id});
  RunStats stats;
  std::vector<Tensor> out = interp.run({{"x", Tensor::full({1000}, -1.0)}}, {}, &stats);
  // Live at node 2: a, c and d (4000 bytes each); never more.
  EXPECT_EQ(stats.peak_bytes, 3 * 4000u);
  EXPECT_EQ(stats.nodes, 4u);
  EXPECT_EQ(out[0].to_doubles(), std::vector<double>(1000, 0.0));
}

TEST(Interpreter, ViewsOfInputsCostNoMemory) {
  Graph g("views");
  Builder b(g);
  Value* x = b.input("x", DType::f32, {4, 6});
  Value* v = b.view(b.transpose(x, 0, 1), {3, 8});  // transpose is a view; this view must copy
  Value* s = b.slice(x, 0, 1, 3);
  b.outputs({v, s});
  Interpreter interp(g);
  RunStats stats;
  Tensor xt = Tensor::arange(24, DType::f32).view({4, 6});
  auto out = interp.run({{"x", xt}}, {}, &stats);
  EXPECT_EQ(stats.peak_bytes, 24 * 4u);  // only the reshape copy
  EXPECT_EQ(out[0].to_doubles(), xt.transpose(0, 1).contiguous().to_doubles());
  EXPECT_EQ(out[0].shape(), (Shape{3, 8}));
  EXPECT_EQ(out[1].to_doubles(), xt.slice(0, 1, 3).to_doubles());
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.contiguous().raw_data(), b.contiguous().raw_data(), size_t(a.numel()) * itemsize(a.dtype())) == 0;
}

// Runs `fused` (an Interpreter of `g`, fusion on) and an Interpreter of `g` with fusion off on
// `bind`: fusion must change no output bit and must not raise the peak of live buffers.
void expect_fusion_changes_nothing(Interpreter& fused, const Graph& g, const Bindings& bind) {
  Interpreter plain(g);
  plain.set_fusion(false);
  RunStats fs, ps;
  const std::vector<Tensor> a = fused.run(bind, {}, &fs), c = plain.run(bind, {}, &ps);
  ASSERT_EQ(a.size(), c.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bitwise_equal(a[i], c[i])) << "output " << i;
  EXPECT_LE(fs.peak_bytes, ps.peak_bytes);
}

// The gpt at hidden 512 (8 heads, vocabulary 1000, a short sequence to stay cheap): each layer's
// fc_in + gelu runs as one kernel, and so do its two residual adds with the projections before
// them (attention out, fc_out); the logits are bitwise those of the unfused run.
TEST(Interpreter, FusesLinearAndActivationBitwise) {
  const Graph g = ir::build_gpt({.vocab = 1000, .hidden = 512, .heads = 8, .layers = 2, .max_seq = 16, .batch = 2, .seq = 12});
  Bindings bind = ir::random_weights(g, 3);
  Generator gen(4);
  bind["input"] = randint({2, 12}, 0, 1000, gen);
  Interpreter fused(g);
  ASSERT_EQ(fused.fusions().size(), 6u);
  int activations = 0, residuals = 0;
  for (const EpilogueFusion& f : fused.fusions()) {
    EXPECT_EQ(g.nodes()[size_t(f.head)]->op, ir::OpKind::linear);
    const ir::OpKind tail = g.nodes()[size_t(f.tail)]->op;
    if (f.other) {
      ++residuals;
      EXPECT_EQ(tail, ir::OpKind::add);
      EXPECT_EQ(f.other_op, EpilogueOp::add);
    } else {
      ++activations;
      EXPECT_EQ(tail, ir::OpKind::gelu);
      EXPECT_EQ(f.act, Activation::gelu_tanh);
    }
  }
  EXPECT_EQ(activations, 2);
  EXPECT_EQ(residuals, 4);
  expect_fusion_changes_nothing(fused, g, bind);  // the activation writes into the linear's buffer
}

// Fusion needs the activation to be the linear result's only reader, an f32 or bf16 result and a
// non-output; each chain below breaks one condition and keeps its two nodes, and relu/silu/bf16 gelu fuse.
TEST(Interpreter, FusesOnlyWhereTheActivationIsTheSoleReader) {
  Graph g("chains");
  Builder b(g);
  Value* x = b.input("x", DType::f32, {5, 7});
  Value* w = b.param("w", DType::f32, {6, 7});
  Value* xh = b.input("xh", DType::bf16, {5, 7});
  Value* wh = b.param("wh", DType::bf16, {6, 7});
  Value* l0 = b.linear(x, w);  // read by silu only: fused
  Value* s = b.silu(l0);
  Value* l1 = b.linear(x, w);  // read by relu and add: kept
  Value* r = b.add(b.relu(l1), l1);
  Value* l2 = b.linear(x, w);  // an output: kept
  Value* r2 = b.relu(l2);
  Value* l3 = b.linear(xh, wh);  // bf16: fused
  Value* r3 = b.gelu(l3);
  Value* l4 = b.linear(x, w);  // relu: fused
  Value* r4 = b.relu(l4);
  b.outputs({s, r, l2, r2, r3, r4});
  Interpreter interp(g);
  ASSERT_EQ(interp.fusions().size(), 3u);
  EXPECT_EQ(interp.fusions()[0].act, Activation::silu);
  EXPECT_EQ(interp.fusions()[1].act, Activation::gelu);
  EXPECT_EQ(interp.fusions()[2].act, Activation::relu);
  Bindings bind = {{"x", Tensor::arange(35, DType::f32).view({5, 7})}, {"w", Tensor::full({6, 7}, -0.25)}};
  bind["xh"] = bind["x"].to(DType::bf16);
  bind["wh"] = bind["w"].to(DType::bf16);
  expect_fusion_changes_nothing(interp, g, bind);
}

// SwiGLU's silu(gate) * up: the up linear's GEMM panels take the product (linear+mul), bitwise
// equal to the two ops, with or without the linear's bias; a mul by a tensor made after the
// linear keeps its nodes.
TEST(Interpreter, FusesTheProductAfterALinearBitwise) {
  Graph g("swiglu");
  Builder b(g);
  Value* x = b.input("x", DType::f32, {3, 4, 7});
  Value* w = b.param("w", DType::f32, {6, 7});
  Value* bias = b.param("bias", DType::f32, {6});
  Value* gate = b.silu(b.linear(x, w));
  Value* up = b.linear(x, w);
  Value* fused = b.mul(gate, up);  // fused: gate exists before up
  Value* early = b.linear(x, w);
  Value* late = b.mul(early, b.relu(gate));  // relu(gate) is made after `early`: kept
  Value* biased = b.mul(b.linear(x, w, bias), gate);  // fused, the bias seeded as without the mul
  b.outputs({fused, late, biased});
  Interpreter interp(g);
  std::vector<const Value*> products;
  for (const EpilogueFusion& f : interp.fusions())
    if (f.other) {
      EXPECT_EQ(f.other_op, EpilogueOp::mul);
      EXPECT_EQ(f.other, gate);
      products.push_back(g.nodes()[size_t(f.tail)]->result());
    }
  EXPECT_EQ(products, (std::vector<const Value*>{fused, biased}));
  Generator gen(6);
  const Bindings bind = {{"x", randn({3, 4, 7}, gen)}, {"w", randn({6, 7}, gen)}, {"bias", randn({6}, gen)}};
  expect_fusion_changes_nothing(interp, g, bind);
  const Tensor none{};
  EXPECT_EQ(test::error_text<ShapeError>([&] {
              linear_binary(bind.at("x"), bind.at("w"), none, EpilogueOp::mul, Tensor::ones({3, 4, 5}));
            }),
            "linear_mul: x [3, 4, 7], weight [6, 7] and other [3, 4, 5] do not match");
  EXPECT_EQ(test::error_text<DTypeError>([&] {
              linear_binary(bind.at("x").to(DType::f64), bind.at("w").to(DType::f64), none, EpilogueOp::add,
                            Tensor::ones({3, 4, 6}));
            }),
            "linear_add: a linear with a fused product or sum supports f32 only");
}

// The residual add after a block's output projection (h + o_proj(a), GPT-2's c_proj with its bias):
// the projection's GEMM panels take the sum (linear+add), bitwise equal to the two ops, in either
// operand order; an add of a tensor made after the linear, of a broadcast row, of the linear's
// result to itself, or of a linear result that another node reads too keeps its nodes.
TEST(Interpreter, FusesTheResidualAddAfterALinearBitwise) {
  Graph g("residual");
  Builder b(g);
  Value* h = b.input("h", DType::f32, {3, 4, 6});
  Value* x = b.input("x", DType::f32, {3, 4, 7});
  Value* w = b.param("w", DType::f32, {6, 7});
  Value* bias = b.param("bias", DType::f32, {6});
  Value* row = b.param("row", DType::f32, {6});
  Value* h1 = b.add(h, b.linear(x, w));           // fused
  Value* h2 = b.add(b.linear(x, w, bias), h1);    // fused: h1 exists before this linear
  Value* early = b.linear(x, w);
  Value* late = b.add(early, b.relu(h2));         // relu(h2) is made after `early`: kept
  Value* broadcast = b.add(b.linear(x, w), row);  // [6] broadcast over the rows: kept
  Value* twice = b.linear(x, w);
  Value* doubled = b.add(twice, twice);           // kept
  Value* shared = b.linear(x, w);
  Value* read_twice = b.add(h, shared);           // shared has a second reader: kept
  b.outputs({h2, late, broadcast, doubled, read_twice, b.relu(shared)});
  Interpreter interp(g);
  std::vector<const Value*> sums;
  for (const EpilogueFusion& f : interp.fusions())
    if (f.other) {
      EXPECT_EQ(f.other_op, EpilogueOp::add);
      sums.push_back(g.nodes()[size_t(f.tail)]->result());
    }
  EXPECT_EQ(sums, (std::vector<const Value*>{h1, h2}));
  Generator gen(7);
  const Bindings bind = {{"h", randn({3, 4, 6}, gen)}, {"x", randn({3, 4, 7}, gen)}, {"w", randn({6, 7}, gen)},
                         {"bias", randn({6}, gen)}, {"row", randn({6}, gen)}};
  expect_fusion_changes_nothing(interp, g, bind);
}

// gelu(x) and gelu_backward(grad, x) on the same x with the same approximation: the gelu node
// also computes the derivative and the backward node multiplies by it, bitwise equal to the two
// ops; a pair with different approximations and a pair whose x has a third reader keep their nodes.
TEST(Interpreter, KeepsTheGeluDerivativeFromTheForwardBitwise) {
  Graph g("gelu_pairs");
  Builder b(g);
  Value* x = b.input("x", DType::f32, {6, 40});
  Value* w = b.param("w", DType::f32, {40, 40});
  Value* grad = b.input("grad", DType::f32, {6, 40});
  auto backward = [&](Value* v, const std::string& approximate) {
    return b.record(ir::OpKind::gelu_backward, {grad, v}, {{"approximate", approximate}})[0];
  };
  std::vector<Value*> outs;
  std::vector<Value*> pre;
  for (const char* approximate : {"tanh", "none"}) {  // fused
    pre.push_back(b.linear(x, w));
    outs.push_back(b.gelu(pre.back(), approximate));
    outs.push_back(backward(pre.back(), approximate));
  }
  Value* mixed = b.linear(x, w);  // different approximations: kept
  outs.push_back(b.gelu(mixed, "tanh"));
  outs.push_back(backward(mixed, "none"));
  Value* shared = b.linear(x, w);  // a third reader: kept
  outs.push_back(b.gelu(shared, "tanh"));
  outs.push_back(backward(shared, "tanh"));
  outs.push_back(b.relu(shared));
  b.outputs(outs);
  Interpreter fused(g);
  ASSERT_EQ(fused.activation_grad_fusions().size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    const ActivationGradFusion& f = fused.activation_grad_fusions()[k];
    EXPECT_EQ(f.x, pre[k]);
    EXPECT_EQ(g.nodes()[size_t(f.forward)]->op, ir::OpKind::gelu);
    EXPECT_EQ(g.nodes()[size_t(f.backward)]->op, ir::OpKind::gelu_backward);
  }
  Generator gen(8);
  // Pre-activations of standard deviation about 25: both sides of every clamp (-20, -15, 9, 10,
  // 15, 20) and branch of the two kernels.
  const Bindings bind = {{"x", randn({6, 40}, gen, DType::f32, 0, 4)}, {"w", randn({40, 40}, gen)},
                         {"grad", randn({6, 40}, gen)}};
  expect_fusion_changes_nothing(fused, g, bind);  // the derivative replaces x, released after the gelu
}

// The gpt's training step (tanh gelu in each layer): every layer's pair is kept fused, and the
// step's loss, updated parameters and gradients are bitwise those of the unfused run.
TEST(Interpreter, TrainingStepWithTheKeptGeluDerivativeIsBitwiseTheSame) {
  ir::Graph fwd = ir::build_gpt({.vocab = 97, .hidden = 64, .heads = 4, .layers = 3, .max_seq = 16, .batch = 2,
                                 .seq = 11, .loss = true});
  const autodiff::TrainStep step = autodiff::make_train_step(fwd.clone(), autodiff::OptimizerConfig{}, /*with_grads=*/true);
  Bindings bind = ir::random_weights(fwd, 5);
  Generator gen(9);
  bind["input"] = randint({2, 11}, 0, 97, gen);
  bind["target"] = randint({2, 11}, 0, 97, gen);
  for (const auto& [k, v] : autodiff::fresh_state(step)) bind[k] = v;
  Interpreter fused(step.graph);
  EXPECT_EQ(fused.activation_grad_fusions().size(), 3u);
  expect_fusion_changes_nothing(fused, step.graph, bind);
}

// Hugging Face's rotary embedding, x·cos + cat(-x2, x1)·sin on a permuted [batch, heads, seq, 8]
// view, runs as one kernel bitwise equal to the seven ops; a chain with its halves swapped, one
// whose rotated half is also read elsewhere, and one whose neg reads a slice of another tensor
// keep their nodes.
TEST(Interpreter, FusesTheRotaryChainBitwise) {
  Graph g("rope");
  Builder b(g);
  Value* xin = b.input("x", DType::f32, {2, 5, 3, 8});
  Value* other = b.input("other", DType::f32, {2, 3, 5, 8});
  Value* cos = b.input("cos", DType::f32, {1, 1, 5, 8});
  Value* sin = b.input("sin", DType::f32, {5, 8});
  Value* x = b.permute(xin, {0, 2, 1, 3});
  auto neg = [&](Value* v) { return b.record(ir::OpKind::neg, {v})[0]; };
  auto rope = [&](Value* lo_src, int64_t lo, int64_t hi, bool cos_first) {
    Value* rotated = b.cat({neg(b.slice(lo_src, 3, lo, lo + 4)), b.slice(x, 3, hi, hi + 4)}, -1);
    return cos_first ? b.add(b.mul(cos, x), b.mul(rotated, sin)) : b.add(b.mul(sin, rotated), b.mul(x, cos));
  };
  Value* fused1 = rope(x, 4, 0, true);
  Value* fused2 = rope(x, 4, 0, false);
  Value* swapped = rope(x, 0, 4, true);
  Value* foreign = rope(other, 4, 0, true);
  Value* shared_neg = neg(b.slice(x, 3, 4, 8));
  Value* shared = b.add(b.mul(x, cos), b.mul(b.cat({shared_neg, b.slice(x, 3, 0, 4)}, -1), sin));
  b.outputs({fused1, fused2, swapped, foreign, shared, shared_neg});
  Interpreter fused(g);
  ASSERT_EQ(fused.rotary_fusions().size(), 2u);
  for (const RotaryFusion& f : fused.rotary_fusions()) {
    EXPECT_EQ(f.members.size(), 6u);
    EXPECT_EQ(f.x, x);
    EXPECT_EQ(f.cos, cos);
    EXPECT_EQ(f.sin, sin);
  }
  Generator gen(5);
  const Bindings bind = {{"x", randn({2, 5, 3, 8}, gen)}, {"other", randn({2, 3, 5, 8}, gen)},
                         {"cos", randn({1, 1, 5, 8}, gen)}, {"sin", randn({5, 8}, gen)}};
  expect_fusion_changes_nothing(fused, g, bind);  // the chains' intermediates are never made
  EXPECT_THROW(rotary_embedding(bind.at("x"), bind.at("cos"), bind.at("sin")), ShapeError);  // cos is [.., 5, 8]
  EXPECT_THROW(rotary_embedding(bind.at("x").to(DType::f64), bind.at("cos"), bind.at("sin")), DTypeError);
  EXPECT_THROW(rotary_embedding(Tensor::ones({3}), Tensor::ones({3}), Tensor::ones({3})), ShapeError);  // odd
}

// A gather along dim 2 as the sharding lowers it (stacked blocks, view, permute, join) runs as one
// gather into the joined layout: bitwise the unfused run's result, with the stacked buffer gone. A
// second chain whose permuted view is also an output keeps its nodes.
TEST(Interpreter, GathersAlongALaterDimStraightIntoTheJoin) {
  const Graph g = ir::parse(R"(graph gathers {
  group tp = [0, 1, 2]
  input %x : f32[2, 3, 5]
  %ag2 = all_gather_into_tensor(%x) {group = tp} : f32[6, 3, 5]
  %w2 = wait_tensor(%ag2) : f32[6, 3, 5]
  %m2 = view(%w2) {shape = [3, 2, 3, 5]} : f32[3, 2, 3, 5]
  %p2 = permute(%m2) {dims = [1, 0, 2, 3]} : f32[2, 3, 3, 5]
  %j2 = reshape(%p2) {shape = [2, 9, 5]} : f32[2, 9, 5]
  %ag = all_gather_into_tensor(%x) {group = tp} : f32[6, 3, 5]
  %w = wait_tensor(%ag) : f32[6, 3, 5]
  %m = view(%w) {shape = [3, 2, 3, 5]} : f32[3, 2, 3, 5]
  %p = permute(%m) {dims = [1, 2, 0, 3]} : f32[2, 3, 3, 5]
  %j = reshape(%p) {shape = [2, 3, 15]} : f32[2, 3, 15]
  return %j, %j2, %p2
})");
  std::mutex mu;
  std::vector<std::vector<Tensor>> fused(3), plain(3);
  std::vector<RunStats> fs(3), ps(3);
  run_ranks(3, [&](ProcessGroup& world) {
    const int r = world.rank();
    Interpreter a(g), b(g);
    b.set_fusion(false);
    {
      std::lock_guard lock(mu);
      ASSERT_EQ(a.gather_joins().size(), 1u);
      EXPECT_EQ(a.gather_joins()[0].dim, 2);
    }
    const Bindings bind = {{"x", Tensor::arange(30 * r, 30 * r + 30, 1, DType::f32).view({2, 3, 5})}};
    const GroupMap groups = make_groups(g, world);
    fused[size_t(r)] = a.run(bind, groups, &fs[size_t(r)]);
    plain[size_t(r)] = b.run(bind, groups, &ps[size_t(r)]);
  });
  for (size_t r = 0; r < 3; ++r) {
    ASSERT_EQ(fused[r].size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(bitwise_equal(fused[r][i], plain[r][i])) << "rank " << r << " output " << i;
    EXPECT_LT(fs[r].peak_bytes, ps[r].peak_bytes);
  }
  // Member j's block sits at columns [5j, 5j + 5) of the join.
  EXPECT_EQ(fused[1][0].to_doubles()[5], 30.0);
}

TEST(Interpreter, CallsTheNodeHookInOrder) {
  Graph g("hook");
  Builder b(g);
  Value* x = b.input("x", DType::f32, {3});
  b.outputs({b.silu(b.relu(x))});
  Interpreter interp(g);
  std::vector<std::string> seen;
  interp.set_node_hook([&](const ir::Node& n, size_t i, Clock::time_point t0, Clock::time_point t1) {
    EXPECT_LE(t0, t1);
    seen.push_back(std::to_string(i) + ":" + std::string(ir::op_name(n.op)));
  });
  interp.run({{"x", Tensor::ones({3})}});
  EXPECT_EQ(seen, (std::vector<std::string>{"0:relu", "1:silu"}));
}

TEST(Interpreter, RefusesMissingOrMistypedBindings) {
  Graph g("bind");
  Builder b(g);
  Value* x = b.input("x", DType::f32, {3});
  Value* w = b.param("w", DType::f32, {3});
  b.outputs({b.add(x, w)});
  Interpreter interp(g);
  try {
    interp.run({{"x", Tensor::ones({3})}});
    FAIL();
  } catch (const IoError& e) {
    EXPECT_STREQ(e.what(), "no tensor bound to parameter w");
  }
  try {
    interp.run({{"x", Tensor::ones({4})}, {"w", Tensor::ones({3})}});
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "tensor x in the bindings has shape [4] but the graph expects f32[3]");
  }
}

// Every collective on a 4-rank threads world; rank r's input is filled with r + 1.
// Issue 27.6: a kernel's user error names its node, keeping its type: by the node's statement in a
// graph built in code, and by file:line:col and the statement in a parsed one.
TEST(Interpreter, KernelErrorsNameTheirNode) {
  Graph g("lookup");
  Builder b(g);
  Value* table = b.input("table", DType::f32, {4, 3});
  Value* idx = b.input("idx", DType::i64, {2});
  Value* r = b.relu(table);
  Value* y = b.record(ir::OpKind::gather, {r, idx}, {{"dim", int64_t(0)}})[0];
  b.outputs({y});
  const Bindings bad = {{"table", Tensor::full({4, 3}, 1.0)}, {"idx", Tensor::from_vector<int64_t>({1, 4}, {2})}};
  try {
    Interpreter(g).run(bad, {});
    FAIL() << "no error";
  } catch (const ValueError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.starts_with("graph lookup, node 1 %" + y->name + " = gather(%" + r->name + ", %idx)")) << what;
    EXPECT_NE(what.find("index 4 is out of range"), std::string::npos) << what;
    EXPECT_EQ(e.line(), 0);
  }
  const Graph parsed = ir::parse(R"(graph lookup {
  input %table : f32[4, 3]
  input %idx : i64[2]
  %r = relu(%table) : f32[4, 3]
  %y = gather(%r, %idx) {dim = 0} : f32[2, 3]
  return %y
}
)", "lookup.dt");
  try {
    Interpreter(parsed).run(bad, {});
    FAIL() << "no error";
  } catch (const ValueError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.starts_with("lookup.dt:5:8: node %y = gather(%r, %idx) : f32[2, 3]: ")) << what;
    EXPECT_NE(what.find("index 4 is out of range"), std::string::npos) << what;
    EXPECT_EQ(e.line(), 5);
  }
  // In range: no error.
  EXPECT_NO_THROW(Interpreter(parsed).run({{"table", Tensor::full({4, 3}, 1.0)}, {"idx", Tensor::from_vector<int64_t>({1, 3}, {2})}}, {}));
}

TEST(Interpreter, CollectivesOnFourRanks) {
  const char* text = R"(graph coll {
  group world = [0, 1, 2, 3]
  input %x : f32[4, 2]
  %ag = all_gather_into_tensor(%x) {group = world} : f32[16, 2]
  %rs = reduce_scatter_tensor(%x) {group = world} : f32[1, 2]
  %ar = all_reduce(%x) {group = world, op = max} : f32[4, 2]
  %a2a = all_to_all_single(%x) {group = world} : f32[4, 2]
  %bc = broadcast(%x) {group = world, src = 2} : f32[4, 2]
  %ag_w = wait_tensor(%ag) : f32[16, 2]
  %rs_w = wait_tensor(%rs) : f32[1, 2]
  %ar_w = wait_tensor(%ar) : f32[4, 2]
  %a2a_w = wait_tensor(%a2a) : f32[4, 2]
  %bc_w = wait_tensor(%bc) : f32[4, 2]
  return %ag_w, %rs_w, %ar_w, %a2a_w, %bc_w, %x
}
)";
  Graph g = ir::parse(text, "coll.dt");
  std::mutex mu;
  std::vector<std::vector<Tensor>> results(4);
  run_ranks(4, [&](ProcessGroup& world) {
    const int r = world.rank();
    Interpreter interp(g);
    auto out = interp.run({{"x", Tensor::full({4, 2}, r + 1)}}, make_groups(g, world));
    std::lock_guard<std::mutex> lock(mu);
    results[size_t(r)] = out;
  });
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE(r);
    const auto& o = results[size_t(r)];
    for (int i = 0; i < 16; ++i) EXPECT_EQ(o[0].at({i, 0}), i / 4 + 1);
    EXPECT_EQ(o[1].to_doubles(), std::vector<double>(2, 10.0));  // 1+2+3+4
    EXPECT_EQ(o[2].to_doubles(), std::vector<double>(8, 4.0));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(o[3].at({i, 1}), i + 1);  // row i came from rank i
    EXPECT_EQ(o[4].to_doubles(), std::vector<double>(8, 3.0));
    EXPECT_EQ(o[5].to_doubles(), std::vector<double>(8, r + 1.0));  // inputs are not modified
  }
}

// Non-contiguous groups: ranks 0 and 2 form one group, 1 and 3 another; the group index (not
// the global rank) orders the gathered rows.
TEST(Interpreter, SubgroupsUseTheGroupIndex) {
  std::mutex mu;
  std::vector<std::vector<double>> gathered(4);
  run_ranks(4, [&](ProcessGroup& world) {
    const int r = world.rank();
    std::string text = std::string("graph sub {\n  group pair = ") + (r % 2 == 0 ? "[0, 2]" : "[1, 3]") +
                       "\n  input %x : f32[1]\n  %g = all_gather_into_tensor(%x) {group = pair} : f32[2]\n"
                       "  %w = wait_tensor(%g) : f32[2]\n  return %w\n}\n";
    Graph g = ir::parse(text, "sub.dt");
    Interpreter interp(g);
    auto out = interp.run({{"x", Tensor::full({1}, r)}}, make_groups(g, world));
    std::lock_guard<std::mutex> lock(mu);
    gathered[size_t(r)] = out[0].to_doubles();
  });
  EXPECT_EQ(gathered[0], (std::vector<double>{0, 2}));
  EXPECT_EQ(gathered[2], (std::vector<double>{0, 2}));
  EXPECT_EQ(gathered[3], (std::vector<double>{1, 3}));
}

TEST(Interpreter, SingleRankWorldRunsCollectivesAsIdentity) {
  Graph g("one");
  Builder b(g);
  b.group("world", {0});
  Value* x = b.input("x", DType::f32, {3});
  b.outputs({b.wait_tensor(b.all_reduce(x, "world"))});
  run_ranks(1, [&](ProcessGroup& world) {
    Interpreter interp(g);
    auto out = interp.run({{"x", Tensor::arange(3, DType::f32)}}, make_groups(g, world));
    EXPECT_EQ(out[0].to_doubles(), (std::vector<double>{0, 1, 2}));
  });
}

TEST(Interpreter, CollectiveOnAGroupThisRankIsNotInFails) {
  Graph g("notmember");
  Builder b(g);
  b.group("other", {1});
  Value* x = b.input("x", DType::f32, {3});
  b.outputs({b.wait_tensor(b.all_reduce(x, "other"))});
  EXPECT_THROW(run_ranks(2, [&](ProcessGroup& world) {
                 if (world.rank() != 0) return;
                 Interpreter interp(g);
                 interp.run({{"x", Tensor::ones({3})}}, make_groups(g, world));
               }),
               CommError);
}

// A program with arena_offset attributes writes those results into the arena (the kernel gets
// the arena tensor as its output), computes the same values as without, and refuses an arena
// smaller than its plan.
TEST(Interpreter, PlacesCommBuffersInTheArena) {
  ir::Graph g = ir::parse(R"(graph arena {
  group dp = [0, 1]
  input %x : f32[2, 8]
  %c = clone(%x) {arena_offset = 128} : f32[2, 8]
  %ag = all_gather_into_tensor(%c) {group = dp, arena_offset = 0} : f32[4, 8]
  %ag_w = wait_tensor(%ag) : f32[4, 8]
  %y = mul(%ag_w, %ag_w) : f32[4, 8]
  return %y
}
)");
  Interpreter probe(g);
  EXPECT_EQ(probe.arena_bytes(), 192u);
  try {
    probe.set_comm_arena(std::make_shared<SymmetricArena>(2, 64), 0);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "symmetric arena of 64 bytes per rank is smaller than the 192 bytes the program's comm buffers need");
  }
  auto arena = std::make_shared<SymmetricArena>(2, 192);
  std::vector<Tensor> with(2), without(2);
  std::vector<std::vector<std::pair<const ir::Value*, size_t>>> placed(2);
  run_ranks(2, [&](ProcessGroup& world) {
    const int r = world.rank();
    GroupMap groups = make_groups(g, world);
    Bindings b = {{"x", Tensor::full({2, 8}, double(r + 1), DType::f32)}};
    Interpreter interp(g);
    without[size_t(r)] = interp.run(b, groups)[0];
    interp.set_comm_arena(arena, r);
    RunStats st;
    with[size_t(r)] = interp.run(b, groups, &st)[0];
    placed[size_t(r)] = interp.last_placements();
    EXPECT_EQ(st.arena_buffers, 2u);
    EXPECT_EQ(st.arena_bytes, 192u);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(allclose(with[size_t(r)], without[size_t(r)], 0, 0));
    ASSERT_EQ(placed[size_t(r)].size(), 2u);
    EXPECT_EQ(placed[size_t(r)][0].second, 128u);  // %c
    EXPECT_EQ(placed[size_t(r)][1].second, 0u);    // %ag
  }
  // The gathered rows: rank 0's ones then rank 1's twos, squared.
  const Tensor y = with[0].contiguous();
  EXPECT_EQ(y.data<float>()[0], 1.0f);
  EXPECT_EQ(y.data<float>()[31], 4.0f);
}

// The coalesced and out variants compute exactly what the single functional collectives do.
TEST(Interpreter, CollectiveVariantsMatchTheSingleCollectives) {
  const char* header = R"(graph v {
  group g = [0, 1, 2]
  input %a : f32[2, 4]
  input %b : f32[6]
  input %c : bf16[3, 2]
)";
  ir::Graph variants = ir::parse(std::string(header) + R"(  %agc0, %agc1 = all_gather_into_tensor_coalesced(%a, %c) {group = g} : f32[6, 4], bf16[9, 2]
  %rsc0, %rsc1 = reduce_scatter_tensor_coalesced(%b, %c) {group = g, op = max} : f32[2], bf16[1, 2]
  %arc0, %arc1 = all_reduce_coalesced(%a, %b) {group = g} : f32[2, 4], f32[6]
  %buf = mul(%a, %a) : f32[2, 4]
  %z = cat(%buf, %buf, %buf) : f32[6, 4]
  %out = all_gather_into_tensor_out(%a, %z) {group = g} : f32[6, 4]
  %ag0 = wait_tensor(%agc0) : f32[6, 4]
  %ag1 = wait_tensor(%agc1) : bf16[9, 2]
  %rs0 = wait_tensor(%rsc0) : f32[2]
  %rs1 = wait_tensor(%rsc1) : bf16[1, 2]
  %ar0 = wait_tensor(%arc0) : f32[2, 4]
  %ar1 = wait_tensor(%arc1) : f32[6]
  %o = wait_tensor(%out) : f32[6, 4]
  return %ag0, %ag1, %rs0, %rs1, %ar0, %ar1, %o
}
)");
  ir::Graph singles = ir::parse(std::string(header) + R"(  %ag0 = all_gather_into_tensor(%a) {group = g} : f32[6, 4]
  %ag1 = all_gather_into_tensor(%c) {group = g} : bf16[9, 2]
  %rs0 = reduce_scatter_tensor(%b) {group = g, op = max} : f32[2]
  %rs1 = reduce_scatter_tensor(%c) {group = g, op = max} : bf16[1, 2]
  %ar0 = all_reduce(%a) {group = g} : f32[2, 4]
  %ar1 = all_reduce(%b) {group = g} : f32[6]
  %o = all_gather_into_tensor(%a) {group = g} : f32[6, 4]
  %ag0_w = wait_tensor(%ag0) : f32[6, 4]
  %ag1_w = wait_tensor(%ag1) : bf16[9, 2]
  %rs0_w = wait_tensor(%rs0) : f32[2]
  %rs1_w = wait_tensor(%rs1) : bf16[1, 2]
  %ar0_w = wait_tensor(%ar0) : f32[2, 4]
  %ar1_w = wait_tensor(%ar1) : f32[6]
  %o_w = wait_tensor(%o) : f32[6, 4]
  return %ag0_w, %ag1_w, %rs0_w, %rs1_w, %ar0_w, %ar1_w, %o_w
}
)");
  std::vector<std::vector<Tensor>> got(3), want(3);
  run_ranks(3, [&](ProcessGroup& world) {
    const int r = world.rank();
    Generator gen(uint64_t(100 + r));
    Bindings b = {{"a", randn({2, 4}, gen)}, {"b", randn({6}, gen)}, {"c", randn({3, 2}, gen, DType::bf16)}};
    GroupMap groups = make_groups(variants, world);
    got[size_t(r)] = Interpreter(variants).run(b, groups);
    want[size_t(r)] = Interpreter(singles).run(b, groups);
  });
  for (size_t r = 0; r < 3; ++r) {
    ASSERT_EQ(got[r].size(), 7u);
    for (size_t k = 0; k < 7; ++k) {
      const Tensor x = got[r][k].contiguous(), y = want[r][k].contiguous();
      ASSERT_EQ(x.shape(), y.shape()) << "rank " << r << " output " << k;
      EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()), 0) << "rank " << r << " output " << k;
    }
  }
}

// Read-only linear weights (a safetensors file's) are packed once and reused across runs
// (packed_weights.h); a rebound one is packed again; writable weights are never kept packed: their
// linears pack them during each call, so a weight written in place between runs is followed, and
// the outputs are the same bits either way. A weight an in-place update writes (a training step)
// is never packed.
TEST(Interpreter, PacksConstantLinearWeightsOnceAndAgainWhenChanged) {
  if (!f32_packed_supported() || packed_isa() != PackedIsa::avx512)
    GTEST_SKIP() << "this CPU has no AVX-512, where linears multiply through the packed f32 GEMM";
  ScopedF32GemmPath scoped(F32GemmPath::packed);
  ASSERT_TRUE(f32_packed_linears());
  const Graph g = ir::parse(R"(graph lin {
  input %x : f32[9, 20]
  param %w : f32[70, 20]
  param %v : f32[5, 70]
  %h = linear(%x, %w) : f32[9, 70]
  %y = linear(%h, %v) : f32[9, 5]
  return %y
})");
  Interpreter interp(g);
  EXPECT_EQ(interp.packed_weights().packable_nodes(), 2u);
  Generator gen(9);
  const Tensor w = randn({70, 20}, gen), v = randn({5, 70}, gen), v2 = randn({5, 70}, gen);
  const io::SafetensorsFile file =
      io::SafetensorsFile::from_bytes(io::safetensors_bytes({{"w", w}, {"v", v}, {"v2", v2}}), "weights");
  Bindings bind = {{"x", randn({9, 20}, gen)}, {"w", file.get("w")}, {"v", file.get("v")}};
  const auto want = [&] { return linear(linear(bind["x"], bind["w"]), bind["v"]).to_doubles(); };
  EXPECT_EQ(interp.run(bind)[0].to_doubles(), want());
  EXPECT_EQ(interp.run(bind)[0].to_doubles(), want());
  EXPECT_EQ(interp.packed_weights().packs(), 2);  // once each
  bind["v"] = file.get("v2");  // rebound
  EXPECT_EQ(interp.run(bind)[0].to_doubles(), want());
  EXPECT_EQ(interp.packed_weights().packs(), 3);
  // Writable copies of the same weights: the same bits, nothing packed ahead.
  const std::vector<double> from_file = interp.run(bind)[0].to_doubles();
  bind["w"] = w.clone();
  bind["v"] = v2.clone();
  EXPECT_EQ(interp.run(bind)[0].to_doubles(), from_file);
  EXPECT_EQ(interp.packed_weights().packs(), 3);
  bind["w"].copy_(neg(bind["w"]));  // in place: same storage, new contents
  EXPECT_EQ(interp.run(bind)[0].to_doubles(), want());
  EXPECT_NE(interp.run(bind)[0].to_doubles(), from_file);
  EXPECT_EQ(interp.packed_weights().packs(), 3);
  {
    ScopedF32GemmPath blas(F32GemmPath::blas);
    EXPECT_EQ(interp.run(bind)[0].to_doubles(), want());
    EXPECT_EQ(interp.packed_weights().packs(), 3);
  }

  const Graph train = ir::parse(R"(graph step {
  input %x : f32[9, 20]
  param %w : f32[70, 20]
  input %g : f32[70, 20]
  %h = linear(%x, %w) : f32[9, 70]
  %w2 = sgd_update(%w, %g) {lr = 0.1} : f32[70, 20]
  return %h, %w2
})");
  EXPECT_EQ(Interpreter(train).packed_weights().packable_nodes(), 0u);
}

// One linear against a parameter, y = x @ w^T.
constexpr const char* kOneLinear = R"(graph lin {
  input %x : f32[9, 20]
  param %w : f32[70, 20]
  %y = linear(%x, %w) : f32[9, 70]
  return %y
})";

// On the AVX2 micro-kernels the packed path leaves linears on sgemm (f32_packed_linears: the AVX2
// kernel is slower than OpenBLAS's there): outputs sgemm's bit for bit, nothing packed.
TEST(Interpreter, Avx2PackedPathLeavesLinearsOnSgemm) {
  if (!f32_packed_supported()) GTEST_SKIP() << "this CPU has no AVX2 and FMA, which the packed f32 GEMM needs";
  ScopedF32GemmPath scoped(F32GemmPath::packed);
  ScopedPackedIsa narrow(PackedIsa::avx2);
  const Graph g = ir::parse(kOneLinear);
  Interpreter interp(g);
  EXPECT_EQ(interp.packed_weights().packable_nodes(), 1u);
  Generator gen(10);
  const Bindings bind = {{"x", randn({9, 20}, gen)}, {"w", randn({70, 20}, gen)}};
  for (int run = 0; run < 2; ++run)
    EXPECT_EQ(interp.run(bind)[0].to_doubles(), linear(bind.at("x"), bind.at("w")).to_doubles());
  EXPECT_EQ(interp.packed_weights().packs(), 0);
}

// Weights loaded from a safetensors file are read-only (their bytes are the file's): packed once,
// since they cannot change; a weight rebound to another file's tensor is packed again, and a
// writable one is not kept packed. An in-place update of such a parameter writes a copy even when
// the caller hands the parameters over, and copy_ into one is refused.
TEST(Interpreter, ReadOnlyWeightsArePackedOnce) {
  if (!f32_packed_supported() || packed_isa() != PackedIsa::avx512)
    GTEST_SKIP() << "this CPU has no AVX-512, where linears multiply through the packed f32 GEMM";
  ScopedF32GemmPath scoped(F32GemmPath::packed);
  ASSERT_TRUE(f32_packed_linears());
  const Graph g = ir::parse(kOneLinear);
  Generator gen(10);
  const Tensor w1 = randn({70, 20}, gen), w2 = randn({70, 20}, gen);
  const io::SafetensorsFile file = io::SafetensorsFile::from_bytes(io::safetensors_bytes({{"w1", w1}, {"w2", w2}}), "w");
  Bindings bind = {{"x", randn({9, 20}, gen)}, {"w", file.get("w1")}};
  ASSERT_TRUE(bind["w"].storage()->read_only());
  Interpreter interp(g);
  const auto close = [](const Tensor& a, const Tensor& b) { return allclose(a, b, /*rtol=*/1e-5, /*atol=*/1e-5); };
  for (int run = 0; run < 3; ++run) EXPECT_TRUE(close(interp.run(bind)[0], linear(bind["x"], w1)));
  EXPECT_EQ(interp.packed_weights().packs(), 1);
  bind["w"] = file.get("w2");  // rebound: another storage
  EXPECT_TRUE(close(interp.run(bind)[0], linear(bind["x"], w2)));
  EXPECT_EQ(interp.packed_weights().packs(), 2);
  bind["w"] = w1;  // writable: packed during each call, never kept
  interp.run(bind);
  interp.run(bind);
  EXPECT_EQ(interp.packed_weights().packs(), 2);

  Tensor read_only = file.get("w1");
  EXPECT_THROW(read_only.copy_(w2), ValueError);
  EXPECT_THROW(read_only.fill_(0), ValueError);
  const Graph step = ir::parse(R"(graph step {
  param %w : f32[70, 20]
  input %g : f32[70, 20]
  %w2 = sgd_update(%w, %g) {lr = 0.5} : f32[70, 20]
  return %w2
})");
  Interpreter updater(step);
  updater.set_update_params_in_place(true);
  const Tensor updated = updater.run({{"w", read_only}, {"g", w2}})[0];
  EXPECT_FALSE(updated.shares_storage_with(read_only));
  EXPECT_EQ(read_only.to_doubles(), w1.to_doubles());  // the file's bytes are unchanged
  EXPECT_TRUE(close(updated, sub(w1, mul(w2, 0.5))));
}

}  // namespace
}  // namespace dt::runtime
