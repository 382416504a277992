// scatter_nd, gather_nd and gather_nd_backward against values worked out by hand; gather_nd_backward
// against gather_nd as its adjoint (Σ gather_nd(x)·g = Σ x·gather_nd_backward(g)) on random values
// with a fixed seed.
#include "tests/support/ops_test_util.h"

namespace dt {
namespace {

Tensor index_tensor(const std::vector<int64_t>& v, const Shape& s) { return Tensor::from_vector<int64_t>(v, s); }

TEST(OpsIndexNd, ScatterNdReplacesSlicesLastWriteWins) {
  const Tensor x = Tensor::arange(0, 6, 1, DType::f32).view({3, 2});
  // rows 2 and -3 (= 0) replaced; k = 1, slices [2]
  test::expect_values(scatter_nd(x, index_tensor({2, -3}, {2, 1}), Tensor::from_doubles({10, 11, 12, 13}, {2, 2}, DType::f32)),
                      {12, 13, 2, 3, 10, 11}, 0, 0);
  // k = 2: single elements; element (1, 0) written twice, the last write wins
  test::expect_values(scatter_nd(x, index_tensor({1, 0, 0, 1, 1, 0}, {3, 2}), Tensor::from_doubles({7, 8, 9}, {3}, DType::f32)),
                      {0, 8, 9, 3, 4, 5}, 0, 0);
}

TEST(OpsIndexNd, GatherNdTakesSlicesInTupleOrder) {
  const Tensor x = Tensor::arange(0, 24, 1, DType::f64).view({2, 3, 4});
  // k = 2 with a [2, 2] batch of tuples (i32, one negative position): result [2, 2, 4]
  const Tensor g = gather_nd(x, Tensor::from_vector<int32_t>({1, 2, 0, -1, 0, 0, -1, 1}, {2, 2, 2}));
  EXPECT_EQ(g.shape(), (Shape{2, 2, 4}));
  std::vector<double> want;
  for (auto [a, b] : {std::pair{1, 2}, {0, 2}, {0, 0}, {1, 1}})
    for (int c = 0; c < 4; ++c) want.push_back(a * 12 + b * 4 + c);
  test::expect_values(g, want, 0, 0);
  // k = 3: elements; k = 1: whole [3, 4] blocks
  test::expect_values(gather_nd(x, index_tensor({1, 0, 3, 0, 2, -1}, {2, 3})), {15, 11}, 0, 0);
  EXPECT_EQ(gather_nd(x, index_tensor({1}, {1})).shape(), (Shape{3, 4}));
  // no tuples
  EXPECT_EQ(gather_nd(x, index_tensor({}, {0, 2})).shape(), (Shape{0, 4}));
}

TEST(OpsIndexNd, GatherNdBackwardAccumulatesRepeatedTuples) {
  const Tensor grad = Tensor::from_doubles({1, 2, 3, 4, 5, 6}, {3, 2}, DType::f64);
  // data [3, 2] by rows [2, 0, -1]: row 2 appears twice
  test::expect_values(gather_nd_backward(grad, index_tensor({2, 0, -1}, {3, 1}), {3, 2}), {3, 4, 0, 0, 6, 8}, 0, 0);
}

// Σ gather_nd(x)·g = Σ x·gather_nd_backward(g) for any x and g: the backward is the adjoint.
TEST(OpsIndexNd, GatherNdBackwardIsTheAdjointOfGatherNd) {
  const Tensor x = test::uniform({4, 3, 5}, DType::f64, 1);
  const Tensor i = test::uniform({6, 2}, DType::i64, 2, -3, 3);
  const Tensor g = test::uniform({6, 5}, DType::f64, 3);
  const double lhs = sum(mul(gather_nd(x, i), g)).item(), rhs = sum(mul(x, gather_nd_backward(g, i, x.shape()))).item();
  EXPECT_NEAR(lhs, rhs, 1e-12);
}

TEST(OpsIndexNd, ErrorsNameTheOpAndTheProblem) {
  const Tensor x = Tensor::zeros({3, 2});
  test::expect_error<ValueError>([&] { gather_nd(x, index_tensor({0, 2}, {1, 2})); }, {"gather_nd", "index 2", "dim 1 of size 2"});
  test::expect_error<ValueError>([&] { scatter_nd(x, index_tensor({-4}, {1, 1}), Tensor::zeros({1, 2})); }, {"scatter_nd", "index -4"});
  test::expect_error<ShapeError>([&] { gather_nd(x, index_tensor({0, 0, 0}, {1, 3})); }, {"gather_nd", "end in a dim of 1 to 2"});
  test::expect_error<DTypeError>([&] { gather_nd(x, Tensor::zeros({1, 1})); }, {"gather_nd", "i64 or i32"});
  test::expect_error<ShapeError>([&] { scatter_nd(x, index_tensor({0}, {1, 1}), Tensor::zeros({2})); }, {"scatter_nd: updates [2] must be [1, 2]"});
  test::expect_error<DTypeError>([&] { scatter_nd(x, index_tensor({0}, {1, 1}), Tensor::zeros({1, 2}, DType::f64)); }, {"differ from data"});
  test::expect_error<ShapeError>([&] { gather_nd_backward(Tensor::zeros({2}), index_tensor({0}, {1, 1}), {3, 2}); }, {"is not the gather_nd [1, 2]"});
  test::expect_error<DTypeError>([&] { gather_nd_backward(Tensor::zeros({1, 2}, DType::i64), index_tensor({0}, {1, 1}), {3, 2}); }, {"floating"});
}

}  // namespace
}  // namespace dt
