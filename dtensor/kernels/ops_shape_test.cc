#include "tests/support/ops_test_util.h"

namespace dt {
namespace {

using test::expect_error;
using test::expect_values;
using test::uniform;

std::vector<int64_t> sizes_along(const std::vector<Tensor>& parts, int64_t dim) {
  std::vector<int64_t> s;
  for (const Tensor& p : parts) s.push_back(p.size(dim));
  return s;
}

TEST(OpsShape, CatMatchesReferenceAlongEveryDim) {
  for (DType dtype : {DType::f32, DType::bf16, DType::i64, DType::boolean}) {
    for (int64_t dim : {0, 1, 2, -1}) {
      Shape s1{2, 3, 4}, s2{2, 3, 4};
      s2[size_t(dim < 0 ? dim + 3 : dim)] = 5;
      Tensor a = uniform(s1, dtype, 1);
      Tensor b = uniform({s2[2], s2[1], s2[0]}, dtype, 2).permute({2, 1, 0});  // non-contiguous
      Tensor e = Tensor::empty({0}, dtype);                                   // legacy empty: skipped
      Tensor y = cat({a, e, b}, dim);
      const int64_t d = dim < 0 ? dim + 3 : dim;
      Shape want_shape = s1;
      want_shape[size_t(d)] += s2[size_t(d)];
      ASSERT_EQ(y.shape(), want_shape);
      // Reference: element [i,j,k] comes from a if its coordinate along d is < s1[d], else b.
      std::vector<double> want;
      for (int64_t i = 0; i < want_shape[0]; ++i)
        for (int64_t j = 0; j < want_shape[1]; ++j)
          for (int64_t k = 0; k < want_shape[2]; ++k) {
            std::vector<int64_t> idx{i, j, k};
            if (idx[size_t(d)] < s1[size_t(d)]) {
              want.push_back(a.at(idx));
            } else {
              idx[size_t(d)] -= s1[size_t(d)];
              want.push_back(b.at(idx));
            }
          }
      expect_values(y, want, 0, 0, std::string(dtype_name(dtype)) + " dim " + std::to_string(dim));
    }
  }
}

TEST(OpsShape, CatOfEmptyPieces) {
  Tensor y = cat({Tensor::zeros({0, 3}), Tensor::ones({2, 3}), Tensor::zeros({0, 3})}, 0);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.to_doubles(), std::vector<double>(6, 1.0));
  EXPECT_EQ(cat({Tensor::zeros({2, 0}), Tensor::zeros({2, 0})}, 1).shape(), (Shape{2, 0}));
}

TEST(OpsShape, SplitBySizeLikeTorch) {
  Tensor x = Tensor::from_doubles(std::vector<double>{0, 1, 2, 3, 4, 5, 6}, {7});
  std::vector<Tensor> p = split(x, 3, 0);
  EXPECT_EQ(sizes_along(p, 0), (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(p[2].to_doubles(), (std::vector<double>{6}));
  EXPECT_TRUE(p[1].shares_storage_with(x));  // views, like torch.split
  EXPECT_EQ(sizes_along(split(x, 7, 0), 0), (std::vector<int64_t>{7}));
  EXPECT_EQ(sizes_along(split(x, 10, 0), 0), (std::vector<int64_t>{7}));
  EXPECT_EQ(sizes_along(split(Tensor::zeros({0, 2}), 3, 0), 0), (std::vector<int64_t>{0}));
  std::vector<Tensor> q = split(x, std::vector<int64_t>{2, 0, 5}, 0);
  EXPECT_EQ(sizes_along(q, 0), (std::vector<int64_t>{2, 0, 5}));
  EXPECT_EQ(q[2].to_doubles(), (std::vector<double>{2, 3, 4, 5, 6}));
  Tensor m = uniform({3, 5}, DType::f32, 4);
  std::vector<Tensor> cols = split(m, 2, -1);
  ASSERT_EQ(sizes_along(cols, 1), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(cols[2].to_doubles(), m.slice(1, 4, 5).to_doubles());
}

TEST(OpsShape, ChunkHasTorchSemantics) {
  auto chunk_sizes = [](int64_t L, int64_t n) { return sizes_along(chunk(Tensor::zeros({L}), n, 0), 0); };
  EXPECT_EQ(chunk_sizes(10, 4), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(chunk_sizes(5, 4), (std::vector<int64_t>{2, 2, 1}));  // fewer pieces than asked
  EXPECT_EQ(chunk_sizes(6, 4), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(chunk_sizes(2, 4), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(chunk_sizes(0, 3), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(chunk_sizes(7, 1), (std::vector<int64_t>{7}));
}

TEST(OpsShape, ChunkExactAlwaysGivesNPieces) {
  auto sizes = [](int64_t L, int64_t n) { return sizes_along(chunk_exact(Tensor::zeros({2, L}), n, 1), 1); };
  EXPECT_EQ(sizes(10, 4), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(sizes(5, 4), (std::vector<int64_t>{2, 2, 1, 0}));
  EXPECT_EQ(sizes(2, 4), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(sizes(0, 2), (std::vector<int64_t>{0, 0}));
  Tensor x = uniform({5, 3}, DType::f32, 9);
  std::vector<Tensor> p = chunk_exact(x, 4, 0);
  EXPECT_EQ(p[2].to_doubles(), x.slice(0, 4, 5).to_doubles());
  EXPECT_EQ(cat(p, 0).to_doubles(), x.to_doubles());  // pieces (incl. the empty one) reassemble
}

TEST(OpsShape, PadMatchesReference) {
  for (DType dtype : {DType::f32, DType::bf16, DType::i32}) {
    Tensor x = uniform({4, 3}, dtype, 5).transpose(0, 1);  // [3, 4], non-contiguous
    // pads: last dim (1 lo, 2 hi), first dim (-1 lo = crop, 1 hi).
    Tensor y = pad(x, {1, 2, -1, 1}, 7);
    ASSERT_EQ(y.shape(), (Shape{3, 7}));
    std::vector<double> want;
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 7; ++j) {
        const int64_t si = i + 1, sj = j - 1;
        want.push_back(si < 3 && sj >= 0 && sj < 4 ? x.at({si, sj}) : 7);
      }
    expect_values(y, want, 0, 0, std::string(dtype_name(dtype)));
  }
  // Only the last dim, and cropping everything away.
  EXPECT_EQ(pad(Tensor::ones({2, 1}), {0, 1}).to_doubles(), (std::vector<double>{1, 0, 1, 0}));
  EXPECT_EQ(pad(Tensor::ones({2}), {-2, 1}, 3).to_doubles(), (std::vector<double>{3}));
  EXPECT_EQ(pad(Tensor::zeros({0, 2}), {0, 0, 1, 0}, 5).to_doubles(), (std::vector<double>{5, 5}));
}

TEST(OpsShape, Errors) {
  Tensor x = Tensor::zeros({2, 3});
  expect_error<DimError>([&] { cat({x, x}, 2); }, {"dim 2", "rank 2"});
  expect_error<ShapeError>([&] { cat({x, Tensor::zeros({3, 3})}, 1); }, {"cat", "[3, 3]", "[2, 3]"});
  expect_error<DTypeError>([&] { cat({x, Tensor::zeros({2, 3}, DType::f64)}, 0); }, {"cat", "f64", "f32"});
  expect_error<ValueError>([&] { cat({}, 0); }, {"cat"});
  expect_error<ValueError>([&] { split(x, std::vector<int64_t>{1, 1}, 1); }, {"[1, 1]", "sum to 2", "size 3"});
  expect_error<ValueError>([&] { split(x, 0, 1); }, {"split_size", "0"});
  expect_error<DimError>([&] { chunk(x, 2, -3); }, {"dim -3", "rank 2"});
  expect_error<ValueError>([&] { chunk(x, 0, 0); }, {"chunk", "0"});
  expect_error<ValueError>([&] { pad(x, {1}); }, {"pad", "even"});
  expect_error<ValueError>([&] { pad(x, {1, 1, 1, 1, 1, 1}); }, {"pad", "6", "rank 2"});
  expect_error<ValueError>([&] { pad(x, {-2, -2}); }, {"negative size -1"});
}

}  // namespace
}  // namespace dt
