#include <cmath>

#include "tests/support/ops_test_util.h"

namespace dt {
namespace {

TEST(OpsCompare, ReportsMaxAbsAndRelDiff) {
  Tensor a = Tensor::from_doubles({1.0, 2.5, -4.0}, {3});
  Tensor b = Tensor::from_doubles({1.0, 2.0, -4.0}, {3}, DType::f64);
  DiffReport r = compare(a, b, /*rtol=*/0.1, /*atol=*/0);
  EXPECT_TRUE(r.shapes_match);
  EXPECT_DOUBLE_EQ(r.max_abs_diff, 0.5);
  EXPECT_DOUBLE_EQ(r.max_rel_diff, 0.25);
  EXPECT_EQ(r.mismatches, 1);  // 0.5 > 0.1 * 2
  EXPECT_FALSE(allclose(a, b, 0.1, 0));
  EXPECT_TRUE(allclose(a, b, 0.3, 0));
  EXPECT_TRUE(allclose(a, b, 0, 0.5));
}

TEST(OpsCompare, NaNNeverMatchesAndInfMatchesItself) {
  Tensor a = Tensor::from_doubles({NAN, INFINITY, 1}, {3});
  Tensor b = Tensor::from_doubles({NAN, INFINITY, 1}, {3});
  DiffReport r = compare(a, b);
  EXPECT_EQ(r.mismatches, 1);
  EXPECT_TRUE(std::isinf(r.max_abs_diff));
  EXPECT_FALSE(allclose(a, b));
  EXPECT_TRUE(allclose(a.slice(0, 1, 3), b.slice(0, 1, 3)));
  EXPECT_FALSE(allclose(Tensor::from_doubles({-INFINITY}, {1}), Tensor::from_doubles({INFINITY}, {1})));
}

TEST(OpsCompare, ShapeMismatchIsReportedNotThrown) {
  DiffReport r = compare(Tensor::zeros({2, 3}), Tensor::zeros({3, 2}));
  EXPECT_FALSE(r.shapes_match);
  EXPECT_FALSE(allclose(Tensor::zeros({2, 3}), Tensor::zeros({3, 2})));
  EXPECT_TRUE(allclose(Tensor::zeros({0, 3}), Tensor::zeros({0, 3})));
  EXPECT_TRUE(allclose(Tensor::zeros({2, 3}).transpose(0, 1), Tensor::zeros({3, 2})));
}

}  // namespace
}  // namespace dt
