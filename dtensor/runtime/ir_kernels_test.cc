// Each IR op run through the interpreter against the core kernels (or a naive double-precision
// loop where the IR composes kernels: attention, losses). Inputs are small seeded random tensors,
// including empty dims where the op allows them.
#include <gtest/gtest.h>

#include <cmath>

#include "dtensor/kernels/ops.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/builder.h"
#include "dtensor/runtime/interpreter.h"

namespace dt::runtime {
namespace {

using ir::Builder;
using ir::Graph;
using ir::Value;

class IrKernels : public ::testing::Test {
 protected:
  Value* in(const std::string& name, const Tensor& t) {
    bindings_[name] = t;
    return b_.input(name, t.dtype(), t.shape());
  }
  Tensor randn(const Shape& s) { return dt::randn(s, gen_); }
  // Runs the graph with `v` as its only output.
  Tensor run(Value* v) {
    b_.outputs({v});
    Interpreter interp(g_);
    return interp.run(bindings_)[0];
  }
  void expect_same(const Tensor& actual, const Tensor& expected, double tol = 1e-6) {
    ASSERT_EQ(actual.shape(), expected.shape());
    ASSERT_EQ(actual.dtype(), expected.dtype());
    auto a = actual.to_doubles(), e = expected.to_doubles();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], e[i], tol * (1 + std::abs(e[i]))) << "element " << i;
  }

  Graph g_{"k"};
  Builder b_{g_};
  Bindings bindings_;
  Generator gen_{5};
};

TEST_F(IrKernels, Linear) {
  Tensor x = randn({2, 3, 5}), w = randn({4, 5}), bias = randn({4});
  expect_same(run(b_.linear(in("x", x), in("w", w), in("b", bias))), linear(x, w, bias));
}

TEST_F(IrKernels, LinearWithoutBiasAndEmptyBatch) {
  Tensor x = randn({0, 5}), w = randn({4, 5});
  expect_same(run(b_.linear(in("x", x), in("w", w))), linear(x, w));
}

TEST_F(IrKernels, MatmulBroadcastsBatchAndVectors) {
  Tensor a = randn({2, 1, 3, 4}), c = randn({5, 4, 2}), v = randn({4});
  Value* va = in("a", a);
  Value* vc = in("c", c);
  Value* vv = in("v", v);
  Value* m = b_.matmul(va, vc);
  Value* mv = b_.matmul(va, vv);
  b_.outputs({m, mv});
  Interpreter interp(g_);
  auto out = interp.run(bindings_);
  expect_same(out[0], matmul(a, c));
  expect_same(out[1], matmul(a, v));
  EXPECT_EQ(out[0].shape(), (Shape{2, 5, 3, 2}));
}

TEST_F(IrKernels, Bmm) {
  Tensor a = randn({3, 2, 4}), c = randn({3, 4, 5});
  expect_same(run(b_.bmm(in("a", a), in("c", c))), bmm(a, c));
}

TEST_F(IrKernels, BinaryOpsBroadcast) {
  Tensor a = randn({3, 1, 4}), c = randn({2, 4});
  Value* va = in("a", a);
  Value* vc = in("c", c);
  b_.outputs({b_.add(va, vc), b_.sub(va, vc), b_.mul(va, vc), b_.div(va, vc)});
  auto out = Interpreter(g_).run(bindings_);
  expect_same(out[0], add(a, c));
  expect_same(out[1], sub(a, c));
  expect_same(out[2], mul(a, c));
  expect_same(out[3], div(a, c));
}

TEST_F(IrKernels, Activations) {
  Tensor x = randn({5, 7});
  Value* vx = in("x", x);
  b_.outputs({b_.relu(vx), b_.gelu(vx), b_.gelu(vx, "tanh"), b_.silu(vx), b_.cast(vx, DType::f64)});
  auto out = Interpreter(g_).run(bindings_);
  expect_same(out[0], relu(x));
  expect_same(out[1], gelu(x));
  expect_same(out[2], gelu(x, "tanh"));
  expect_same(out[3], silu(x));
  expect_same(out[4], cast(x, DType::f64));
  // Independent check of the tanh approximation's formula at one point.
  double v = x.at({0, 0});
  double ref = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  EXPECT_NEAR(out[2].at({0, 0}), ref, 1e-6);
}

TEST_F(IrKernels, Norms) {
  Tensor x = randn({3, 4, 6}), w = randn({6}), bias = randn({6});
  Value* vx = in("x", x);
  Value* vw = in("w", w);
  Value* vb = in("b", bias);
  b_.outputs({b_.layer_norm(vx, {6}, vw, vb), b_.layer_norm(vx, {4, 6}, nullptr, nullptr, 1e-3),
              b_.rms_norm(vx, {6}, vw), b_.softmax(vx, 1)});
  auto out = Interpreter(g_).run(bindings_);
  expect_same(out[0], layer_norm(x, {6}, w, bias));
  expect_same(out[1], layer_norm(x, {4, 6}, Tensor(), Tensor(), 1e-3));
  expect_same(out[2], rms_norm(x, {6}, w));
  expect_same(out[3], softmax(x, 1));
}

TEST_F(IrKernels, ShapeOps) {
  Tensor x = randn({4, 6});
  Tensor ids = Tensor::from_vector<int64_t>({3, 0, 9, 3}, {2, 2});
  Tensor emb = randn({10, 5});
  Value* vx = in("x", x);
  Value* vi = in("ids", ids);
  Value* ve = in("emb", emb);
  auto parts = b_.split(vx, 4, 1);
  auto pieces = b_.split_sizes(vx, {1, 0, 3}, 0);
  b_.outputs({b_.embedding(vi, ve), b_.reshape(b_.transpose(vx, 0, 1), {3, -1}), b_.permute(b_.view(vx, {2, 2, 6}), {2, 0, 1}),
              b_.slice(vx, 1, -5, 6, 2), parts[1], pieces[1], b_.cat({pieces[2], pieces[0]}, 0), b_.arange(7, 1, 2)});
  auto out = Interpreter(g_).run(bindings_);
  expect_same(out[0], embedding(ids, emb));
  expect_same(out[1], x.transpose(0, 1).reshape({3, 8}));
  expect_same(out[2], x.view({2, 2, 6}).permute({2, 0, 1}));
  expect_same(out[3], x.slice(1, 1, 6, 2));
  expect_same(out[4], x.slice(1, 4, 6));
  EXPECT_EQ(out[5].shape(), (Shape{0, 6}));
  expect_same(out[6], cat({x.slice(0, 1, 4), x.slice(0, 0, 1)}, 0));
  EXPECT_EQ(out[7].to_doubles(), (std::vector<double>{1, 3, 5}));
}

TEST_F(IrKernels, Reductions) {
  Tensor x = randn({3, 4, 5});
  Value* vx = in("x", x);
  b_.outputs({b_.sum(vx), b_.sum(vx, {0, 2}, true), b_.mean(vx, {-1})});
  auto out = Interpreter(g_).run(bindings_);
  expect_same(out[0], sum(x));
  expect_same(out[1], sum(x, {0, 2}, true));
  expect_same(out[2], mean(x, {-1}));
}

// Naive attention in double: softmax(q·kᵀ/sqrt(D) + causal mask)·v.
std::vector<double> naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const int64_t B = q.size(0), H = q.size(1), S = q.size(2), D = q.size(3), Sk = k.size(2), Dv = v.size(3);
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < S; ++i) {
        std::vector<double> p(size_t(Sk), 0);
        double mx = -INFINITY, z = 0;
        for (int64_t j = 0; j < Sk; ++j) {
          if (causal && j > i) {
            p[size_t(j)] = -INFINITY;
            continue;
          }
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += q.at({b, h, i, d}) * k.at({b, h, j, d});
          p[size_t(j)] = s / std::sqrt(double(D));
          mx = std::max(mx, p[size_t(j)]);
        }
        for (double& e : p) z += (e = std::exp(e - mx));
        for (int64_t d = 0; d < Dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < Sk; ++j) acc += p[size_t(j)] / z * v.at({b, h, j, d});
          out.push_back(acc);
        }
      }
  return out;
}

TEST_F(IrKernels, ScaledDotProductAttention) {
  Tensor q = randn({2, 3, 5, 4}), k = randn({2, 3, 7, 4}), v = randn({2, 3, 7, 6});
  Value* vq = in("q", q);
  Value* vk = in("k", k);
  Value* vv = in("v", v);
  b_.outputs({b_.scaled_dot_product_attention(vq, vk, vv), b_.scaled_dot_product_attention(vq, vk, vv, true)});
  auto out = Interpreter(g_).run(bindings_);
  for (int causal = 0; causal < 2; ++causal) {
    auto ref = naive_attention(q, k, v, causal);
    auto got = out[size_t(causal)].to_doubles();
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-5) << "causal " << causal << " element " << i;
  }
}

TEST_F(IrKernels, Losses) {
  Tensor a = randn({4, 3}), t = randn({4, 3});
  Tensor logits = randn({5, 7});
  Tensor labels = Tensor::from_vector<int64_t>({0, 6, 3, 3, 1}, {5});
  Value* va = in("a", a);
  Value* vt = in("t", t);
  Value* vl = in("logits", logits);
  Value* vy = in("labels", labels);
  b_.outputs({b_.mse_loss(va, vt), b_.cross_entropy(vl, vy)});
  auto out = Interpreter(g_).run(bindings_);
  double mse = 0;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) mse += std::pow(a.at({i, j}) - t.at({i, j}), 2) / 12;
  EXPECT_NEAR(out[0].item(), mse, 1e-6);
  double ce = 0;
  for (int64_t i = 0; i < 5; ++i) {
    double z = 0;
    for (int64_t c = 0; c < 7; ++c) z += std::exp(logits.at({i, c}));
    ce += (std::log(z) - logits.at({i, int64_t(labels.at({i}))})) / 5;
  }
  EXPECT_NEAR(out[1].item(), ce, 1e-5);
  EXPECT_EQ(out[1].shape(), Shape{});
}

TEST_F(IrKernels, CrossEntropyRefusesOutOfRangeTargets) {
  Value* vl = in("logits", randn({2, 3}));
  Value* vy = in("labels", Tensor::from_vector<int64_t>({0, 3}, {2}));
  EXPECT_THROW(run(b_.cross_entropy(vl, vy)), ValueError);
}

// cross_entropy and nll_loss with PyTorch's reduction and ignore_index, against a double loop:
// ignored rows give 0 and do not count in the mean; all rows ignored: NaN (torch's 0/0); an
// ignored row's target may be out of range, another's may not.
TEST_F(IrKernels, LossReductionsAndIgnoreIndex) {
  const Tensor logits = randn({4, 3});
  const Tensor logp = log_softmax(logits, 1);
  const std::vector<int64_t> t = {2, -100, 0, 2};
  Value* vl = in("logits", logits);
  Value* vy = in("target", Tensor::from_vector(t, {4}));
  auto ce = [&](ir::OpKind k, const std::string& reduction, int64_t ignore) {
    return b_.record(k, {k == ir::OpKind::nll_loss ? b_.record(ir::OpKind::log_softmax, {vl}, {{"dim", int64_t(1)}})[0] : vl, vy},
                     {{"reduction", reduction}, {"ignore_index", ignore}})[0];
  };
  std::vector<double> rows;
  double total = 0;
  for (int64_t i = 0; i < 4; ++i) {
    const double l = t[size_t(i)] == -100 ? 0.0 : -logp.to_doubles()[size_t(i * 3 + t[size_t(i)])];
    rows.push_back(l);
    total += l;
  }
  for (ir::OpKind k : {ir::OpKind::cross_entropy, ir::OpKind::nll_loss}) {
    b_.outputs({ce(k, "none", -100), ce(k, "sum", -100), ce(k, "mean", -100)});
    std::vector<Tensor> out = Interpreter(g_).run(bindings_);
    expect_same(out[0], Tensor::from_doubles(rows, {4}, DType::f32), 1e-5);
    EXPECT_NEAR(out[1].item(), total, 1e-5);
    EXPECT_NEAR(out[2].item(), total / 3, 1e-5);  // 3 rows kept
  }
  Value* all = in("ignored", Tensor::from_vector(std::vector<int64_t>{7, 7, 7, 7}, {4}));
  b_.outputs({b_.record(ir::OpKind::cross_entropy, {vl, all}, {{"ignore_index", int64_t(7)}})[0]});
  EXPECT_TRUE(std::isnan(Interpreter(g_).run(bindings_)[0].item()));
  b_.outputs({ce(ir::OpKind::cross_entropy, "mean", 0)});  // -100 is not ignored now
  EXPECT_THROW(Interpreter(g_).run(bindings_), ValueError);
  EXPECT_THROW(b_.record(ir::OpKind::nll_loss, {vl, vy}, {{"reduction", std::string("avg")}}), ValueError);
}

TEST_F(IrKernels, LeakyReluAndSoftplus) {
  const Tensor x = Tensor::from_doubles({-30, -1, -0.5, 0, 0.25, 2, 30}, {7}, DType::f32);
  Value* vx = in("x", x);
  b_.outputs({b_.record(ir::OpKind::leaky_relu, {vx}, {{"negative_slope", 0.2}})[0],
              b_.record(ir::OpKind::softplus, {vx})[0],
              b_.record(ir::OpKind::softplus, {vx}, {{"beta", 2.0}, {"threshold", 1.0}})[0]});
  std::vector<Tensor> out = Interpreter(g_).run(bindings_);
  const std::vector<double> xs = x.to_doubles();
  std::vector<double> lr, sp, sp2;
  for (double v : xs) {
    lr.push_back(v < 0 ? 0.2 * v : v);
    sp.push_back(v > 20 ? v : std::log1p(std::exp(v)));
    sp2.push_back(2 * v > 1 ? v : std::log1p(std::exp(2 * v)) / 2);
  }
  expect_same(out[0], Tensor::from_doubles(lr, {7}, DType::f32));
  expect_same(out[1], Tensor::from_doubles(sp, {7}, DType::f32));
  expect_same(out[2], Tensor::from_doubles(sp2, {7}, DType::f32));
}

// topk against a sort of each row: values and indices, largest and smallest, ties the lower index
// first, NaN the largest; k out of range is an error.
TEST_F(IrKernels, TopK) {
  const double nan = std::nan("");
  const Tensor x = Tensor::from_doubles({3, 1, 3, nan, 0, -2, 5, 5, 1, 0}, {2, 5}, DType::f32);
  Value* vx = in("x", x);
  auto top = b_.record(ir::OpKind::topk, {vx}, {{"k", int64_t(3)}});
  auto low = b_.record(ir::OpKind::topk, {vx}, {{"k", int64_t(2)}, {"largest", false}});
  auto col = b_.record(ir::OpKind::topk, {vx}, {{"k", int64_t(1)}, {"dim", int64_t(0)}});
  b_.outputs({top[0], top[1], low[0], low[1], col[1]});
  std::vector<Tensor> out = Interpreter(g_).run(bindings_);
  std::vector<double> v = out[0].to_doubles();
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(std::vector<double>(v.begin() + 1, v.end()), (std::vector<double>{3, 3, 5, 5, 1}));
  EXPECT_EQ(out[1].to_doubles(), (std::vector<double>{3, 0, 2, 1, 2, 3}));
  EXPECT_EQ(out[2].to_doubles(), (std::vector<double>{0, 1, -2, 0}));
  EXPECT_EQ(out[3].to_doubles(), (std::vector<double>{4, 1, 0, 4}));
  EXPECT_EQ(out[4].to_doubles(), (std::vector<double>{0, 1, 1, 0, 0}));  // nan largest; 0 = 0: the lower index
  EXPECT_THROW(b_.record(ir::OpKind::topk, {vx}, {{"k", int64_t(6)}}), ValueError);
}

}  // namespace
}  // namespace dt::runtime
