// The vdpbf16ps GEMM against float64 products of the same bf16 values, at shapes on and off every
// blocking edge, and the two bf16 GEMM paths against each other through the ops.
#include "dtensor/kernels/gemm_bf16_dot.h"

#include <cmath>
#include <cstdlib>
#include <vector>

#include "tests/support/ops_test_util.h"

namespace dt {
namespace {

using test::uniform;

#define DT_SKIP_WITHOUT_BF16_DOT() \
  if (!bf16_dot_supported()) GTEST_SKIP() << "this CPU has no AVX512-BF16 (vdpbf16ps), which the dot GEMM needs"

// Runs body once per instruction set of the dot path this CPU has (vdpbf16ps; AMX where present).
template <class Body>
void at_each_dot_isa(Body body) {
  for (Bf16DotIsa isa : {Bf16DotIsa::avx512bf16, Bf16DotIsa::amx}) {
    if (isa == Bf16DotIsa::amx && !amx_bf16_supported()) continue;
    SCOPED_TRACE(isa == Bf16DotIsa::amx ? "AMX" : "vdpbf16ps");
    ScopedBf16DotIsa scoped(isa);
    body();
  }
}

struct DotCase {
  int64_t m, n, k;
  bool b_transposed;  // b is the transpose of a row-major [n, k] (a linear's weight.T)
  float alpha, beta;
};

// Runs gemm_bf16_dot on seeded bf16 operands and checks it against the f64 sums of the same products
// (products of two bf16 values are exact in f32, so f32 accumulation is the only error).
void expect_dot_matches_f64(const DotCase& t) {
  SCOPED_TRACE(testing::Message() << "m " << t.m << " n " << t.n << " k " << t.k << " transposed " << t.b_transposed
                                  << " alpha " << t.alpha << " beta " << t.beta);
  const Tensor a = uniform({t.m, t.k}, DType::f32, 41, -2, 2).to(DType::bf16);
  const Tensor b_stored = t.b_transposed ? uniform({t.n, t.k}, DType::f32, 42, -1, 1).to(DType::bf16)
                                         : uniform({t.k, t.n}, DType::f32, 42, -1, 1).to(DType::bf16);
  const Tensor b = t.b_transposed ? b_stored.transpose(0, 1) : b_stored;
  const Tensor c0 = uniform({t.m, t.n}, DType::f32, 43, -4, 4);
  Tensor c = c0.clone();
  gemm_bf16_dot(t.m, t.n, t.k, t.alpha, a.data<bf16>(), a.strides()[0], a.strides()[1], b_stored.data<bf16>(),
                b.strides()[0], b.strides()[1], t.beta, c.data<float>(), t.n);
  test::expect_gemm_matches_f64(c, a, b, c0, t.alpha, t.beta);
}

TEST(GemmBf16Dot, MatchesF64ProductsOfTheBf16Values) {
  DT_SKIP_WITHOUT_BF16_DOT();
  // Tiles are 12 x 32, blocks 240 rows x 256 k x 2048 columns: sizes on, below and past each.
  const std::vector<DotCase> cases = {
      {1, 1, 1, false, 1, 0},      {1, 1, 1, true, 1, 0},        {12, 32, 2, false, 1, 0},
      {13, 33, 3, true, 1, 0},     {11, 31, 7, false, 1, 0},     {5, 17, 1, true, 1, 0},
      {37, 70, 255, true, 1, 0},   {24, 64, 256, false, 1, 0},   {25, 65, 257, true, 1, 0},
      {241, 45, 131, true, 1, 0},  {250, 96, 600, false, 1, 0},  {3, 2050, 19, true, 1, 0},
      {2, 2081, 513, false, 1, 0}, {70, 45, 131, true, 1, 1},    {70, 45, 131, false, 0.5f, 2},
      {19, 40, 300, true, -1.5f, 0.25f}, {1, 300, 77, true, 1, 1}, {100, 1, 50, false, 1, 1},
  };
  at_each_dot_isa([&] {
    for (const DotCase& t : cases) expect_dot_matches_f64(t);
  });
}

// beta == 0 ignores c's contents, NaN included (the scratch output is uninitialized).
TEST(GemmBf16Dot, BetaZeroIgnoresTheOutputsContents) {
  DT_SKIP_WITHOUT_BF16_DOT();
  const Tensor a = Tensor::ones({3, 4}, DType::bf16), b = Tensor::ones({4, 5}, DType::bf16);
  at_each_dot_isa([&] {
    Tensor c = Tensor::full({3, 5}, std::nan(""), DType::f32);
    gemm_bf16_dot(3, 5, 4, 1, a.data<bf16>(), 4, 1, b.data<bf16>(), 5, 1, 0, c.data<float>(), 5);
    EXPECT_EQ(c.to_doubles(), std::vector<double>(15, 4.0));
  });
}

// Any split of the rows gives the same bits (what threads and the tp-overlap chunks rely on).
TEST(GemmBf16Dot, RowsSplitAnywhereGiveTheSameBits) {
  DT_SKIP_WITHOUT_BF16_DOT();
  const int64_t m = 53, n = 70, k = 601;
  const Tensor a = uniform({m, k}, DType::f32, 51).to(DType::bf16), w = uniform({n, k}, DType::f32, 52).to(DType::bf16);
  at_each_dot_isa([&] {
    Tensor whole = Tensor::zeros({m, n}, DType::f32), split = Tensor::zeros({m, n}, DType::f32);
    gemm_bf16_dot(m, n, k, 1, a.data<bf16>(), k, 1, w.data<bf16>(), 1, k, 0, whole.data<float>(), n);
    for (int64_t r0 = 0, step = 1; r0 < m; r0 += step, step += 4)
      gemm_bf16_dot(std::min(step, m - r0), n, k, 1, a.data<bf16>() + r0 * k, k, 1, w.data<bf16>(), 1, k, 0,
                    split.data<float>() + r0 * n, n);
    EXPECT_EQ(whole.to_doubles(), split.to_doubles());
  });
}

// Through the ops (mm, linear with bias and activation, addmm, transposed and strided views) the
// dot path and the widen path agree within one bf16 rounding of each other (both round once from
// f32 sums of the same exact products, added in different orders).
TEST(GemmBf16Dot, DotAndWidenPathsAgree) {
  DT_SKIP_WITHOUT_BF16_DOT();
  const auto bf = [](const Tensor& t) { return t.to(DType::bf16); };
  const Tensor x = bf(uniform({3, 29, 301}, DType::f32, 61, -2, 2)), w = bf(uniform({77, 301}, DType::f32, 62, -1, 1));
  const Tensor bias = bf(uniform({77}, DType::f32, 63)), m2 = bf(uniform({301, 45}, DType::f32, 64));
  const Tensor self = bf(uniform({87, 45}, DType::f32, 65));
  const std::vector<std::function<Tensor()>> ops = {
      [&] { return mm(x.reshape({87, 301}), m2); },
      [&] { return linear(x, w, bias); },
      [&] { return linear_act(x, w, bias, Activation::gelu_tanh); },
      [&] { return linear_act(x, w, Tensor(), Activation::silu); },
      [&] { return addmm(self, x.reshape({87, 301}), m2, 0.5, 2.0); },
      [&] { return mm(m2.transpose(0, 1), x.reshape({87, 301}).transpose(0, 1)); },
      [&] { return mm(x.reshape({87, 301}).slice(1, 0, 301, 2), m2.slice(0, 0, 301, 2)); },
  };
  at_each_dot_isa([&] {
    for (size_t i = 0; i < ops.size(); ++i) {
      SCOPED_TRACE(i);
      Tensor dot, widen;
      {
        ScopedBf16GemmPath path(Bf16GemmPath::dot);
        dot = ops[i]();
      }
      {
        ScopedBf16GemmPath path(Bf16GemmPath::widen);
        widen = ops[i]();
      }
      ASSERT_EQ(dot.dtype(), DType::bf16);
      ASSERT_EQ(dot.shape(), widen.shape());
      const std::vector<double> d = dot.to_doubles(), wv = widen.to_doubles();
      int64_t differ = 0;
      for (size_t j = 0; j < d.size(); ++j) {
        differ += d[j] != wv[j];
        EXPECT_LE(std::abs(d[j] - wv[j]), std::ldexp(std::abs(wv[j]), -7) + 1e-3) << j;
      }
      EXPECT_LT(differ * 10, int64_t(d.size())) << "over a tenth of the values differ";
    }
  });
}

TEST(GemmBf16Dot, PathChoiceAndOverride) {
  {
    ScopedBf16GemmPath path(Bf16GemmPath::widen);
    EXPECT_EQ(bf16_gemm_path(), Bf16GemmPath::widen);
  }
  if (!bf16_dot_supported()) {
    EXPECT_THROW(set_bf16_gemm_path(Bf16GemmPath::dot), ValueError);
    EXPECT_EQ(bf16_gemm_path(), Bf16GemmPath::widen);
    return;
  }
  ScopedBf16GemmPath path(Bf16GemmPath::dot);
  EXPECT_EQ(bf16_gemm_path(), Bf16GemmPath::dot);
  // AMX where the CPU has it, else refused.
  EXPECT_EQ(bf16_dot_isa(), amx_bf16_supported() ? Bf16DotIsa::amx : Bf16DotIsa::avx512bf16);
  if (!amx_bf16_supported()) {
    EXPECT_THROW(set_bf16_dot_isa(Bf16DotIsa::amx), ValueError);
  }
  {
    ScopedBf16DotIsa narrow(Bf16DotIsa::avx512bf16);
    EXPECT_EQ(bf16_dot_isa(), Bf16DotIsa::avx512bf16);
  }
}

// The two instruction sets of the dot path sum the same exact products in different orders: they
// agree to f32 rounding of the sums, |difference| <= 2 k eps sum_p |a_ip w_jp|.
TEST(GemmBf16Dot, AmxAndVdpbf16psAgree) {
  if (!amx_bf16_supported()) GTEST_SKIP() << "this CPU (or its OS) offers no AMX-BF16 tiles";
  const int64_t m = 45, n = 50, k = 333;
  const Tensor a = uniform({m, k}, DType::f32, 71, -2, 2).to(DType::bf16);
  const Tensor w = uniform({n, k}, DType::f32, 72, -1, 1).to(DType::bf16);
  std::vector<double> out[2];
  for (Bf16DotIsa isa : {Bf16DotIsa::avx512bf16, Bf16DotIsa::amx}) {
    ScopedBf16DotIsa scoped(isa);
    Tensor c = Tensor::zeros({m, n}, DType::f32);
    gemm_bf16_dot(m, n, k, 1, a.data<bf16>(), k, 1, w.data<bf16>(), 1, k, 0, c.data<float>(), n);
    out[isa == Bf16DotIsa::amx] = c.to_doubles();
  }
  const std::vector<double> av = a.to_doubles(), wv = w.to_doubles();
  int64_t differ = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double magnitude = 0;
      for (int64_t p = 0; p < k; ++p) magnitude += std::abs(av[size_t(i * k + p)] * wv[size_t(j * k + p)]);
      const size_t e = size_t(i * n + j);
      differ += out[0][e] != out[1][e];
      EXPECT_LE(std::abs(out[0][e] - out[1][e]), 2.0 * double(k) * std::ldexp(1.0, -24) * magnitude) << i << ", " << j;
    }
  RecordProperty("elements_that_differ", int(differ));
}

}  // namespace
}  // namespace dt
