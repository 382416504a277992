#include "dtensor/kernels/fast_exp.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dt::kernel {
namespace {

// Returns the error of fast_exp(x) in units in the last place of the exact result.
double ulp_error(float x) {
  const double exact = std::exp(double(x));
  const double ulp = std::nextafter(float(exact), INFINITY) - float(exact);
  return std::fabs(double(fast_exp(x)) - exact) / ulp;
}

TEST(FastExp, WithinTwoUlpOverTheNormalRange) {
  // A dense grid (every 1/512) over the whole normal output range plus the region near 0.
  double worst = 0;
  float worst_x = 0;
  for (float x = -87.3f; x <= 88.7f; x += 1.0f / 512) {
    const double e = ulp_error(x);
    if (e > worst) {
      worst = e;
      worst_x = x;
    }
  }
  for (float x = -1e-3f; x <= 1e-3f; x += 1e-6f) worst = std::max(worst, ulp_error(x));
  EXPECT_LE(worst, 2.0) << "at x = " << worst_x;
}

TEST(FastExp, SpecialValues) {
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
  EXPECT_EQ(fast_exp(-INFINITY), 0.0f);
  EXPECT_EQ(fast_exp(-1000.0f), 0.0f);
  EXPECT_EQ(fast_exp(INFINITY), INFINITY);
  EXPECT_EQ(fast_exp(100.0f), INFINITY);
  EXPECT_TRUE(std::isnan(fast_exp(NAN)));
  EXPECT_TRUE(std::isfinite(fast_exp(88.72f)));  // largest inputs stay finite
  EXPECT_GT(fast_exp(88.72f), 3.3e38f);
}

}  // namespace
}  // namespace dt::kernel
