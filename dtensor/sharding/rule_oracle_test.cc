// The rule oracle: for every op with a sharding rule, a one-op graph whose inputs start in every
// combination of placements (R, S(d) for each dim, P(sum) for floating inputs) on mesh [2], and a
// seeded random sample of combinations on mesh [2, 2] (every combination there would be 5^(2k)),
// is propagated, partitioned, run on the threads backend and compared with the unsharded op.
// Shapes include sizes that do not divide the mesh (3, 5, 7). The test prints the ops without a
// rule and every incorrect (op, placements) pair, and fails on any incorrect one.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <random>

#include "dtensor/kernels/ops.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/builder.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/sharding/parallel_plan.h"
#include "tests/sharding/sharded_run.h"

namespace dt::sharding {
namespace {

using ir::Builder;
using ir::OpKind;
using ir::Value;

struct OpCase {
  std::string name;
  std::function<void(Builder&)> build;  // declares inputs in0, in1, ... and the output
};

Value* in(Builder& b, int i, const Shape& s, DType t = DType::f32) { return b.input("in" + std::to_string(i), t, s); }

std::vector<OpCase> cases() {
  std::vector<OpCase> c;
  auto add = [&](std::string name, std::function<void(Builder&)> f) { c.push_back({std::move(name), std::move(f)}); };
  add("linear", [](Builder& b) { b.outputs({b.linear(in(b, 0, {3, 5}), in(b, 1, {7, 5}), in(b, 2, {7}))}); });
  add("linear 3d no bias", [](Builder& b) { b.outputs({b.linear(in(b, 0, {2, 3, 5}), in(b, 1, {3, 5}))}); });
  add("matmul", [](Builder& b) { b.outputs({b.matmul(in(b, 0, {3, 5}), in(b, 1, {5, 3}))}); });
  add("matmul batch", [](Builder& b) { b.outputs({b.matmul(in(b, 0, {2, 3, 5}), in(b, 1, {5, 2}))}); });
  add("matmul 1d", [](Builder& b) { b.outputs({b.matmul(in(b, 0, {5}), in(b, 1, {5, 3}))}); });
  add("bmm", [](Builder& b) { b.outputs({b.bmm(in(b, 0, {2, 3, 5}), in(b, 1, {2, 5, 3}))}); });
  add("add broadcast", [](Builder& b) { b.outputs({b.add(in(b, 0, {2, 3, 5}), in(b, 1, {3, 5}))}); });
  add("sub", [](Builder& b) { b.outputs({b.sub(in(b, 0, {3, 5}), in(b, 1, {3, 5}))}); });
  add("mul broadcast 1", [](Builder& b) { b.outputs({b.mul(in(b, 0, {3, 5}), in(b, 1, {1, 5}))}); });
  add("div", [](Builder& b) { b.outputs({b.div(in(b, 0, {3, 5}), in(b, 1, {3, 5}))}); });
  add("relu", [](Builder& b) { b.outputs({b.relu(in(b, 0, {3, 5}))}); });
  add("gelu", [](Builder& b) { b.outputs({b.gelu(in(b, 0, {3, 5}), "tanh")}); });
  add("silu", [](Builder& b) { b.outputs({b.silu(in(b, 0, {3, 5}))}); });
  add("topk", [](Builder& b) {
    auto r = b.record(OpKind::topk, {in(b, 0, {3, 5})}, {{"k", int64_t(2)}, {"dim", int64_t(1)}});
    b.outputs({r[0], r[1]});
  });
  add("topk dim 0 smallest", [](Builder& b) {
    auto r = b.record(OpKind::topk, {in(b, 0, {5, 3})}, {{"k", int64_t(3)}, {"dim", int64_t(0)}, {"largest", false}});
    b.outputs({r[0], r[1]});
  });
  add("leaky_relu", [](Builder& b) {
    b.outputs({b.record(OpKind::leaky_relu, {in(b, 0, {3, 5})}, {{"negative_slope", 0.1}})[0]});
  });
  add("softplus", [](Builder& b) { b.outputs({b.record(OpKind::softplus, {in(b, 0, {3, 5})})[0]}); });
  // Equal pieces: the pieces rule (a blocked whole only comes from a fused projection's plan).
  add("split equal pieces", [](Builder& b) {
    auto parts = b.split(in(b, 0, {3, 6}), 2, 1);
    b.outputs({parts[0], parts[2]});
  });
  add("cat equal pieces", [](Builder& b) { b.outputs({b.cat({in(b, 0, {3, 2}), in(b, 1, {3, 2})}, 1)}); });
  add("cast", [](Builder& b) { b.outputs({b.cast(in(b, 0, {3, 5}), DType::f64)}); });
  add("layer_norm", [](Builder& b) { b.outputs({b.layer_norm(in(b, 0, {3, 5}), {5}, in(b, 1, {5}), in(b, 2, {5}))}); });
  add("rms_norm", [](Builder& b) { b.outputs({b.rms_norm(in(b, 0, {3, 5}), {5}, in(b, 1, {5}))}); });
  add("softmax", [](Builder& b) { b.outputs({b.softmax(in(b, 0, {3, 5}), 1)}); });
  add("embedding", [](Builder& b) { b.outputs({b.embedding(in(b, 0, {3, 2}, DType::i64), in(b, 1, {7, 5}))}); });
  add("view merge", [](Builder& b) { b.outputs({b.view(in(b, 0, {2, 3, 4}), {6, 4})}); });
  add("view split heads", [](Builder& b) { b.outputs({b.view(in(b, 0, {3, 8}), {3, 2, 4})}); });
  add("reshape", [](Builder& b) { b.outputs({b.reshape(in(b, 0, {6, 5}), {2, 3, 5})}); });
  add("transpose", [](Builder& b) { b.outputs({b.transpose(in(b, 0, {2, 3, 5}), 0, 2)}); });
  add("permute", [](Builder& b) { b.outputs({b.permute(in(b, 0, {2, 3, 5}), {2, 0, 1})}); });
  add("slice", [](Builder& b) { b.outputs({b.slice(in(b, 0, {5, 3}), 0, 1, 4)}); });
  add("split", [](Builder& b) { b.outputs(b.split_sizes(in(b, 0, {5, 3}), {2, 3}, 0)); });
  add("cat", [](Builder& b) { b.outputs({b.cat({in(b, 0, {2, 3}), in(b, 1, {3, 3})}, 0)}); });
  add("arange", [](Builder& b) { b.outputs({b.add(b.cast(b.arange(5), DType::f32), in(b, 0, {5}))}); });
  add("sdpa causal", [](Builder& b) {
    b.outputs({b.scaled_dot_product_attention(in(b, 0, {2, 2, 3, 4}), in(b, 1, {2, 2, 3, 4}), in(b, 2, {2, 2, 3, 4}), true)});
  });
  add("sdpa", [](Builder& b) {
    b.outputs({b.scaled_dot_product_attention(in(b, 0, {2, 3, 4}), in(b, 1, {2, 5, 4}), in(b, 2, {2, 5, 3}), false)});
  });
  // Grouped-query k/v: Hkv 2 divides mesh 2 (heads shard grouped); Hkv 3 does not (from q S(1): q
  // heads alone shard, each rank slicing or repeating the kv heads it reads; else batch and S);
  // masks broadcasting over batch and heads, with and without causal, explicit scale.
  add("sdpa gqa", [](Builder& b) {
    b.outputs({b.scaled_dot_product_attention(in(b, 0, {2, 4, 3, 4}), in(b, 1, {2, 2, 3, 4}), in(b, 2, {2, 2, 3, 3}))});
  });
  add("sdpa gqa heads not dividing", [](Builder& b) {
    b.outputs({b.scaled_dot_product_attention(in(b, 0, {1, 6, 3, 4}), in(b, 1, {1, 3, 5, 4}), in(b, 2, {1, 3, 5, 2}),
                                              false, nullptr, 0.7)});
  });
  add("sdpa gqa mask", [](Builder& b) {
    b.outputs({b.scaled_dot_product_attention(in(b, 0, {1, 4, 3, 4}), in(b, 1, {1, 2, 5, 4}), in(b, 2, {1, 2, 5, 3}),
                                              false, in(b, 3, {4, 1, 5}))});
  });
  add("sdpa causal mask", [](Builder& b) {
    b.outputs({b.scaled_dot_product_attention(in(b, 0, {2, 3, 5, 4}), in(b, 1, {2, 3, 5, 4}), in(b, 2, {2, 3, 5, 2}),
                                              true, in(b, 3, {5, 5}), 0.4)});
  });
  // conv: channels shard (one group), spatial dims of 5 replicate; groups 2 keep only the batch.
  using Ints = std::vector<int64_t>;
  auto conv_attrs = [](Ints stride, Ints padding, int64_t groups, Ints shape = {}) {
    ir::NamedAttrs a{{"stride", stride}, {"padding", padding}, {"dilation", Ints(stride.size(), 1)}, {"groups", groups}};
    if (!shape.empty()) a.push_back({"shape", shape});
    return a;
  };
  add("conv", [=](Builder& b) {
    b.outputs({b.record(OpKind::conv, {in(b, 0, {3, 4, 5, 5}), in(b, 1, {6, 4, 3, 3}), in(b, 2, {6})},
                        conv_attrs({1, 1}, {1, 1, 0, 0}, 1))[0]});
  });
  add("conv 1d groups 2", [=](Builder& b) {
    b.outputs({b.record(OpKind::conv, {in(b, 0, {3, 4, 7}), in(b, 1, {6, 2, 3})}, conv_attrs({2}, {1, 0}, 2))[0]});
  });
  add("conv_backward_input", [=](Builder& b) {
    b.outputs({b.record(OpKind::conv_backward_input, {in(b, 0, {3, 6, 4, 4}), in(b, 1, {6, 4, 3, 3})},
                        conv_attrs({1, 1}, {1, 1, 0, 0}, 1, {3, 4, 5, 5}))[0]});
  });
  add("conv_backward_weight", [=](Builder& b) {
    b.outputs({b.record(OpKind::conv_backward_weight, {in(b, 0, {3, 6, 4, 4}), in(b, 1, {3, 4, 5, 5})},
                        conv_attrs({1, 1}, {1, 1, 0, 0}, 1, {6, 4, 3, 3}))[0]});
  });
  add("sum", [](Builder& b) { b.outputs({b.sum(in(b, 0, {3, 5}), {1})}); });
  add("sum all", [](Builder& b) { b.outputs({b.sum(in(b, 0, {3, 5}))}); });
  add("mean keepdim", [](Builder& b) { b.outputs({b.mean(in(b, 0, {3, 5}), {0}, true)}); });
  add("mse_loss", [](Builder& b) { b.outputs({b.mse_loss(in(b, 0, {3, 5}), in(b, 1, {3, 5}))}); });
  for (OpKind k : {OpKind::exp, OpKind::log, OpKind::sqrt, OpKind::rsqrt, OpKind::tanh, OpKind::sigmoid, OpKind::erf,
                   OpKind::sin, OpKind::cos, OpKind::abs})
    add(std::string(ir::op_name(k)), [k](Builder& b) { b.outputs({b.record(k, {in(b, 0, {3, 5})})[0]}); });
  add("pow", [](Builder& b) { b.outputs({b.record(OpKind::pow, {in(b, 0, {3, 5})}, {{"exponent", 2.0}})[0]}); });
  add("clamp", [](Builder& b) {
    b.outputs({b.record(OpKind::clamp, {in(b, 0, {3, 5})}, {{"min", 0.8}, {"max", 1.2}})[0]});
  });
  add("maximum broadcast", [](Builder& b) { b.outputs({b.record(OpKind::maximum, {in(b, 0, {3, 5}), in(b, 1, {5})})[0]}); });
  add("minimum", [](Builder& b) { b.outputs({b.record(OpKind::minimum, {in(b, 0, {3, 5}), in(b, 1, {3, 5})})[0]}); });
  // Comparisons give bool results: cast back so the oracle compares numbers.
  for (OpKind k : {OpKind::eq, OpKind::ne, OpKind::lt, OpKind::le, OpKind::gt, OpKind::ge})
    add(std::string(ir::op_name(k)), [k](Builder& b) {
      b.outputs({b.cast(b.record(k, {in(b, 0, {3, 5}, DType::i64), in(b, 1, {1, 5}, DType::i64)})[0], DType::f32)});
    });
  add("where", [](Builder& b) {
    Value* c = b.record(OpKind::lt, {in(b, 0, {3, 5}, DType::i64), in(b, 1, {5}, DType::i64)})[0];
    b.outputs({b.record(OpKind::where, {c, in(b, 2, {3, 5}), in(b, 3, {3, 1})})[0]});
  });
  for (double fill : {0.0, -1e9})
    add("masked_fill " + std::to_string(fill), [fill](Builder& b) {
      Value* m = b.record(OpKind::gt, {in(b, 0, {5}, DType::i64), in(b, 1, {}, DType::i64)})[0];
      b.outputs({b.record(OpKind::masked_fill, {in(b, 2, {3, 5}), m}, {{"value", fill}})[0]});
    });
  add("log_softmax", [](Builder& b) { b.outputs({b.record(OpKind::log_softmax, {in(b, 0, {3, 5})}, {{"dim", int64_t(1)}})[0]}); });
  add("amax", [](Builder& b) {
    b.outputs({b.record(OpKind::amax, {in(b, 0, {3, 5})}, {{"dims", std::vector<int64_t>{1}}})[0]});
  });
  add("amin keepdim", [](Builder& b) {
    b.outputs({b.record(OpKind::amin, {in(b, 0, {3, 5})}, {{"dims", std::vector<int64_t>{0}}, {"keepdim", true}})[0]});
  });
  add("unsqueeze", [](Builder& b) {
    b.outputs({b.record(OpKind::unsqueeze, {in(b, 0, {3, 5})}, {{"dims", std::vector<int64_t>{0, -1}}})[0]});
  });
  add("squeeze", [](Builder& b) {
    b.outputs({b.record(OpKind::squeeze, {in(b, 0, {3, 1, 5})}, {{"dims", std::vector<int64_t>{1}}})[0]});
  });
  add("flatten", [](Builder& b) {
    b.outputs({b.record(OpKind::flatten, {in(b, 0, {2, 3, 5})}, {{"start_dim", int64_t(1)}})[0]});
  });
  add("constant", [](Builder& b) {
    Value* c = b.record(OpKind::constant, {}, {{"shape", std::vector<int64_t>{5}},
                                               {"values", std::vector<double>{1, 2, 3, 4, 5}}})[0];
    b.outputs({b.add(c, in(b, 0, {3, 5}))});
  });
  // Position-indexed ops (ops_index.cc): i64 inputs hold values in [0, 5), in range of the gathered dims.
  add("gather", [](Builder& b) {
    b.outputs({b.record(OpKind::gather, {in(b, 0, {3, 5}), in(b, 1, {2, 3}, DType::i64)}, {{"dim", int64_t(1)}})[0]});
  });
  add("gather dim 0", [](Builder& b) {
    b.outputs({b.record(OpKind::gather, {in(b, 0, {7, 3}), in(b, 1, {5}, DType::i64)})[0]});
  });
  add("gather_backward", [](Builder& b) {
    b.outputs({b.record(OpKind::gather_backward, {in(b, 0, {3, 2, 3}), in(b, 1, {2, 3}, DType::i64)},
                        {{"dim", int64_t(1)}, {"shape", std::vector<int64_t>{3, 5}}})[0]});
  });
  add("gather_elements", [](Builder& b) {
    b.outputs({b.record(OpKind::gather_elements, {in(b, 0, {3, 5}), in(b, 1, {3, 4}, DType::i64)}, {{"dim", int64_t(1)}})[0]});
  });
  add("gather_elements smaller off dim", [](Builder& b) {
    b.outputs({b.record(OpKind::gather_elements, {in(b, 0, {5, 3}), in(b, 1, {7, 2}, DType::i64)}, {{"dim", int64_t(0)}})[0]});
  });
  add("gather_elements_backward", [](Builder& b) {
    b.outputs({b.record(OpKind::gather_elements_backward, {in(b, 0, {3, 4}), in(b, 1, {3, 4}, DType::i64)},
                        {{"dim", int64_t(1)}, {"shape", std::vector<int64_t>{3, 5}}})[0]});
  });
  // The nd ops (index tuples over the leading dims): indexed dims of size 5, trailing ones uneven.
  add("gather_nd", [](Builder& b) {
    b.outputs({b.record(OpKind::gather_nd, {in(b, 0, {5, 5, 3}), in(b, 1, {4, 2}, DType::i64)})[0]});
  });
  add("gather_nd batch of tuples k 1", [](Builder& b) {
    b.outputs({b.record(OpKind::gather_nd, {in(b, 0, {5, 7}), in(b, 1, {3, 2, 1}, DType::i64)})[0]});
  });
  add("gather_nd_backward", [](Builder& b) {
    b.outputs({b.record(OpKind::gather_nd_backward, {in(b, 0, {4, 3}), in(b, 1, {4, 2}, DType::i64)},
                        {{"shape", std::vector<int64_t>{5, 5, 3}}})[0]});
  });
  add("scatter_nd", [](Builder& b) {
    b.outputs({b.record(OpKind::scatter_nd, {in(b, 0, {5, 3}), in(b, 1, {2, 1}, DType::i64), in(b, 2, {2, 3})})[0]});
  });
  for (OpKind k : {OpKind::argmax, OpKind::argmin})
    for (bool keep : {false, true})
      add(std::string(ir::op_name(k)) + (keep ? " keepdim" : ""), [k, keep](Builder& b) {
        b.outputs({b.cast(b.record(k, {in(b, 0, {3, 5})}, {{"dim", int64_t(keep ? 0 : 1)}, {"keepdim", keep}})[0], DType::f32)});
      });
  add("cumsum", [](Builder& b) {
    b.outputs({b.record(OpKind::cumsum, {in(b, 0, {3, 5})}, {{"dim", int64_t(1)}, {"exclusive", true}})[0]});
  });
  add("cumsum reverse dim 0", [](Builder& b) {
    b.outputs({b.record(OpKind::cumsum, {in(b, 0, {3, 5})}, {{"dim", int64_t(0)}, {"reverse", true}})[0]});
  });
  add("triu", [](Builder& b) { b.outputs({b.record(OpKind::triu, {in(b, 0, {2, 3, 5})}, {{"diagonal", int64_t(1)}})[0]}); });
  add("tril", [](Builder& b) { b.outputs({b.record(OpKind::tril, {in(b, 0, {3, 5})}, {{"diagonal", int64_t(-1)}})[0]}); });
  for (OpKind k : {OpKind::logical_and, OpKind::logical_or, OpKind::logical_xor})
    add(std::string(ir::op_name(k)), [k](Builder& b) {
      Value* x = b.record(OpKind::lt, {in(b, 0, {3, 5}, DType::i64), in(b, 1, {}, DType::i64)})[0];
      Value* y = b.record(OpKind::gt, {in(b, 2, {5}, DType::i64), in(b, 3, {}, DType::i64)})[0];
      b.outputs({b.cast(b.record(k, {x, y})[0], DType::f32)});
    });
  add("cross_entropy", [](Builder& b) { b.outputs({b.cross_entropy(in(b, 0, {3, 5}), in(b, 1, {3}, DType::i64))}); });
  // Targets are in [0, 5): ignore_index 3 drops some rows.
  for (const char* reduction : {"mean", "sum", "none"})
    for (OpKind k : {OpKind::cross_entropy, OpKind::nll_loss})
      add(std::string(ir::op_name(k)) + " " + reduction + " ignore", [k, reduction](Builder& b) {
        b.outputs({b.record(k, {in(b, 0, {3, 5}), in(b, 1, {3}, DType::i64)},
                            {{"reduction", std::string(reduction)}, {"ignore_index", int64_t(3)}})[0]});
      });
  add("cross_entropy sum", [](Builder& b) {
    b.outputs({b.record(OpKind::cross_entropy, {in(b, 0, {3, 5}), in(b, 1, {3}, DType::i64)},
                        {{"reduction", std::string("sum")}})[0]});
  });
  return c;
}

// Returns every placement a value may start in on one mesh dim.
std::vector<Placement> options_for(const Value* v) {
  std::vector<Placement> o{Placement::replicate()};
  for (int64_t d = 0; d < v->type.rank(); ++d) o.push_back(Placement::shard(d));
  if (is_floating(v->type.dtype)) o.push_back(Placement::partial(ReduceOp::sum));
  return o;
}

TensorMap inputs_for(const ir::Graph& g) {
  Generator gen(3);
  TensorMap m;
  for (const Value* v : g.inputs()) {
    if (v->type.dtype == DType::i64) m[v->name] = randint(v->type.shape, 0, 5, gen);
    else m[v->name] = rand(v->type.shape, gen, v->type.dtype, 0.5, 1.5);  // keeps div away from 0
  }
  return m;
}

// Returns "" when the sharded run equals the single run, else what differs.
std::string check(const ir::Graph& g, const DeviceMesh& mesh, const std::vector<Placements>& start, const TensorMap& x,
                  const std::vector<Tensor>& expected) {
  ResolvedPlan plan;
  plan.mesh_dim_names = mesh.ndim() == 1 ? std::vector<std::string>{"a"} : std::vector<std::string>{"a", "b"};
  plan.value_placements.assign(g.num_values(), {});
  plan.stored_only.assign(g.num_values(), 0);
  for (size_t i = 0; i < g.inputs().size(); ++i) plan.value_placements[size_t(g.inputs()[i]->id)] = start[i];
  plan.output_placements.assign(g.outputs().size(), Placements(size_t(mesh.ndim())));
  try {
    Sharding s = propagate(g, mesh, plan);
    std::vector<ir::Graph> programs;
    std::vector<const ir::Graph*> ptrs;
    std::vector<runtime::Bindings> bindings;
    for (int r : mesh.ranks()) {
      programs.push_back(partition(g, s, r));
      bindings.push_back(shard_inputs(g, s, x, r));
    }
    for (auto& p : programs) ptrs.push_back(&p);
    auto results = runtime::launch(ptrs, bindings);
    for (size_t r = 0; r < results.size(); ++r)  // outputs are replicated: every rank holds them
      for (size_t k = 0; k < expected.size(); ++k) {
        DiffReport d = compare(results[r].outputs[k], expected[k], 1e-5, 1e-5);
        if (!d.shapes_match || d.mismatches)
          return "rank " + std::to_string(r) + " output " + std::to_string(k) + " max_abs_diff " +
                 std::to_string(d.max_abs_diff);
      }
  } catch (const Error& e) {
    return std::string("error: ") + e.what();
  }
  return "";
}

// Grouped-query attention at a realistic size: hidden 512, 8 q heads and 2 kv heads of 64, S 257,
// causal plus a float mask [B, 1, 1, S] (padding-style), q/k/v column-wise and o row-wise on
// meshes 2 (divides Hkv: heads shard) and 3 (does not: the rule keeps heads whole), against one
// device. Inputs from a fixed seed.
TEST(RuleOracle, GroupedQueryAttentionTensorParallelAtHidden512) {
  constexpr int64_t B = 2, S = 257, H = 512, NH = 8, NKV = 2, D = 64;
  ir::Graph g("gqa512");
  Builder b(g);
  Value* x = b.input("x", DType::f32, {B, S, H});
  auto heads = [&](const std::string& proj, int64_t n) {
    Value* y = b.linear(x, b.param("attn." + proj + ".weight", DType::f32, {n * D, H}));
    return b.transpose(b.view(y, {B, S, n, D}), 1, 2);
  };
  Value* q = heads("q_proj", NH);
  Value* k = heads("k_proj", NKV);
  Value* v = heads("v_proj", NKV);
  Value* mask = b.input("mask", DType::f32, {B, 1, 1, S});
  Value* a = b.scaled_dot_product_attention(q, k, v, /*causal=*/true, mask);
  Value* o = b.reshape(b.transpose(a, 1, 2), {B, S, H});
  b.outputs({b.linear(o, b.param("attn.o_proj.weight", DType::f32, {H, H}))});
  Generator gen(11);
  TensorMap w, in;
  for (const Value* p : g.params()) w[p->name] = rand(p->type.shape, gen, DType::f32, -0.05, 0.05);
  in["x"] = rand({B, S, H}, gen, DType::f32, -1, 1);
  in["mask"] = rand({B, 1, 1, S}, gen, DType::f32, -2, 0);
  const std::vector<Tensor> single = testing::run_single(g, w, in);
  const ParallelPlan plan = ParallelPlan::parse(R"({"mesh_dims": ["tp"], "modules": [
      {"pattern": "attn.q_proj", "style": "colwise", "mesh_dim": "tp"},
      {"pattern": "attn.k_proj", "style": "colwise", "mesh_dim": "tp"},
      {"pattern": "attn.v_proj", "style": "colwise", "mesh_dim": "tp"},
      {"pattern": "attn.o_proj", "style": "rowwise", "mesh_dim": "tp"}]})");
  // More ranks than kv heads (vLLM's replicated kv heads): k/v projections replicated, q colwise,
  // and each rank's attention slices the kv head its q heads read (the alternative mapping,
  // ir/sharding_attention.cc): nothing is gathered. (q blocks crossing the groups, which repeat
  // the kv heads locally, are the oracle's "sdpa gqa heads not dividing" from q S(1).)
  const ParallelPlan q_only = ParallelPlan::parse(R"({"mesh_dims": ["tp"], "modules": [
      {"pattern": "attn.q_proj", "style": "colwise", "mesh_dim": "tp"},
      {"pattern": "attn.o_proj", "style": "rowwise", "mesh_dim": "tp"}]})");
  struct Layout {
    const ParallelPlan* plan;
    int64_t n, q_heads, kv_heads;  // each rank's attention reads; 0: not checked
  };
  // Mesh 2 shards heads grouped (4 q heads and their 1 kv head per rank).
  for (const Layout& l : {Layout{&plan, 2, 4, 1}, Layout{&plan, 3, 0, 0}, Layout{&q_only, 4, 2, 1},
                          Layout{&q_only, 8, 1, 1}}) {
    auto run = testing::run_sharded(g, *l.plan, DeviceMesh({l.n}), w, in);
    const std::string what = std::string(l.plan == &plan ? "qkv" : "q-only") + " tp on " + std::to_string(l.n);
    DiffReport d = compare(run.outputs[0], single[0], 1e-4, 1e-5);
    std::printf("gqa512 %s: max_abs_diff %.3g\n", what.c_str(), d.max_abs_diff);
    EXPECT_TRUE(d.shapes_match && d.mismatches == 0) << what << " max_abs_diff " << d.max_abs_diff;
    if (l.q_heads == 0) continue;
    EXPECT_TRUE(run.compiled.sharding.warnings.empty()) << what << ": " << run.compiled.sharding.warnings.front();
    for (size_t r = 0; r < run.compiled.programs.size(); ++r)
      for (const ir::Node* node : run.compiled.programs[r].nodes()) {
        EXPECT_NE(node->op, OpKind::all_gather_into_tensor) << what << " rank " << r;
        if (node->op != OpKind::scaled_dot_product_attention) continue;
        EXPECT_EQ(node->operands[0]->type.shape[1], l.q_heads) << what << " rank " << r;
        EXPECT_EQ(node->operands[1]->type.shape[1], l.kv_heads) << what << " rank " << r;
      }
  }
}

TEST(RuleOracle, EveryRuleIsCorrectForEveryStartingPlacement) {
  std::string missing;
  for (size_t i = 0; i < ir::kNumOps; ++i)
    if (!ir::op_def(OpKind(i)).sharding_rule) missing += std::string(missing.empty() ? "" : ", ") + std::string(ir::kOpNames[i]);
  std::printf("ops without a sharding rule (replicated fallback): %s\n", missing.c_str());
  EXPECT_EQ(ir::op_def(OpKind::linear).sharding_rule != nullptr, true);

  std::mt19937 rng(42);
  int checked = 0;
  std::vector<std::string> incorrect;
  for (const OpCase& oc : cases()) {
    ir::Graph g(oc.name);
    Builder b(g);
    oc.build(b);
    TensorMap x = inputs_for(g);
    std::vector<Tensor> expected = testing::run_single(g, {}, x);
    for (const DeviceMesh& mesh : {DeviceMesh({2}), DeviceMesh({2, 2})}) {
      const size_t nd = size_t(mesh.ndim());
      // Slots: (input, mesh dim); the combination index enumerates or samples them.
      std::vector<std::vector<Placement>> slots;
      for (const Value* v : g.inputs())
        for (size_t m = 0; m < nd; ++m) slots.push_back(options_for(v));
      size_t total = 1;
      for (auto& s : slots) total *= s.size();
      const size_t samples = nd == 1 ? total : std::min<size_t>(total, 24);
      for (size_t k = 0; k < samples; ++k) {
        size_t code = nd == 1 ? k : std::uniform_int_distribution<size_t>(0, total - 1)(rng);
        std::vector<Placements> start(g.inputs().size(), Placements(nd));
        for (size_t si = 0; si < slots.size(); ++si) {
          start[si / nd][si % nd] = slots[si][code % slots[si].size()];
          code /= slots[si].size();
        }
        std::string what = check(g, mesh, start, x, expected);
        ++checked;
        if (what.empty()) continue;
        // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on `" " + string`.
        std::string desc = oc.name + " on " + mesh.str() + " from";
        for (auto& p : start) {
          desc += ' ';
          desc += placements_str(p);
        }
        incorrect.push_back(desc + ": " + what);
      }
    }
  }
  std::printf("rule oracle: %d (op, placements) combinations checked, %zu incorrect\n", checked, incorrect.size());
  for (const auto& s : incorrect) std::printf("  incorrect: %s\n", s.c_str());
  EXPECT_TRUE(incorrect.empty());
}

// The position-indexed ops at a realistic size on a 3-rank mesh that divides none of the sharded
// dims: a gather of a [1000, 512] table (vocabulary 1000) by [4, 512] runtime indices, and cumsum
// and tril on [2, 8, 509, 509]; every starting placement listed must give the unsharded result.
TEST(RuleOracle, IndexOpsAtRealisticSizeOnThreeRanks) {
  const DeviceMesh mesh({3});
  struct Big {
    std::string name;
    std::function<void(Builder&)> build;
    std::vector<std::vector<Placement>> starts;  // per start: one placement per input
  };
  const Placement R = Placement::replicate(), P = Placement::partial(ReduceOp::sum);
  auto S = [](int64_t d) { return Placement::shard(d); };
  std::vector<Big> cases = {
      {"gather [1000, 512] by [4, 512]",
       [](Builder& b) {
         b.outputs({b.record(OpKind::gather, {in(b, 0, {1000, 512}), in(b, 1, {4, 512}, DType::i64)})[0]});
       },
       {{R, S(0)}, {R, S(1)}, {S(1), S(0)}, {S(0), R}, {P, S(0)}}},
      {"cumsum [2, 8, 509, 509]",
       [](Builder& b) {
         b.outputs({b.record(OpKind::cumsum, {in(b, 0, {2, 8, 509, 509})}, {{"dim", int64_t(2)}, {"reverse", true}})[0]});
       },
       {{S(1)}, {S(2)}, {S(3)}}},
      {"tril [2, 8, 509, 509]",
       [](Builder& b) { b.outputs({b.record(OpKind::tril, {in(b, 0, {2, 8, 509, 509})}, {{"diagonal", int64_t(-3)}})[0]}); },
       {{S(1)}, {S(3)}}},
  };
  for (const Big& c : cases) {
    ir::Graph g(c.name);
    Builder b(g);
    c.build(b);
    Generator gen(17);  // fixed seed; indices span the negative range too
    TensorMap x;
    for (const Value* v : g.inputs())
      x[v->name] = v->type.dtype == DType::i64 ? randint(v->type.shape, -1000, 1000, gen) : rand(v->type.shape, gen);
    const std::vector<Tensor> expected = testing::run_single(g, {}, x);
    for (const auto& start : c.starts) {
      std::vector<Placements> p;
      for (const Placement& pl : start) p.push_back(Placements{pl});
      EXPECT_EQ(check(g, mesh, p, x, expected), "") << c.name << " from " << placements_str(p[0]);
    }
  }
}

}  // namespace
}  // namespace dt::sharding
