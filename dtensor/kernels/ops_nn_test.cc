#include <cmath>
#include <limits>

#include "tests/support/ops_test_util.h"

namespace dt {
namespace {

using test::expect_error;
using test::expect_values;
using test::uniform;

double rtol_nn(DType t) { return t == DType::bf16 ? 2e-2 : t == DType::f16 ? 4e-3 : t == DType::f32 ? 1e-5 : 1e-12; }

// Returns f applied to every 1-d line of x along `dim` (reference, double, row-major result).
std::vector<double> along_dim(const Tensor& x, int64_t dim,
                              const std::function<std::vector<double>(const std::vector<double>&)>& f) {
  const std::vector<double> v = x.to_doubles();
  const Shape& s = x.shape();
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  int64_t inner = 1;
  for (size_t i = size_t(d) + 1; i < s.size(); ++i) inner *= s[i];
  const int64_t L = s[size_t(d)], outer = L == 0 ? 0 : x.numel() / (L * inner);
  std::vector<double> out(v.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      std::vector<double> line(static_cast<size_t>(L));
      for (int64_t l = 0; l < L; ++l) line[size_t(l)] = v[size_t((o * L + l) * inner + in)];
      std::vector<double> r = f(line);
      for (int64_t l = 0; l < L; ++l) out[size_t((o * L + l) * inner + in)] = r[size_t(l)];
    }
  return out;
}

std::vector<double> ref_softmax(const std::vector<double>& v) {
  double mx = -INFINITY, s = 0;
  for (double e : v) mx = std::max(mx, e);
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) s += std::exp(v[i] - mx);
  for (size_t i = 0; i < v.size(); ++i) r[i] = std::exp(v[i] - mx) / s;
  return r;
}

std::vector<double> ref_log_softmax(const std::vector<double>& v) {
  double mx = -INFINITY, s = 0;
  for (double e : v) mx = std::max(mx, e);
  for (double e : v) s += std::exp(e - mx);
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = v[i] - mx - std::log(s);
  return r;
}

TEST(OpsNn, SoftmaxAndLogSoftmaxOverEveryDim) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    const std::vector<std::pair<std::string, Tensor>> inputs = {
        {"contiguous", uniform({3, 4, 37}, dtype, 1, -8, 8)},
        {"permuted", uniform({37, 3, 4}, dtype, 2, -8, 8).permute({1, 2, 0})},
        {"expanded", uniform({3, 1, 37}, dtype, 3, -8, 8).expand({3, 4, 37})},
    };
    for (auto& [layout, x] : inputs)
      for (int64_t dim : {0, 1, 2, -1}) {
        const std::string what = std::string(dtype_name(dtype)) + " " + layout + " dim " + std::to_string(dim);
        Tensor s = softmax(x, dim);
        EXPECT_EQ(s.shape(), x.shape()) << what;
        expect_values(s, along_dim(x, dim, ref_softmax), rtol_nn(dtype), 1e-6, "softmax " + what);
        expect_values(log_softmax(x, dim), along_dim(x, dim, ref_log_softmax), rtol_nn(dtype), 1e-5,
                      "log_softmax " + what);
      }
  }
}

// cross_entropy's pick of each row's log_softmax at its target: the same bits as log_softmax, in
// every float dtype, with the index's dtype and range checked.
TEST(OpsNn, LogSoftmaxAtIsLogSoftmaxPickedBitwise) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    const Tensor x = uniform({37, 1003}, dtype, 3, -20, 20);
    const Tensor index = uniform({37}, DType::i64, 4, 0, 1003);
    const Tensor got = log_softmax_at(x, index);
    ASSERT_EQ(got.dtype(), dtype);
    const std::vector<double> all = log_softmax(x, 1).to_doubles(), picked = got.to_doubles();
    const std::vector<double> idx = index.to_doubles();
    for (int64_t r = 0; r < 37; ++r)
      EXPECT_EQ(picked[size_t(r)], all[size_t(r * 1003 + int64_t(idx[size_t(r)]))]) << dtype_name(dtype) << " row " << r;
  }
  const Tensor x = uniform({2, 3}, DType::f32, 5);
  expect_error<ValueError>([&] { log_softmax_at(x, Tensor::from_vector(std::vector<int64_t>{0, 3}, {2})); }, {"out of range"});
  expect_error<ShapeError>([&] { log_softmax_at(x, Tensor::zeros({3}, DType::i64)); }, {"are not [N, C] and [N]"});
  expect_error<DTypeError>([&] { log_softmax_at(x, Tensor::zeros({2})); }, {"index must be i64 or i32"});
}

TEST(OpsNn, SoftmaxIsStableForLargeInputs) {
  Tensor x = Tensor::from_doubles({1000, 1001, 1002, -1000}, {4});
  expect_values(softmax(x, 0), ref_softmax(x.to_doubles()), 1e-6, 1e-30);
  expect_values(log_softmax(x, 0), ref_log_softmax(x.to_doubles()), 1e-6, 0);
  // A row of -inf gives NaN like torch; empty tensors are fine.
  EXPECT_TRUE(std::isnan(softmax(Tensor::full({2}, -INFINITY), 0).to_doubles()[0]));
  EXPECT_EQ(softmax(Tensor::zeros({0, 3}), 1).shape(), (Shape{0, 3}));
  EXPECT_EQ(softmax(Tensor::zeros({3, 0}), 1).shape(), (Shape{3, 0}));
  EXPECT_EQ(softmax(Tensor::full({}, 3.0), 0).item(), 1.0);
}

// Reference layer_norm / rms_norm over the last `n` elements of every row, double.
std::vector<double> ref_norm(const Tensor& x, int64_t n, const Tensor& w, const Tensor& b, double eps, bool rms) {
  const std::vector<double> v = x.to_doubles();
  const std::vector<double> wv = w.defined() ? w.to_doubles() : std::vector<double>();
  const std::vector<double> bv = b.defined() ? b.to_doubles() : std::vector<double>();
  std::vector<double> out(v.size());
  for (size_t r = 0; r * size_t(n) < v.size(); ++r) {
    const double* row = &v[r * size_t(n)];
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += row[i] / double(n);
    for (int64_t i = 0; i < n; ++i) var += (rms ? row[i] * row[i] : (row[i] - mean) * (row[i] - mean)) / double(n);
    for (int64_t i = 0; i < n; ++i) {
      double y = (rms ? row[i] : row[i] - mean) / std::sqrt(var + eps);
      if (!wv.empty()) y *= wv[size_t(i)];
      if (!bv.empty()) y += bv[size_t(i)];
      out[r * size_t(n) + size_t(i)] = y;
    }
  }
  return out;
}

TEST(OpsNn, LayerNormAndRmsNormMatchReference) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    const Tensor x = uniform({5, 3, 8}, dtype, 1, -3, 5);
    const Tensor xt = uniform({8, 5, 3}, dtype, 2, -3, 5).permute({1, 2, 0});  // non-contiguous
    const Tensor w1 = uniform({8}, dtype, 3), b1 = uniform({8}, dtype, 4);
    const Tensor w2 = uniform({3, 8}, dtype, 5), b2 = uniform({3, 8}, dtype, 6);
    const double tol = rtol_nn(dtype), atol = dtype == DType::bf16 ? 3e-2 : dtype == DType::f16 ? 4e-3 : 1e-5;
    for (const Tensor& in : {x, xt}) {
      expect_values(layer_norm(in, {8}), ref_norm(in, 8, Tensor(), Tensor(), 1e-5, false), tol, atol, "ln");
      expect_values(layer_norm(in, {8}, w1, b1), ref_norm(in, 8, w1, b1, 1e-5, false), tol, atol, "ln affine");
      expect_values(layer_norm(in, {3, 8}, w2, b2, 1e-3), ref_norm(in, 24, w2.flatten(), b2.flatten(), 1e-3, false),
                    tol, atol, "ln 2 dims");
      expect_values(rms_norm(in, {8}), ref_norm(in, 8, Tensor(), Tensor(), 1e-6, true), tol, atol, "rms");
      expect_values(rms_norm(in, {3, 8}, w2), ref_norm(in, 24, w2.flatten(), Tensor(), 1e-6, true), tol, atol,
                    "rms weight");
    }
  }
  EXPECT_EQ(layer_norm(Tensor::zeros({0, 4}), {4}).shape(), (Shape{0, 4}));
  EXPECT_EQ(rms_norm(Tensor::zeros({2, 0}), {0}).shape(), (Shape{2, 0}));
}

TEST(OpsNn, LayerNormUsesBiasedVariance) {
  // Row [1, 3]: mean 2, biased variance 1 -> [-1, 1] (unbiased would give +-0.707).
  expect_values(layer_norm(Tensor::from_doubles({1, 3}, {1, 2}), {2}, Tensor(), Tensor(), 0), {-1, 1}, 1e-6, 0);
}

TEST(OpsNn, EmbeddingGathersRows) {
  for (DType idx_dtype : {DType::i64, DType::i32}) {
    Tensor w = uniform({6, 4}, DType::bf16, 1);
    Tensor idx = Tensor::from_doubles({5, 0, 2, 2, 1, 5}, {3, 2}, idx_dtype).transpose(0, 1);  // [2, 3] view
    Tensor y = embedding(idx, w);
    ASSERT_EQ(y.shape(), (Shape{2, 3, 4}));
    EXPECT_EQ(y.dtype(), DType::bf16);
    std::vector<double> want, iv = idx.to_doubles();
    for (double i : iv)
      for (int64_t h = 0; h < 4; ++h) want.push_back(w.at({int64_t(i), h}));
    expect_values(y, want, 0, 0);
  }
  // A strided weight (a column shard / transposed view) is read in place.
  Tensor wt = uniform({4, 6}, DType::f32, 2).transpose(0, 1);  // [6, 4], column stride 6
  Tensor yt = embedding(Tensor::from_vector<int64_t>({3, 0}, {2}), wt);
  std::vector<double> want_t;
  for (int64_t i : {3, 0})
    for (int64_t h = 0; h < 4; ++h) want_t.push_back(wt.at({i, h}));
  expect_values(yt, want_t, 0, 0);
  EXPECT_EQ(embedding(Tensor::zeros({0}, DType::i64), Tensor::zeros({3, 2})).shape(), (Shape{0, 2}));
  EXPECT_EQ(embedding(Tensor::full({}, 1, DType::i64), Tensor::ones({3, 2})).shape(), (Shape{2}));
}

TEST(OpsNn, IsDeterministic) {
  Tensor x = uniform({33, 513}, DType::f32, 8);
  Tensor a = layer_norm(x, {513}), b = layer_norm(x, {513});
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0);
  Tensor c = softmax(x, 0), d = softmax(x, 0);
  EXPECT_EQ(std::memcmp(c.raw_data(), d.raw_data(), c.nbytes()), 0);
}

TEST(OpsNn, Errors) {
  Tensor x = Tensor::zeros({2, 3});
  expect_error<DimError>([&] { softmax(x, 2); }, {"dim 2", "rank 2"});
  expect_error<DTypeError>([&] { softmax(Tensor::zeros({2}, DType::i64), 0); }, {"softmax", "i64"});
  expect_error<ShapeError>([&] { layer_norm(x, {2}); }, {"layer_norm", "[2]", "[2, 3]"});
  expect_error<ShapeError>([&] { layer_norm(x, {3}, Tensor::ones({4})); }, {"layer_norm", "weight", "[4]", "[3]"});
  expect_error<DTypeError>([&] { rms_norm(x, {3}, Tensor::ones({3}, DType::f64)); }, {"rms_norm", "f64", "f32"});
  expect_error<ValueError>([] { embedding(Tensor::from_vector<int64_t>({1, 7}, {2}), Tensor::zeros({5, 2})); },
                           {"embedding", "index 7", "5 rows"});
  expect_error<ValueError>([] { embedding(Tensor::from_vector<int32_t>({-1}, {1}), Tensor::zeros({5, 2})); },
                           {"embedding", "index -1"});
  expect_error<DTypeError>([] { embedding(Tensor::zeros({2}), Tensor::zeros({5, 2})); }, {"embedding", "f32"});
}

}  // namespace
}  // namespace dt
