#include <cmath>
#include <limits>

#include "tests/support/ops_test_util.h"

namespace dt {
namespace {

using namespace test;

enum class Kind { sum, mean, amax, amin };

// Returns the reference reduction of x over `dims` (normalised, any order) in double, with the
// result shape, by visiting every element and accumulating into its output slot.
std::pair<std::vector<double>, Shape> reference(const Tensor& x, std::vector<int64_t> dims, bool keepdim, Kind kind) {
  const Shape& s = x.shape();
  const int64_t rank = x.dim();
  std::vector<bool> red(size_t(rank), dims.empty());
  for (int64_t d : dims) red[size_t(d < 0 ? d + rank : d)] = true;
  Shape out_shape, kept_sizes;
  for (int64_t d = 0; d < rank; ++d) {
    if (!red[size_t(d)]) {
      out_shape.push_back(s[size_t(d)]);
      kept_sizes.push_back(s[size_t(d)]);
    } else if (keepdim) {
      out_shape.push_back(1);
    }
  }
  const int64_t M = numel(kept_sizes);
  const double init = kind == Kind::amax ? -INFINITY : kind == Kind::amin ? INFINITY : 0;
  std::vector<double> acc(size_t(M), init);
  std::vector<int64_t> count(size_t(M), 0);
  const std::vector<double> v = x.to_doubles();
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rem = i, out = 0, mul = 1;
    for (int64_t d = rank - 1; d >= 0; --d) {
      const int64_t c = rem % s[size_t(d)];
      rem /= s[size_t(d)];
      if (!red[size_t(d)]) {
        out += c * mul;
        mul *= s[size_t(d)];
      }
    }
    double& a = acc[size_t(out)];
    const double e = v[size_t(i)];
    if (kind == Kind::amax) a = std::max(a, e);
    else if (kind == Kind::amin) a = std::min(a, e);
    else a += e;
    ++count[size_t(out)];
  }
  if (kind == Kind::mean)
    for (int64_t m = 0; m < M; ++m) acc[size_t(m)] /= double(count[size_t(m)]);
  return {acc, out_shape};
}

Tensor run(Kind kind, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  switch (kind) {
    case Kind::sum: return sum(x, dims, keepdim);
    case Kind::mean: return mean(x, dims, keepdim);
    case Kind::amax: return amax(x, dims, keepdim);
    case Kind::amin: return amin(x, dims, keepdim);
  }
  return Tensor();
}

const char* kind_name(Kind k) {
  return k == Kind::sum ? "sum" : k == Kind::mean ? "mean" : k == Kind::amax ? "amax" : "amin";
}

TEST(OpsReduce, MatchesReferenceOverDimsLayoutsAndDtypes) {
  const std::vector<std::vector<int64_t>> dim_sets = {{}, {0}, {1}, {2}, {-1}, {0, 2}, {2, 1}, {0, 1}, {0, 1, 2}};
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32, DType::boolean}) {
    const std::vector<std::pair<std::string, Tensor>> inputs = {
        {"contiguous", uniform({3, 4, 21}, dtype, 1, -5, 5)},
        {"permuted", uniform({21, 3, 4}, dtype, 2, -5, 5).permute({1, 2, 0})},
        {"sliced", uniform({3, 8, 21}, dtype, 3, -5, 5).slice(1, 1, 8, 2)},
        {"expanded", uniform({3, 1, 21}, dtype, 4, -5, 5).expand({3, 4, 21})},
    };
    for (Kind kind : {Kind::sum, Kind::mean, Kind::amax, Kind::amin}) {
      if (kind == Kind::mean && !is_floating(dtype)) continue;
      for (auto& [layout, x] : inputs)
        for (const auto& dims : dim_sets)
          for (bool keepdim : {false, true}) {
            const std::string what = std::string(kind_name(kind)) + " " + std::string(dtype_name(dtype)) + " " +
                                     layout + " dims " + shape_str(dims) + (keepdim ? " keepdim" : "");
            Tensor y = run(kind, x, dims, keepdim);
            auto [want, want_shape] = reference(x, dims, keepdim, kind);
            ASSERT_EQ(y.shape(), want_shape) << what;
            const bool int_sum = kind == Kind::sum && !is_floating(dtype);
            EXPECT_EQ(y.dtype(), int_sum ? DType::i64 : dtype) << what;
            expect_values(y, want, rtol_for(dtype), 1e-5, what);
          }
    }
  }
}

TEST(OpsReduce, LongRowsAreAccurate) {
  // f32 sums accumulate in double: a 100k-element row matches the double reference closely.
  Tensor x = uniform({2, 100003}, DType::f32, 9, 0, 1);
  auto [want, shape] = reference(x, {1}, false, Kind::sum);
  expect_values(sum(x, {1}), want, 1e-7, 0);
  auto [wc, sc] = reference(x, {0}, false, Kind::sum);
  expect_values(sum(x, {0}), wc, 1e-7, 0);
}

TEST(OpsReduce, F32ColumnSumsAddRowsInOrderInDouble) {
  // Sums over leading dims (a linear's bias gradient, a norm's weight gradient) accumulate each
  // column in double in row order: bitwise the reference's row-major double sum rounded to f32,
  // for row counts around the kernel's four-row passes and at the anchor gpt's sizes.
  const std::vector<Shape> shapes = {{1, 67}, {2, 67}, {3, 5}, {4, 67}, {5, 1}, {7, 130}, {9, 67},
                                     {4, 256, 512}, {1024, 2048}};
  for (const Shape& shape : shapes) {
    Tensor x = uniform(shape, DType::f32, 11, -3, 3);
    const std::vector<int64_t> dims = shape.size() == 3 ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0};
    auto [want, want_shape] = reference(x, dims, false, Kind::sum);
    const Tensor y = sum(x, dims);
    ASSERT_EQ(y.shape(), want_shape) << shape_str(shape);
    const std::vector<float> got = y.to_vector<float>();
    for (size_t j = 0; j < want.size(); ++j)
      ASSERT_EQ(got[j], float(want[j])) << shape_str(shape) << " column " << j;
  }
}

TEST(OpsReduce, EmptyTensors) {
  Tensor e = Tensor::zeros({0, 3});
  EXPECT_EQ(sum(e, {0}).to_doubles(), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(sum(e, {1}).shape(), (Shape{0}));
  EXPECT_EQ(sum(e).item(), 0);
  EXPECT_TRUE(std::isnan(mean(e).item()));
  EXPECT_EQ(amax(e, {1}).shape(), (Shape{0}));  // nothing reduced over an empty dim
  EXPECT_EQ(sum(Tensor::full({}, 2.5)).item(), 2.5);  // 0-d input
  EXPECT_EQ(sum(Tensor::full({}, 2.5), {0}, true).shape(), (Shape{}));
}

TEST(OpsReduce, NaNPropagatesThroughAmaxAmin) {
  Tensor x = Tensor::from_doubles({1, NAN, 3, 4, 5, 6, 7, 8, 9, 10}, {10});
  EXPECT_TRUE(std::isnan(amax(x).item()));
  EXPECT_TRUE(std::isnan(amin(x).item()));
}

TEST(OpsReduce, IntegerSumIsExactInI64) {
  Tensor x = Tensor::full({3}, double(int64_t(1) << 40), DType::i64);
  EXPECT_EQ(sum(x).to_vector<int64_t>()[0], int64_t(3) << 40);
  Tensor b = gt(uniform({50}, DType::f64, 3, 0, 1), Tensor::full({}, 0.5, DType::f64));
  double ones = 0;
  for (double v : b.to_doubles()) ones += v;
  EXPECT_EQ(sum(b).item(), ones);
  EXPECT_EQ(sum(b).dtype(), DType::i64);
}

TEST(OpsReduce, IsDeterministic) {
  Tensor x = uniform({64, 4099}, DType::f32, 5);
  for (std::vector<int64_t> dims : {std::vector<int64_t>{1}, std::vector<int64_t>{0}, std::vector<int64_t>{}}) {
    Tensor a = sum(x, dims), b = sum(x.transpose(0, 1).contiguous().transpose(0, 1), dims);
    ASSERT_EQ(a.nbytes(), b.nbytes());
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << shape_str(dims);
  }
}

TEST(OpsReduce, Errors) {
  Tensor x = Tensor::zeros({2, 3});
  expect_error<DimError>([&] { sum(x, {2}); }, {"dim 2", "rank 2"});
  expect_error<DimError>([&] { sum(x, {1, -1}); }, {"sum", "dim 1", "multiple times"});
  expect_error<DTypeError>([&] { mean(Tensor::zeros({2}, DType::i64)); }, {"mean", "i64"});
  expect_error<ValueError>([&] { amax(Tensor::zeros({0, 3}), {0}); }, {"amax", "size 0", "[0, 3]"});
  expect_error<ValueError>([&] { amin(Tensor::zeros({0})); }, {"amin", "[0]"});
}

}  // namespace
}  // namespace dt
