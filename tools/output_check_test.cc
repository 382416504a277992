// The --expect comparison rule (tools/output_check.h): atol scaled by the output's largest
// magnitude, the relative difference never divided by zero, non-finite values, shapes.
#include "tools/output_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace dt::tools {
namespace {

Tensor f32(std::vector<double> v) {
  const int64_t n = int64_t(v.size());
  return Tensor::from_doubles(v, {n}, DType::f32);
}

// Logits up to 400 with f32 noise of 9e-5 (issue 27.8's GPT-2 run): a match at the defaults,
// where the unscaled allclose rule (atol 1e-5 + rtol 1e-5 * |e|) failed on the small logits.
TEST(OutputCheck, AtolScalesWithTheLargestExpectedMagnitude) {
  const Tensor expected = f32({401, -250, 0.5, 0.001});
  const Tensor actual = f32({401.00009, -250.00009, 0.50009, 0.00109});
  OutputDiff d = compare_output(actual, expected, 1e-5, 1e-5);
  EXPECT_EQ(d.mismatches, 0);
  EXPECT_DOUBLE_EQ(d.atol_scale, 401);
  // The same noise on an output within [-1, 1] is not noise: atol stays absolute there.
  d = compare_output(f32({0.50009, 0.00109}), f32({0.5, 0.001}), 1e-5, 1e-5);
  EXPECT_EQ(d.mismatches, 2);
  EXPECT_DOUBLE_EQ(d.atol_scale, 1);
  // A difference that matters on the output's own scale still fails.
  d = compare_output(f32({401, -250, 0.5, 0.1}), expected, 1e-5, 1e-5);
  EXPECT_EQ(d.mismatches, 1);
}

// An expected 0: the relative difference is measured against atol * s, not 1e-308.
TEST(OutputCheck, RelativeDifferenceNeverDividesByZero) {
  OutputDiff d = compare_output(f32({2e-6, 1}), f32({0, 1}), 1e-5, 1e-5);
  EXPECT_EQ(d.mismatches, 0);
  EXPECT_NEAR(d.max_rel_diff, 0.2, 1e-6);  // 2e-6 / 1e-5
  d = compare_output(f32({0, 1}), f32({0, 1}), 0, 0);
  EXPECT_EQ(d.max_rel_diff, 0);
  d = compare_output(f32({1e-7}), f32({0}), 0, 0);
  EXPECT_TRUE(std::isinf(d.max_rel_diff));
  EXPECT_EQ(d.mismatches, 1);
}

TEST(OutputCheck, NonFiniteAndShapes) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  EXPECT_EQ(compare_output(f32({inf, 1}), f32({inf, 1}), 1e-5, 1e-5).mismatches, 0);
  EXPECT_EQ(compare_output(f32({nan, 1}), f32({nan, 1}), 1e-5, 1e-5).mismatches, 1);
  // A NaN or infinity in expected does not inflate the atol scale.
  EXPECT_DOUBLE_EQ(compare_output(f32({1, 2}), f32({inf, 2}), 1e-5, 1e-5).atol_scale, 2);
  OutputDiff d = compare_output(f32({1, 2, 3}), f32({1, 2}), 1e-5, 1e-5);
  EXPECT_FALSE(d.shapes_match);
  EXPECT_GT(d.mismatches, 0);
}

}  // namespace
}  // namespace dt::tools
