// gather, gather_backward, argmax/argmin, cumsum, triu/tril and the logical ops, against values
// worked out by hand and naive loops; the big cases sample a few elements with a fixed seed.
#include <cmath>

#include "tests/support/ops_test_util.h"

namespace dt {
namespace {

Tensor idx(const std::vector<int64_t>& v, const Shape& s) { return Tensor::from_vector<int64_t>(v, s); }

TEST(OpsIndex, GatherAnyDimNegativeIndicesAndIndexShape) {
  const Tensor x = Tensor::arange(0, 24, 1, DType::f32).view({2, 3, 4});
  // dim 1 with a [2, 2] index tensor (one negative): result [2, 2, 2, 4]
  const Tensor g = gather(x, idx({2, 0, -1, 1}, {2, 2}), 1);
  EXPECT_EQ(g.shape(), (Shape{2, 2, 2, 4}));
  std::vector<double> want;
  for (int a = 0; a < 2; ++a)
    for (int r : {2, 0, 2, 1})
      for (int c = 0; c < 4; ++c) want.push_back(a * 12 + r * 4 + c);
  test::expect_values(g, want, 0, 0);
  // last dim, a scalar index drops the dim; i32 indices
  const Tensor s = gather(x, Tensor::full({}, -1, DType::i32), -1);
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  test::expect_values(s, {3, 7, 11, 15, 19, 23}, 0, 0);
  // empty index tensor
  EXPECT_EQ(gather(x, idx({}, {0}), 0).shape(), (Shape{0, 3, 4}));
}

TEST(OpsIndex, GatherRejectsOutOfRangeAndFloatIndices) {
  const Tensor x = Tensor::zeros({3, 2});
  EXPECT_THROW(gather(x, idx({3}, {1}), 0), ValueError);
  EXPECT_THROW(gather(x, idx({-4}, {1}), 0), ValueError);
  EXPECT_THROW(gather(x, Tensor::zeros({1}), 0), DTypeError);
  EXPECT_THROW(gather(Tensor::zeros({}), idx({0}, {1}), 0), ShapeError);
}

TEST(OpsIndex, GatherBackwardAccumulatesRepeatedIndices) {
  const Tensor grad = Tensor::from_doubles({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64);
  // x [2, 4] gathered on dim 1 by [1, -3, 3]: index 1 appears twice
  const Tensor dx = gather_backward(grad, idx({1, -3, 3}, {3}), 1, {2, 4});
  test::expect_values(dx, {0, 3, 0, 3, 0, 9, 0, 6}, 0, 0);
  EXPECT_THROW(gather_backward(grad, idx({1, 2}, {2}), 1, {2, 4}), ShapeError);
}

// A realistic size: rows of a [1000, 512] table by [4, 512] indices, checked on sampled elements.
TEST(OpsIndex, GatherRealisticSizeSampled) {
  Generator gen(11);
  const Tensor table = rand({1000, 512}, gen, DType::f32, -1, 1);
  const Tensor ids = randint({4, 512}, -1000, 1000, gen, DType::i64);
  const Tensor g = gather(table, ids, 0);
  ASSERT_EQ(g.shape(), (Shape{4, 512, 512}));
  const float* gp = g.data<float>();
  const float* tp = table.data<float>();
  const int64_t* ip = ids.data<int64_t>();
  Generator pick(5);
  for (int k = 0; k < 64; ++k) {
    const int64_t e = int64_t(pick.uniform() * double(g.numel())) % g.numel();
    int64_t row = ip[e / 512];
    if (row < 0) row += 1000;
    ASSERT_EQ(gp[e], tp[row * 512 + e % 512]) << e;
  }
}

TEST(OpsIndex, GatherElementsAndItsGradient) {
  const Tensor x = Tensor::from_doubles({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64);
  // dim 1, indices [2, 2] (smaller than x in dim 1), one negative
  const Tensor i = idx({2, 0, -1, 1}, {2, 2});
  test::expect_values(gather_elements(x, i, 1), {3, 1, 6, 5}, 0, 0);
  test::expect_values(gather_elements(x, idx({1, 0, 1}, {1, 3}), 0), {4, 2, 6}, 0, 0);
  const Tensor dx = gather_elements_backward(Tensor::from_doubles({1, 2, 3, 4}, {2, 2}, DType::f64), idx({0, 0, 2, 1}, {2, 2}), 1, {2, 3});
  test::expect_values(dx, {3, 0, 0, 0, 4, 3}, 0, 0);
  EXPECT_THROW(gather_elements(x, idx({3}, {1, 1}), 1), ValueError);
  EXPECT_THROW(gather_elements(x, idx({0, 0, 0}, {3, 1}), 1), ShapeError);
  EXPECT_THROW(gather_elements(x, idx({0}, {1}), 1), ShapeError);
}

TEST(OpsIndex, ArgmaxArgminTiesKeepdimAndNaN) {
  const Tensor x = Tensor::from_doubles({1, 5, 5, 0, 2, 2, 9, 2}, {2, 4});
  test::expect_values(argmax(x, 1), {1, 2}, 0, 0);
  test::expect_values(argmax(x, 1, false, /*select_last_index=*/true), {2, 2}, 0, 0);
  test::expect_values(argmin(x, -1), {3, 0}, 0, 0);
  test::expect_values(argmin(x, -1, false, true), {3, 3}, 0, 0);
  const Tensor k = argmax(x, 0, /*keepdim=*/true);
  EXPECT_EQ(k.dtype(), DType::i64);
  EXPECT_EQ(k.shape(), (Shape{1, 4}));
  test::expect_values(k, {1, 0, 1, 1}, 0, 0);
  test::expect_values(argmax(Tensor::from_doubles({1, NAN, 3}, {3}), 0), {1}, 0, 0);
  test::expect_values(argmin(Tensor::from_vector<int64_t>({4, -2, 7}, {3}), 0), {1}, 0, 0);
  EXPECT_THROW(argmax(Tensor::zeros({2, 0}), 1), ShapeError);
}

TEST(OpsIndex, CumsumExclusiveReverse) {
  const Tensor x = Tensor::from_doubles({1, 2, 3, 4, 5, 6}, {2, 3});
  test::expect_values(cumsum(x, 1), {1, 3, 6, 4, 9, 15}, 0, 0);
  test::expect_values(cumsum(x, 1, /*exclusive=*/true), {0, 1, 3, 0, 4, 9}, 0, 0);
  test::expect_values(cumsum(x, 1, false, /*reverse=*/true), {6, 5, 3, 15, 11, 6}, 0, 0);
  test::expect_values(cumsum(x, -1, true, true), {5, 3, 0, 11, 6, 0}, 0, 0);
  test::expect_values(cumsum(x, 0), {1, 2, 3, 5, 7, 9}, 0, 0);
  test::expect_values(cumsum(Tensor::from_vector<int32_t>({1, -2, 3}, {3}), 0), {1, -1, 2}, 0, 0);
  EXPECT_EQ(cumsum(Tensor::zeros({0, 3}), 0).shape(), (Shape{0, 3}));
}

TEST(OpsIndex, TriuTrilDiagonals) {
  const Tensor x = Tensor::arange(1, 13, 1, DType::f32).view({3, 4});
  test::expect_values(triu(x), {1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12}, 0, 0);
  test::expect_values(triu(x, 2), {0, 0, 3, 4, 0, 0, 0, 8, 0, 0, 0, 0}, 0, 0);
  test::expect_values(tril(x, -1), {0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0}, 0, 0);
  test::expect_values(tril(x, 5), x.to_doubles(), 0, 0);
  EXPECT_THROW(triu(Tensor::zeros({3})), ShapeError);
}

// cumsum and triu on [2, 8, 509, 509] (uneven, not a multiple of any vector width): sampled
// elements (fixed seed) against a naive sum / the mask rule.
TEST(OpsIndex, CumsumTriuRealisticSizeSampled) {
  Generator gen(3);
  const Tensor x = rand({2, 8, 509, 509}, gen, DType::f32, -1, 1);
  const Tensor c = cumsum(x, 2);
  const Tensor t = tril(x, -3);
  const float* xp = x.data<float>();
  Generator pick(9);
  for (int k = 0; k < 32; ++k) {
    const int64_t e = int64_t(pick.uniform() * double(x.numel())) % x.numel();
    const int64_t j = e % 509, i = (e / 509) % 509, m = e / (509 * 509);
    double s = 0;
    for (int64_t r = 0; r <= i; ++r) s += xp[(m * 509 + r) * 509 + j];
    EXPECT_NEAR(c.data<float>()[e], s, 1e-5 * (1 + std::fabs(s))) << e;
    EXPECT_EQ(t.data<float>()[e], j - i <= -3 ? xp[e] : 0.0f) << e;
  }
}

TEST(OpsIndex, LogicalOpsBroadcastOnBool) {
  const Tensor a = Tensor::from_doubles({1, 0}, {2, 1}, DType::boolean);
  const Tensor b = Tensor::from_doubles({1, 0, 1}, {3}, DType::boolean);
  test::expect_values(logical_and(a, b), {1, 0, 1, 0, 0, 0}, 0, 0);
  test::expect_values(logical_or(a, b), {1, 1, 1, 1, 0, 1}, 0, 0);
  test::expect_values(logical_xor(a, b), {0, 1, 0, 1, 0, 1}, 0, 0);
  EXPECT_THROW(logical_and(Tensor::zeros({2}), Tensor::zeros({2})), DTypeError);
}

}  // namespace
}  // namespace dt
