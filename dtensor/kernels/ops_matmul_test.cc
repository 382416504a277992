#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string_view>
#include <thread>

#include "tests/support/ops_test_util.h"
#include "dtensor/core/blas_kernels.h"
#include "dtensor/core/threading.h"
#include "dtensor/kernels/gemm_bf16_dot.h"
#include "dtensor/kernels/gemm_f32_packed.h"

namespace dt {
namespace {

using test::expect_error;
using test::expect_values;
using test::uniform;

// Returns the naive double product of [B, m, k] and [B, k, n] given as row-major values.
std::vector<double> ref_bmm(const std::vector<double>& a, const std::vector<double>& b, int64_t B, int64_t m,
                            int64_t k, int64_t n) {
  std::vector<double> c(size_t(B * m * n), 0.0);
  for (int64_t p = 0; p < B; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q) s += a[size_t(p * m * k + i * k + q)] * b[size_t(p * k * n + q * n + j)];
        c[size_t(p * m * n + i * n + j)] = s;
      }
  return c;
}

// Returns the reference torch.matmul of a and b (rank >= 1 each) in double.
std::vector<double> ref_matmul(const Tensor& a, const Tensor& b) {
  Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  const Shape abatch(a2.shape().begin(), a2.shape().end() - 2), bbatch(b2.shape().begin(), b2.shape().end() - 2);
  Shape batch = broadcast_shapes(abatch, bbatch);
  const int64_t m = a2.shape()[a2.shape().size() - 2], k = a2.shape().back(), n = b2.shape().back();
  Shape ae = batch, be = batch;
  ae.insert(ae.end(), {m, k});
  be.insert(be.end(), {k, n});
  return ref_bmm(a2.expand(ae).to_doubles(), b2.expand(be).to_doubles(), numel(batch), m, k, n);
}

double rtol_mm(DType t) { return t == DType::bf16 ? 2e-2 : t == DType::f16 ? 4e-3 : t == DType::f32 ? 1e-5 : 1e-12; }

TEST(OpsMatmul, MmMatchesReferenceAcrossLayoutsDtypesAndEmptyDims) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (auto [m, k, n] : std::vector<std::array<int64_t, 3>>{{5, 7, 3}, {1, 7, 1}, {0, 4, 3}, {3, 0, 4}, {4, 3, 0}, {33, 17, 9}}) {
      const Tensor a = uniform({m, k}, dtype, 1), b = uniform({k, n}, dtype, 2);
      const std::vector<std::pair<std::string, std::pair<Tensor, Tensor>>> variants = {
          {"contiguous", {a, b}},
          {"a transposed", {uniform({k, m}, dtype, 3).transpose(0, 1), b}},
          {"b transposed", {a, uniform({n, k}, dtype, 4).transpose(0, 1)}},
          {"a sliced", {uniform({m, 2 * k}, dtype, 5).slice(1, 0, 2 * k, 2), b}},
          {"b expanded", {a, uniform({1, n}, dtype, 6).expand({k, n})}},
          {"a row-sliced", {uniform({m + 2, k}, dtype, 7).narrow(0, 1, m), b}},
      };
      for (auto& [name, ab] : variants) {
        const std::string what = std::string(dtype_name(dtype)) + " " + name + " " + std::to_string(m) + "x" +
                                 std::to_string(k) + "x" + std::to_string(n);
        Tensor c = mm(ab.first, ab.second);
        ASSERT_EQ(c.shape(), (Shape{m, n})) << what;
        EXPECT_EQ(c.dtype(), dtype) << what;
        expect_values(c, ref_bmm(ab.first.to_doubles(), ab.second.to_doubles(), 1, m, k, n), rtol_mm(dtype), 1e-5,
                      what);
      }
    }
  }
}

// OpenBLAS runs the kernels this CPU runs fastest (blas_kernels.h): 0.3.21 chose its SSE3 kernels on
// an AVX-512 Xeon, a fifth of the GEMM speed, its AVX-512 kernels on a Zen 4, slower there than its
// AVX2 ones, and its Zen table on a Zen 2, slower than Haswell's, until they were chosen again at
// load. And a GEMM runs after the choice.
TEST(OpsMatmul, BlasRunsThePreferredKernelsForTheCpu) {
  const Tensor a = uniform({160, 300}, DType::f32, 30), b = uniform({300, 120}, DType::f32, 31);
  expect_values(mm(a, b), ref_bmm(a.to_doubles(), b.to_doubles(), 1, 160, 300, 120), 1e-5, 1e-4);
  EXPECT_EQ(blas_core_isa("Prescott"), BlasIsa::pre_avx2);
  EXPECT_EQ(blas_core_isa("Cooperlake"), BlasIsa::avx512);
  if (std::getenv("OPENBLAS_CORETYPE")) GTEST_SKIP() << "OPENBLAS_CORETYPE chooses the kernels";
  if (!blas_dynamic_arch()) GTEST_SKIP() << "OpenBLAS built for one core (no DYNAMIC_ARCH): its kernels are fixed";
  const std::string core = blas_kernels();
  if (blas_core_isa(core) == BlasIsa::unknown) GTEST_SKIP() << "core " << core << " is newer than the table";
  const char* preferred = preferred_blas_core();
  if (preferred && blas_core_isa(preferred) < cpu_isa())  // a CPU that runs narrower kernels faster
    EXPECT_EQ(core, preferred) << "OpenBLAS runs " << core;
  else
    EXPECT_GE(int(blas_core_isa(core)), int(cpu_isa())) << "OpenBLAS runs " << core;
  // Its Zen table (Zen 1-3) is never kept where the build holds Haswell's: the same kernels with
  // block sizes that ran slower.
  if (preferred && std::string_view(preferred) == "Haswell") {
    EXPECT_NE(core, "Zen");
  }
}

TEST(OpsMatmul, LargerSeededMatrices) {
  // Seeded random 96x80x72 (big enough for OpenBLAS's blocked kernels), against the naive loop.
  Tensor a = uniform({96, 80}, DType::f32, 10), b = uniform({80, 72}, DType::f32, 11);
  expect_values(mm(a, b), ref_bmm(a.to_doubles(), b.to_doubles(), 1, 96, 80, 72), 1e-5, 1e-4);
}

TEST(OpsMatmul, BmmWithViews) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor a = uniform({4, 3, 5}, dtype, 1);
    Tensor b = uniform({4, 2, 5}, dtype, 2).transpose(1, 2);  // [4, 5, 2], transposed matrices
    Tensor c = bmm(a, b);
    ASSERT_EQ(c.shape(), (Shape{4, 3, 2}));
    expect_values(c, ref_bmm(a.to_doubles(), b.to_doubles(), 4, 3, 5, 2), rtol_mm(dtype), 1e-5);
    Tensor at = uniform({3, 4, 5}, dtype, 3).transpose(0, 1);  // batch dim not outermost in memory
    expect_values(bmm(at, b), ref_bmm(at.to_doubles(), b.to_doubles(), 4, 3, 5, 2), rtol_mm(dtype), 1e-5);
  }
  EXPECT_EQ(bmm(Tensor::zeros({0, 2, 3}), Tensor::zeros({0, 3, 4})).shape(), (Shape{0, 2, 4}));
}

TEST(OpsMatmul, MatmulFollowsTorchRules) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{5}, {5}},          {{5}, {5, 3}},          {{4, 5}, {5}},        {{4, 5}, {5, 3}},
      {{2, 4, 5}, {5, 3}}, {{2, 4, 5}, {5}},       {{5}, {2, 5, 3}},     {{2, 1, 4, 5}, {3, 5, 6}},
      {{3, 4, 5}, {1, 5, 2}}, {{0, 4, 5}, {5, 3}}, {{2, 4, 0}, {2, 0, 3}}};
  const std::vector<Shape> want_shapes = {{},        {3},       {4},          {4, 3},    {2, 4, 3}, {2, 4},
                                          {2, 3},    {2, 3, 4, 6}, {3, 4, 2}, {0, 4, 3}, {2, 4, 3}};
  uint64_t seed = 20;
  for (size_t i = 0; i < cases.size(); ++i) {
    for (DType dtype : {DType::f32, DType::f16}) {
      Tensor a = uniform(cases[i].first, dtype, ++seed), b = uniform(cases[i].second, dtype, ++seed);
      Tensor c = matmul(a, b);
      const std::string what = shape_str(cases[i].first) + " @ " + shape_str(cases[i].second);
      ASSERT_EQ(c.shape(), want_shapes[i]) << what;
      expect_values(c, ref_matmul(a, b), rtol_mm(dtype), 1e-5, what);
    }
  }
  // A non-contiguous batched operand (folded path needs a reshape copy).
  Tensor a = uniform({4, 2, 5}, DType::f32, 40).transpose(0, 1);
  Tensor b = uniform({5, 3}, DType::f32, 41);
  expect_values(matmul(a, b), ref_matmul(a, b), 1e-5, 1e-6);
}

TEST(OpsMatmul, AddmmBroadcastsSelf) {
  Tensor a = uniform({4, 6}, DType::f32, 1), b = uniform({6, 5}, DType::f32, 2);
  const std::vector<double> ab = ref_bmm(a.to_doubles(), b.to_doubles(), 1, 4, 6, 5);
  for (const Shape& s : {Shape{5}, Shape{4, 1}, Shape{4, 5}, Shape{}}) {
    Tensor self = uniform(s, DType::f32, 3);
    Tensor c = addmm(self, a, b, /*beta=*/0.5, /*alpha=*/2);
    std::vector<double> sv = self.expand({4, 5}).to_doubles(), want(20);
    for (size_t i = 0; i < 20; ++i) want[i] = 0.5 * sv[i] + 2 * ab[i];
    expect_values(c, want, 1e-5, 1e-6, shape_str(s));
  }
  // beta = 0 ignores self entirely, even NaN (as torch does).
  Tensor nan_self = Tensor::full({4, 5}, NAN);
  expect_values(addmm(nan_self, a, b, 0, 1), ab, 1e-5, 1e-6);
  // bf16 path
  Tensor c16 = addmm(Tensor::ones({5}, DType::bf16), a.to(DType::bf16), b.to(DType::bf16));
  std::vector<double> want = ref_bmm(a.to(DType::bf16).to_doubles(), b.to(DType::bf16).to_doubles(), 1, 4, 6, 5);
  for (double& v : want) v += 1;
  expect_values(c16, want, 2e-2, 1e-2);
}

TEST(OpsMatmul, LinearMatchesReference) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor x = uniform({2, 3, 4}, dtype, 1), w = uniform({5, 4}, dtype, 2), bias = uniform({5}, dtype, 3);
    std::vector<double> xw = ref_bmm(x.to_doubles(), w.transpose(0, 1).to_doubles(), 1, 6, 4, 5);
    Tensor y = linear(x, w);
    ASSERT_EQ(y.shape(), (Shape{2, 3, 5}));
    expect_values(y, xw, rtol_mm(dtype), 1e-5);
    std::vector<double> bv = bias.to_doubles(), want = xw;
    for (size_t i = 0; i < want.size(); ++i) want[i] += bv[i % 5];
    expect_values(linear(x, w, bias), want, rtol_mm(dtype), 1e-2);
    EXPECT_EQ(linear(x.select(0, 0).select(0, 0), w, bias).shape(), (Shape{5}));  // 1-d input
    EXPECT_EQ(linear(Tensor::zeros({0, 4}, dtype), w, bias).shape(), (Shape{0, 5}));
  }
  // in_features 0: the product is empty and the output is the bias.
  EXPECT_EQ(linear(Tensor::zeros({2, 0}), Tensor::zeros({3, 0}), Tensor::ones({3})).to_doubles(),
            std::vector<double>(6, 1.0));
}

// Checks linear_act(x, w, b, act) == act(linear(x, w, b)) bitwise in `dtype`.
void expect_linear_act_is_activation_of_linear(DType dtype) {
  const Tensor x = uniform({3, 37, 29}, DType::f32, 21, -2, 2).to(dtype), w = uniform({53, 29}, DType::f32, 22, -1, 1).to(dtype);
  const Tensor bias = uniform({53}, DType::f32, 23).to(dtype);
  const std::vector<std::pair<Activation, std::function<Tensor(const Tensor&)>>> acts = {
      {Activation::relu, [](const Tensor& t) { return relu(t); }},
      {Activation::gelu, [](const Tensor& t) { return gelu(t); }},
      {Activation::gelu_tanh, [](const Tensor& t) { return gelu(t, "tanh"); }},
      {Activation::silu, [](const Tensor& t) { return silu(t); }},
      {Activation::none, [](const Tensor& t) { return t; }}};
  for (const auto& [act, f] : acts) {
    for (const Tensor& b : {bias, Tensor()}) {
      const Tensor want = f(linear(x, w, b)), got = linear_act(x, w, b, act);
      ASSERT_EQ(got.shape(), want.shape());
      ASSERT_EQ(got.dtype(), dtype);
      EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), size_t(want.numel()) * itemsize(dtype)), 0) << int(act);
    }
  }
}

// linear_act is bitwise relu/gelu/silu of linear for f32 (one multiply, then the same activation
// loop on the same values) and for bf16 (the product rounded to bf16 before the activation and
// after it, as the two bf16 ops round), at an uneven 3-d size, with and without bias, and refuses
// other dtypes.
TEST(OpsMatmul, LinearActIsBitwiseTheActivationOfLinear) {
  expect_linear_act_is_activation_of_linear(DType::f32);
  for (const Bf16GemmPath path : {Bf16GemmPath::widen, Bf16GemmPath::dot}) {
    if (path == Bf16GemmPath::dot && !bf16_dot_supported()) continue;  // the widen path is then the only one
    SCOPED_TRACE(path == Bf16GemmPath::dot ? "bf16, dot" : "bf16, widen");
    ScopedBf16GemmPath scoped(path);
    expect_linear_act_is_activation_of_linear(DType::bf16);
  }
  const Tensor x = uniform({3, 37, 29}, DType::f32, 21, -2, 2), w = uniform({53, 29}, DType::f32, 22, -1, 1);
  EXPECT_THROW(linear_act(x.to(DType::f16), w.to(DType::f16), Tensor(), Activation::gelu), DTypeError);
}

// On the widen path, bf16 GEMMs are the f32 GEMMs of the widened operands (exact: every bf16 is an
// f32) rounded once to bf16, bit for bit: plain, transposed (a linear's weight) and strided
// operands, with a bias, alpha and beta, a 1-d operand and an empty sum. (The dot path adds in
// another order: gemm_bf16_dot_test compares the two.)
TEST(OpsMatmul, Bf16GemmIsTheF32GemmOfTheWidenedOperandsRoundedOnce) {
  ScopedBf16GemmPath path(Bf16GemmPath::widen);
  const auto bf = [](const Tensor& t) { return t.to(DType::bf16); };
  const auto f32 = [](const Tensor& t) { return t.to(DType::f32); };
  const Tensor a = bf(uniform({70, 131}, DType::f32, 31, -2, 2)), b = bf(uniform({131, 45}, DType::f32, 32, -1, 1));
  const Tensor w = bf(uniform({45, 131}, DType::f32, 33, -1, 1)), bias = bf(uniform({45}, DType::f32, 34));
  const Tensor self = bf(uniform({70, 45}, DType::f32, 35));
  const auto same = [](const Tensor& got, const Tensor& want) {
    ASSERT_EQ(got.dtype(), DType::bf16);
    ASSERT_EQ(got.shape(), want.shape());
    const Tensor g = got.contiguous(), w = want.contiguous();
    EXPECT_EQ(std::memcmp(g.raw_data(), w.raw_data(), size_t(w.numel()) * 2), 0);
  };
  same(mm(a, b), bf(mm(f32(a), f32(b))));
  same(linear(a, w, bias), bf(linear(f32(a), f32(w), f32(bias))));
  same(linear(a, w), bf(linear(f32(a), f32(w))));
  same(mm(b.transpose(0, 1), a.transpose(0, 1)), bf(mm(f32(b).transpose(0, 1), f32(a).transpose(0, 1))));
  const Tensor strided = a.slice(1, 0, 131, 2);  // [70, 66] every other column: copied first
  same(mm(strided, b.slice(0, 0, 131, 2)), bf(mm(f32(strided), f32(b).slice(0, 0, 131, 2))));
  same(addmm(self, a, b, 0.5, 2.0), bf(addmm(f32(self), f32(a), f32(b), 0.5, 2.0)));
  same(matmul(a.select(0, 3), b), bf(matmul(f32(a).select(0, 3), f32(b))));
  same(matmul(a, b.select(1, 7)), bf(matmul(f32(a), f32(b).select(1, 7))));
  same(linear(Tensor::zeros({4, 0}, DType::bf16), Tensor::zeros({3, 0}, DType::bf16), bf(Tensor::ones({3}))),
       bf(Tensor::ones({4, 3})));
  EXPECT_EQ(mm(Tensor::zeros({0, 5}, DType::bf16), bf(Tensor::ones({5, 2}))).shape(), (Shape{0, 2}));
}


TEST(OpsMatmul, IsDeterministicAndSafeAcrossThreads) {
  Tensor a = uniform({64, 48}, DType::f32, 1), b = uniform({48, 40}, DType::f32, 2);
  Tensor want = mm(a, b);
  EXPECT_EQ(compute_threads(), 1);
  // Four "ranks" multiplying at the same time get the single-threaded result bit for bit.
  std::vector<Tensor> got(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r)
    threads.emplace_back([&, r] {
      for (int it = 0; it < 5; ++it) got[size_t(r)] = mm(a, b);
    });
  for (auto& t : threads) t.join();
  for (const Tensor& g : got) EXPECT_EQ(std::memcmp(g.raw_data(), want.raw_data(), want.nbytes()), 0);
}

TEST(OpsMatmul, InnerDimMismatchMessage) {
  expect_error<ShapeError>([] { mm(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})); },
                           {"mm: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)"});
  expect_error<ShapeError>([] { matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({4})); },
                           {"matmul: shapes [2, 2, 3] and [4] cannot be multiplied (3 != 4)"});
  expect_error<ShapeError>([] { bmm(Tensor::zeros({2, 2, 3}), Tensor::zeros({2, 4, 1})); }, {"bmm", "(3 != 4)"});
  expect_error<ShapeError>([] { linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})); },
                           {"linear", "[2, 3]", "[4, 5]", "3 != 5"});
  expect_error<ShapeError>([] { addmm(Tensor::zeros({3}), Tensor::zeros({2, 3}), Tensor::zeros({3, 4})); },
                           {"addmm", "[3]", "[2, 4]"});
}

TEST(OpsMatmul, OtherErrors) {
  expect_error<ShapeError>([] { mm(Tensor::zeros({2, 3, 1}), Tensor::zeros({3, 5})); }, {"mm", "2-d", "[2, 3, 1]"});
  expect_error<ShapeError>([] { bmm(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 1})); }, {"bmm", "2 != 3"});
  expect_error<ShapeError>([] { matmul(Tensor::zeros({2, 4, 3}), Tensor::zeros({3, 3, 1})); },
                           {"matmul", "[2]", "[3]"});
  expect_error<DTypeError>([] { mm(Tensor::zeros({2, 2}, DType::i64), Tensor::zeros({2, 2}, DType::i64)); },
                           {"mm", "i64"});
  expect_error<DTypeError>([] { mm(Tensor::zeros({2, 2}), Tensor::zeros({2, 2}, DType::bf16)); },
                           {"mm", "f32", "bf16"});
  expect_error<ShapeError>([] { linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 3}), Tensor::zeros({5})); },
                           {"linear", "bias", "[5]", "4"});
}

// linear_into writes linear()'s bits into one block of columns of a wider buffer (rows 18
// apart) and nothing else: the other blocks keep their contents. With a packed weight, the bits of
// linear_act through the same packed copy. Leading dims that do not fold into rows one stride
// apart, a wrong shape or an unsupported dtype are errors.
TEST(Matmul, LinearIntoABlockOfColumnsIsLinearsBits) {
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor x = uniform({2, 70, 7}, dt, 1, -1, 1), w = uniform({6, 7}, dt, 2, -1, 1), b = uniform({6}, dt, 3, -1, 1);
    for (const Tensor& bias : {b, Tensor()}) {
      Tensor out = Tensor::full({2, 70, 18}, 5.0, dt);
      linear_into(x, w, bias, out.narrow(2, 6, 6));
      const Tensor want = linear(x, w, bias);
      EXPECT_EQ(out.narrow(2, 6, 6).to_doubles(), want.to_doubles());
      EXPECT_EQ(out.narrow(2, 0, 6).to_doubles(), std::vector<double>(size_t(2 * 70 * 6), 5.0));
      EXPECT_EQ(out.narrow(2, 12, 6).to_doubles(), std::vector<double>(size_t(2 * 70 * 6), 5.0));
    }
  }
  if (f32_packed_supported()) {
    const Tensor x = uniform({300, 64}, DType::f32, 4, -1, 1), w = uniform({40, 64}, DType::f32, 5, -1, 1);
    const PackedWeight packed(w.data<float>(), 40, 64, 64, 1);
    Tensor out = Tensor::zeros({300, 80});
    linear_into(x, w, Tensor(), out.narrow(1, 40, 40), &packed);
    EXPECT_EQ(out.narrow(1, 40, 40).to_doubles(), linear_act(x, w, Tensor(), Activation::none, &packed).to_doubles());
  }
  const Tensor x = uniform({4, 3}, DType::f32, 6, -1, 1), w = uniform({2, 3}, DType::f32, 7, -1, 1);
  expect_error<ValueError>([&] { linear_into(x, w, Tensor(), Tensor::zeros({2, 4}).transpose(0, 1)); },
                           {"linear_into: out of shape [4, 2] and strides [1, 4] is not rows of contiguous values"});
  expect_error<ValueError>([&] { linear_into(x.view({2, 2, 3}), w, Tensor(), Tensor::zeros({2, 4, 2}).narrow(1, 0, 2)); },
                           {"linear_into: out of shape [2, 2, 2] and strides [8, 2, 1] is not rows"});
  expect_error<ShapeError>([&] { linear_into(x, w, Tensor(), Tensor::zeros({4, 3})); },
                           {"linear_into: x [4, 3], weight [2, 3] do not give out [4, 3]"});
  expect_error<DTypeError>([&] { linear_into(x.to(DType::bf16), w.to(DType::bf16), Tensor(), Tensor::zeros({4, 2}, DType::bf16)); },
                           {"linear into a strided output supports f32 and f64 only, got bf16"});
}

}  // namespace
}  // namespace dt
