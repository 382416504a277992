// Numerical gradient checks: for every op with a gradient rule, a small f64 graph
// loss = Σ_results sum(result · R) (R a fixed random input) is differentiated by autodiff and by
// central differences, and the two must agree. Shapes include broadcasting, uneven sizes and
// size-1 dims; a test checks that every op with a rule has a case here.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>

#include "dtensor/autodiff/autodiff.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/builder.h"
#include "dtensor/ir/verifier.h"
#include "dtensor/runtime/interpreter.h"

namespace dt::autodiff {
namespace {

using ir::Builder;
using ir::OpKind;
using ir::Value;

struct Case {
  std::string name;
  std::set<OpKind> covers;
  // Builds the op under test from the builder; returns the values whose weighted sums form the loss.
  std::function<std::vector<Value*>(Builder&)> build;
};

// Random f64 values in [lo, hi) from a fixed seed per name.
Tensor random(const Shape& shape, uint64_t seed, double lo = -1, double hi = 1) {
  Generator rng(seed);
  std::vector<double> v(size_t(numel(shape)));
  for (double& x : v) x = lo + (hi - lo) * rng.uniform();
  return Tensor::from_doubles(v, shape, DType::f64);
}

// Builds the case's graph with loss = Σ_i sum(r_i · R_i); returns it and the bindings of every
// input and parameter.
ir::Graph build_case(const Case& c, runtime::Bindings& bind) {
  ir::Graph g(c.name);
  Builder b(g);
  std::vector<Value*> results = c.build(b);
  Value* loss = nullptr;
  for (size_t i = 0; i < results.size(); ++i) {
    Value* r = b.input(std::string("R").append(std::to_string(i)), results[i]->type.dtype, results[i]->type.shape);
    Value* term = b.sum(b.mul(results[i], r));
    loss = loss ? b.add(loss, term) : term;
  }
  g.rename(loss, "loss");
  b.outputs({loss});
  uint64_t seed = 1;
  for (Value* v : g.params()) bind[v->name] = random(v->type.shape, seed++);
  for (Value* v : g.inputs()) {
    if (v->name == "one") bind[v->name] = Tensor::full({}, 1.0, DType::f64);
    else if (!is_floating(v->type.dtype)) bind[v->name] = random(v->type.shape, seed++, 0, 4).to(v->type.dtype);  // ids < 4
    else bind[v->name] = random(v->type.shape, seed++);
  }
  return g;
}

double run_loss(const ir::Graph& g, const runtime::Bindings& bind) {
  runtime::Interpreter interp(g);
  return interp.run(bind)[0].item();
}

void check_case(const Case& c) {
  SCOPED_TRACE(c.name);
  runtime::Bindings bind;
  ir::Graph forward = build_case(c, bind);
  ir::Graph backward = forward.clone();
  std::vector<Value*> params(backward.params().begin(), backward.params().end());
  std::vector<Value*> grads = append_gradients(backward, backward.outputs()[0], params);
  backward.set_outputs(grads);
  ir::verify(backward);
  std::vector<Tensor> analytic = runtime::Interpreter(backward).run(bind);
  const double h = 1e-6;
  Generator pick(7);
  for (size_t p = 0; p < params.size(); ++p) {
    const std::string& name = params[p]->name;
    ASSERT_TRUE(grads[p]) << name << " got no gradient";
    ASSERT_EQ(analytic[p].shape(), params[p]->type.shape) << name;
    const Tensor base = bind[name].clone();
    const int64_t n = base.numel();
    // Every element of small parameters, 24 sampled (fixed seed) of larger ones.
    std::vector<int64_t> elems;
    for (int64_t i = 0; i < n; ++i) elems.push_back(i);
    if (n > 24) {
      elems.clear();
      for (int k = 0; k < 24; ++k) elems.push_back(int64_t(pick.uniform() * double(n)) % n);
    }
    const Tensor a = analytic[p].contiguous().to(DType::f64);
    for (int64_t e : elems) {
      Tensor plus = base.clone(), minus = base.clone();
      static_cast<double*>(plus.raw_data())[e] += h;
      static_cast<double*>(minus.raw_data())[e] -= h;
      bind[name] = plus;
      const double lp = run_loss(forward, bind);
      bind[name] = minus;
      const double lm = run_loss(forward, bind);
      const double numeric = (lp - lm) / (2 * h);
      const double got = static_cast<const double*>(a.raw_data())[e];
      EXPECT_NEAR(got, numeric, 1e-6 + 1e-5 * std::abs(numeric)) << name << " element " << e;
    }
    bind[name] = base;
  }
}

Value* p(Builder& b, const std::string& name, const Shape& s) { return b.param(name, DType::f64, s); }

std::vector<Case> cases() {
  using V = std::vector<Value*>;
  return {
      {"linear", {OpKind::linear}, [](Builder& b) { return V{b.linear(p(b, "x", {2, 3, 4}), p(b, "w", {5, 4}), p(b, "b", {5}))}; }},
      {"linear_batch1_nobias", {OpKind::linear}, [](Builder& b) { return V{b.linear(p(b, "x", {1, 3}), p(b, "w", {2, 3}))}; }},
      {"matmul_broadcast", {OpKind::matmul}, [](Builder& b) { return V{b.matmul(p(b, "a", {2, 3, 4}), p(b, "b", {4, 5}))}; }},
      {"matmul_batch_broadcast", {OpKind::matmul},
       [](Builder& b) { return V{b.matmul(p(b, "a", {2, 1, 3, 4}), p(b, "b", {3, 4, 2}))}; }},
      {"bmm", {OpKind::bmm}, [](Builder& b) { return V{b.bmm(p(b, "a", {2, 3, 4}), p(b, "b", {2, 4, 5}))}; }},
      {"add_broadcast", {OpKind::add}, [](Builder& b) { return V{b.add(p(b, "a", {3, 4}), p(b, "b", {4}))}; }},
      {"sub_broadcast1", {OpKind::sub}, [](Builder& b) { return V{b.sub(p(b, "a", {3, 1}), p(b, "b", {1, 5}))}; }},
      {"mul_broadcast", {OpKind::mul}, [](Builder& b) { return V{b.mul(p(b, "a", {2, 3, 4}), p(b, "b", {3, 1}))}; }},
      {"div", {OpKind::div, OpKind::relu},
       [](Builder& b) {
         // b kept away from 0: relu(b) + 1
         Value* d = b.add(b.relu(p(b, "b", {3, 4})), b.input("one", DType::f64, {}));
         return V{b.div(p(b, "a", {3, 4}), d)};
       }},
      {"neg", {OpKind::neg}, [](Builder& b) { return V{b.record(OpKind::neg, {p(b, "x", {5})})[0]}; }},
      {"gelu", {OpKind::gelu}, [](Builder& b) { return V{b.gelu(p(b, "x", {7}))}; }},
      {"gelu_tanh", {OpKind::gelu}, [](Builder& b) { return V{b.gelu(p(b, "x", {7}), "tanh")}; }},
      {"silu", {OpKind::silu}, [](Builder& b) { return V{b.silu(p(b, "x", {7}))}; }},
      {"cast", {OpKind::cast}, [](Builder& b) { return V{b.cast(p(b, "x", {3}), DType::f64)}; }},
      {"layer_norm", {OpKind::layer_norm},
       [](Builder& b) { return V{b.layer_norm(p(b, "x", {2, 3, 6}), {6}, p(b, "w", {6}), p(b, "b", {6}))}; }},
      {"layer_norm_2d_noaffine", {OpKind::layer_norm}, [](Builder& b) { return V{b.layer_norm(p(b, "x", {2, 3, 5}), {3, 5})}; }},
      {"rms_norm", {OpKind::rms_norm}, [](Builder& b) { return V{b.rms_norm(p(b, "x", {4, 5}), {5}, p(b, "w", {5}))}; }},
      {"softmax_last", {OpKind::softmax}, [](Builder& b) { return V{b.softmax(p(b, "x", {3, 5}), -1)}; }},
      {"softmax_dim0", {OpKind::softmax}, [](Builder& b) { return V{b.softmax(p(b, "x", {4, 3}), 0)}; }},
      {"embedding", {OpKind::embedding},
       [](Builder& b) {
         return V{b.embedding(b.input("idx", DType::i64, {2, 3}), p(b, "w", {5, 4}))};
       }},
      {"view_reshape", {OpKind::view, OpKind::reshape},
       [](Builder& b) { return V{b.reshape(b.view(p(b, "x", {2, 6}), {3, 4}), {12})}; }},
      {"transpose_permute", {OpKind::transpose, OpKind::permute},
       [](Builder& b) { return V{b.permute(b.transpose(p(b, "x", {2, 3, 4}), 0, 2), {1, 2, 0})}; }},
      {"slice_step", {OpKind::slice}, [](Builder& b) { return V{b.slice(p(b, "x", {3, 7}), 1, 1, 6, 2)}; }},
      {"split_unused_piece", {OpKind::split},
       [](Builder& b) {
         std::vector<Value*> parts = b.split_sizes(p(b, "x", {3, 7}), {2, 4, 1}, 1);
         return V{parts[0], parts[2]};  // the middle piece reaches no loss: zeros fill its gradient
       }},
      {"cat", {OpKind::cat}, [](Builder& b) { return V{b.cat({p(b, "a", {2, 3}), p(b, "b", {1, 3})}, 0)}; }},
      {"expand", {OpKind::expand},
       [](Builder& b) {
         return V{b.record(OpKind::expand, {p(b, "x", {3, 1})}, {{"shape", std::vector<int64_t>{2, 3, 4}}})[0]};
       }},
      {"sdpa_causal", {OpKind::scaled_dot_product_attention},
       [](Builder& b) {
         return V{b.scaled_dot_product_attention(p(b, "q", {2, 5, 3}), p(b, "k", {2, 5, 3}), p(b, "v", {2, 5, 4}), true)};
       }},
      {"sdpa_cross", {OpKind::scaled_dot_product_attention},
       [](Builder& b) {
         return V{b.scaled_dot_product_attention(p(b, "q", {1, 2, 3, 4}), p(b, "k", {1, 2, 5, 4}), p(b, "v", {1, 2, 5, 2}))};
       }},
      // Grouped-query k/v (Hq / Hkv = 4 and 2: dk, dv sum over each group), explicit scale, float
      // masks broadcast over batch/heads (their gradient sums to the mask's shape), causal with a
      // mask, uneven S and S = 1.
      {"sdpa_gqa_causal_scale", {OpKind::scaled_dot_product_attention},
       [](Builder& b) {
         return V{b.scaled_dot_product_attention(p(b, "q", {1, 4, 5, 3}), p(b, "k", {1, 1, 5, 3}), p(b, "v", {1, 1, 5, 2}),
                                                 true, nullptr, 0.5)};
       }},
      {"sdpa_gqa_mask", {OpKind::scaled_dot_product_attention},
       [](Builder& b) {
         Value* q = p(b, "q", {2, 2, 3, 4});
         Value* k = p(b, "k", {2, 1, 7, 4});
         Value* v = p(b, "v", {2, 1, 7, 2});
         return V{b.scaled_dot_product_attention(q, k, v, false, p(b, "mask", {2, 1, 3, 7})),
                  b.scaled_dot_product_attention(q, k, v, true, p(b, "row_mask", {7}), 0.8)};
       }},
      {"sdpa_s1_mask", {OpKind::scaled_dot_product_attention},
       [](Builder& b) {
         return V{b.scaled_dot_product_attention(p(b, "q", {1, 2, 1, 3}), p(b, "k", {1, 2, 1, 3}), p(b, "v", {1, 2, 1, 2}),
                                                 true, p(b, "mask", {1, 1}))};
       }},
      {"sum_mean", {OpKind::sum, OpKind::mean},
       [](Builder& b) {
         Value* x = p(b, "x", {2, 1, 3});
         return V{b.sum(x, {1}, true), b.mean(x, {0, 2}), b.sum(x), b.mean(x)};
       }},
      {"math", {OpKind::exp, OpKind::tanh, OpKind::sigmoid, OpKind::erf, OpKind::sin, OpKind::cos, OpKind::abs},
       [](Builder& b) {
         Value* x = p(b, "x", {2, 5});
         V out;
         for (OpKind k : {OpKind::exp, OpKind::tanh, OpKind::sigmoid, OpKind::erf, OpKind::sin, OpKind::cos, OpKind::abs})
           out.push_back(b.record(k, {x})[0]);
         return out;
       }},
      {"log_sqrt_rsqrt_pow", {OpKind::log, OpKind::sqrt, OpKind::rsqrt, OpKind::pow},
       [](Builder& b) {
         // x kept positive: exp(x)
         Value* x = b.record(OpKind::exp, {p(b, "x", {2, 3})})[0];
         return V{b.record(OpKind::log, {x})[0], b.record(OpKind::sqrt, {x})[0], b.record(OpKind::rsqrt, {x})[0],
                  b.record(OpKind::pow, {x}, {{"exponent", 2.5}})[0], b.record(OpKind::pow, {x}, {{"exponent", 1.0}})[0]};
       }},
      // conv: x, weight and bias all parameters; 2-d with groups, stride, asymmetric pads and
      // dilation, and 1-d.
      {"conv2d", {OpKind::conv},
       [](Builder& b) {
         return V{b.record(OpKind::conv, {p(b, "x", {2, 4, 5, 6}), p(b, "w", {4, 2, 3, 2}), p(b, "bias", {4})},
                           {{"stride", std::vector<int64_t>{2, 1}}, {"padding", std::vector<int64_t>{1, 0, 0, 1}},
                            {"dilation", std::vector<int64_t>{1, 2}}, {"groups", int64_t(2)}})[0]};
       }},
      {"conv1d", {OpKind::conv},
       [](Builder& b) {
         return V{b.record(OpKind::conv, {p(b, "x", {2, 3, 7}), p(b, "w", {2, 3, 3})},
                           {{"stride", std::vector<int64_t>{2}}, {"padding", std::vector<int64_t>{1, 1}},
                            {"dilation", std::vector<int64_t>{1}}})[0]};
       }},
      {"topk", {OpKind::topk},
       [](Builder& b) {
         return V{b.record(OpKind::topk, {p(b, "x", {3, 5})}, {{"k", int64_t(2)}, {"dim", int64_t(1)}})[0]};
       }},
      {"topk_smallest_dim0", {OpKind::topk},
       [](Builder& b) {
         return V{b.record(OpKind::topk, {p(b, "x", {4, 3})}, {{"k", int64_t(3)}, {"dim", int64_t(0)}, {"largest", false}})[0]};
       }},
      {"leaky_relu", {OpKind::leaky_relu},
       [](Builder& b) { return V{b.record(OpKind::leaky_relu, {p(b, "x", {9})}, {{"negative_slope", 0.2}})[0]}; }},
      // beta 2, threshold 1: x from [-1, 1) crosses into the linear region (beta x > 1).
      {"softplus", {OpKind::softplus},
       [](Builder& b) {
         return V{b.record(OpKind::softplus, {p(b, "x", {9})}, {{"beta", 2.0}, {"threshold", 1.0}})[0]};
       }},
      {"clamp", {OpKind::clamp},
       [](Builder& b) { return V{b.record(OpKind::clamp, {p(b, "x", {9})}, {{"min", -0.5}, {"max", 0.4}})[0]}; }},
      {"maximum_minimum_broadcast", {OpKind::maximum, OpKind::minimum},
       [](Builder& b) {
         Value* x = p(b, "a", {3, 4});
         Value* y = p(b, "b", {4});
         return V{b.record(OpKind::maximum, {x, y})[0], b.record(OpKind::minimum, {y, x})[0]};
       }},
      {"where_masked_fill", {OpKind::where, OpKind::masked_fill},
       [](Builder& b) {
         Value* c = b.record(OpKind::lt, {b.input("idx", DType::i64, {3, 1}), b.input("jdx", DType::i64, {4})})[0];
         Value* x = p(b, "x", {3, 4});
         return V{b.record(OpKind::where, {c, x, p(b, "y", {4})})[0],
                  b.record(OpKind::masked_fill, {x, c}, {{"value", -2.0}})[0]};
       }},
      {"log_softmax", {OpKind::log_softmax},
       [](Builder& b) { return V{b.record(OpKind::log_softmax, {p(b, "x", {3, 5})}, {{"dim", int64_t(0)}})[0]}; }},
      {"amax_amin", {OpKind::amax, OpKind::amin},
       [](Builder& b) {
         Value* x = p(b, "x", {3, 5});
         return V{b.record(OpKind::amax, {x}, {{"dims", std::vector<int64_t>{1}}})[0],
                  b.record(OpKind::amin, {x}, {{"dims", std::vector<int64_t>{0}}, {"keepdim", true}})[0],
                  b.record(OpKind::amax, {x})[0]};
       }},
      {"unsqueeze_squeeze_flatten", {OpKind::unsqueeze, OpKind::squeeze, OpKind::flatten},
       [](Builder& b) {
         Value* x = b.record(OpKind::unsqueeze, {p(b, "x", {2, 3})}, {{"dims", std::vector<int64_t>{1}}})[0];
         Value* y = b.record(OpKind::squeeze, {x})[0];
         return V{b.record(OpKind::flatten, {b.mul(x, x)})[0], y};
       }},
      {"gather_any_dim", {OpKind::gather},
       [](Builder& b) {
         // Constant indices with a negative and a repeated one (their gradients accumulate), on
         // dim 1 of an uneven [3, 5] and dim 0 of a [1, 4] (size-1 dim, index tensor [2, 2]).
         Value* i1 = b.record(OpKind::constant, {}, {{"shape", std::vector<int64_t>{2, 3}},
                                                     {"values", std::vector<double>{4, -1, 0, 2, 2, -5}},
                                                     {"dtype", DType::i64}})[0];
         Value* i0 = b.record(OpKind::constant, {}, {{"shape", std::vector<int64_t>{2, 2}},
                                                     {"values", std::vector<double>{0, -1, 0, 0}},
                                                     {"dtype", DType::i64}})[0];
         return V{b.record(OpKind::gather, {p(b, "x", {3, 5}), i1}, {{"dim", int64_t(1)}})[0],
                  b.record(OpKind::gather, {p(b, "y", {1, 4}), i0}, {{"dim", int64_t(0)}})[0]};
       }},
      {"gather_runtime_indices", {OpKind::gather},
       [](Builder& b) {
         return V{b.record(OpKind::gather, {p(b, "x", {2, 4, 3}), b.input("idx", DType::i64, {5})}, {{"dim", int64_t(-2)}})[0]};
       }},
      {"gather_elements", {OpKind::gather_elements},
       [](Builder& b) {
         // dim 1 of a [3, 5] with [2, 4] indices (smaller off dim, negative and repeated ones).
         Value* i = b.record(OpKind::constant, {}, {{"shape", std::vector<int64_t>{2, 4}},
                                                    {"values", std::vector<double>{4, -1, 0, 0, 2, 2, -5, 1}},
                                                    {"dtype", DType::i64}})[0];
         return V{b.record(OpKind::gather_elements, {p(b, "x", {3, 5}), i}, {{"dim", int64_t(1)}})[0]};
       }},
      {"gather_nd", {OpKind::gather_nd},
       [](Builder& b) {
         // Tuples over the first two dims of a [3, 4, 2] (a negative and a repeated one, whose
         // gradients accumulate), and rows of a [5, 3] by a [2, 2, 1] batch of tuples.
         Value* i2 = b.record(OpKind::constant, {}, {{"shape", std::vector<int64_t>{3, 2}},
                                                     {"values", std::vector<double>{2, -1, 0, 1, 2, 3}},
                                                     {"dtype", DType::i64}})[0];
         return V{b.record(OpKind::gather_nd, {p(b, "x", {3, 4, 2}), i2})[0],
                  b.record(OpKind::gather_nd, {p(b, "y", {5, 3}), b.input("rows", DType::i64, {2, 2, 1})})[0]};
       }},
      // Distinct tuples: of repeated ones only the last write reaches the result, where the rule,
      // as PyTorch's index_put_, gives each of them the gradient (ONNX leaves repeats undefined).
      {"scatter_nd", {OpKind::scatter_nd},
       [](Builder& b) {
         Value* rows = b.record(OpKind::constant, {}, {{"shape", std::vector<int64_t>{2, 1}},
                                                       {"values", std::vector<double>{3, -5}},
                                                       {"dtype", DType::i64}})[0];
         Value* cells = b.record(OpKind::constant, {}, {{"shape", std::vector<int64_t>{3, 2}},
                                                        {"values", std::vector<double>{0, 1, 4, 2, 2, 0}},
                                                        {"dtype", DType::i64}})[0];
         Value* x = p(b, "x", {5, 3});
         return V{b.record(OpKind::scatter_nd, {x, rows, p(b, "u", {2, 3})})[0],
                  b.record(OpKind::scatter_nd, {b.mul(x, x), cells, p(b, "v", {3})})[0]};
       }},
      {"cumsum", {OpKind::cumsum},
       [](Builder& b) {
         Value* x = p(b, "x", {3, 4});
         V out;
         for (bool exclusive : {false, true})
           for (bool reverse : {false, true})
             out.push_back(b.record(OpKind::cumsum, {x}, {{"dim", int64_t(1)}, {"exclusive", exclusive}, {"reverse", reverse}})[0]);
         out.push_back(b.record(OpKind::cumsum, {p(b, "y", {1, 5})}, {{"dim", int64_t(0)}})[0]);
         return out;
       }},
      {"triu_tril", {OpKind::triu, OpKind::tril},
       [](Builder& b) {
         Value* x = p(b, "x", {2, 3, 4});
         return V{b.record(OpKind::triu, {x}, {{"diagonal", int64_t(1)}})[0],
                  b.record(OpKind::tril, {x}, {{"diagonal", int64_t(-1)}})[0],
                  b.record(OpKind::tril, {p(b, "y", {1, 5})})[0]};
       }},
      {"mse_loss", {OpKind::mse_loss}, [](Builder& b) { return V{b.mse_loss(p(b, "x", {3, 4}), p(b, "t", {3, 4}))}; }},
      {"cross_entropy", {OpKind::cross_entropy},
       [](Builder& b) { return V{b.cross_entropy(p(b, "logits", {4, 6}), b.input("target", DType::i64, {4}))}; }},
      // Targets are ids in [0, 4): ignore_index 2 drops some rows.
      {"cross_entropy_none_ignore", {OpKind::cross_entropy},
       [](Builder& b) {
         return V{b.record(OpKind::cross_entropy, {p(b, "logits", {6, 5}), b.input("target", DType::i64, {6})},
                           {{"reduction", std::string("none")}, {"ignore_index", int64_t(2)}})[0]};
       }},
      {"cross_entropy_sum", {OpKind::cross_entropy},
       [](Builder& b) {
         return V{b.record(OpKind::cross_entropy, {p(b, "logits", {4, 5}), b.input("target", DType::i64, {4})},
                           {{"reduction", std::string("sum")}})[0]};
       }},
      {"cross_entropy_mean_ignore", {OpKind::cross_entropy},
       [](Builder& b) {
         return V{b.record(OpKind::cross_entropy, {p(b, "logits", {6, 5}), b.input("target", DType::i64, {6})},
                           {{"ignore_index", int64_t(1)}})[0]};
       }},
      {"nll_loss", {OpKind::nll_loss},
       [](Builder& b) { return V{b.record(OpKind::nll_loss, {p(b, "logp", {4, 6}), b.input("target", DType::i64, {4})})[0]}; }},
      {"nll_loss_none_ignore", {OpKind::nll_loss},
       [](Builder& b) {
         return V{b.record(OpKind::nll_loss, {p(b, "logp", {6, 5}), b.input("target", DType::i64, {6})},
                           {{"reduction", std::string("none")}, {"ignore_index", int64_t(0)}})[0]};
       }},
  };
}

class GradCheck : public ::testing::TestWithParam<size_t> {};

TEST_P(GradCheck, MatchesCentralDifferences) { check_case(cases()[GetParam()]); }

INSTANTIATE_TEST_SUITE_P(EveryRule, GradCheck, ::testing::Range<size_t>(0, cases().size()),
                         [](const auto& info) { return cases()[info.param].name; });

TEST(GradCheck, EveryOpWithARuleHasACase) {
  std::set<OpKind> covered;
  for (const Case& c : cases()) covered.insert(c.covers.begin(), c.covers.end());
  for (size_t i = 0; i < ir::kNumOps; ++i)
    if (ir::op_def(OpKind(i)).grad) {
      EXPECT_TRUE(covered.count(OpKind(i))) << ir::op_name(OpKind(i)) << " has no case";
    }
}

}  // namespace
}  // namespace dt::autodiff
