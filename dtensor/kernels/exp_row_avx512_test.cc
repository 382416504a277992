// exp_row_avx512's exp against std::exp (ulps over the normal range, the special values softmax
// rows meet), and its row contract against the same row computed in double.
#include "dtensor/kernels/exp_row_avx512.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace dt::attention_detail {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Returns exp_avx512 of each x (through its 16-lane loop and a tail).
std::vector<float> exp_of(const std::vector<float>& x) {
  std::vector<float> y(x.size(), -1.f);
  exp_avx512(x.data(), y.data(), int64_t(x.size()));
  return y;
}

TEST(ExpRowAvx512, ExpWithinTwoUlpOverTheNormalRange) {
  if (!exp_row_avx512_supported()) GTEST_SKIP() << "this CPU has no AVX-512";
  // A dense grid (every 1/512) over the whole normal output range, plus the region near 0.
  std::vector<float> x;
  for (float v = -87.33f; v <= 88.72f; v += 1.0f / 512) x.push_back(v);
  for (float v = -1e-3f; v <= 1e-3f; v += 1e-6f) x.push_back(v);
  x.push_back(-87.33654f);  // the smallest input with a normal result
  const std::vector<float> y = exp_of(x);
  double worst = 0;
  float worst_x = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double exact = std::exp(double(x[i]));
    const double ulp = std::nextafter(float(exact), kInf) - float(exact);
    const double e = std::fabs(double(y[i]) - exact) / ulp;
    if (e > worst) worst = e, worst_x = x[i];
  }
  EXPECT_LE(worst, 2.0) << "at x = " << worst_x;
}

TEST(ExpRowAvx512, ExpSpecialValues) {
  if (!exp_row_avx512_supported()) GTEST_SKIP() << "this CPU has no AVX-512";
  // 17 values: one full vector and a tail of one.
  const std::vector<float> x = {0.f, -0.f,   -kInf,  -1000.f, -100.f,  -87.34f, kInf, 100.f, 88.73f,
                                88.72f, 1.f, -1.f,  -20.f,   1e-30f, -1e-30f, 50.f,   std::nanf("")};
  const std::vector<float> y = exp_of(x);
  EXPECT_EQ(y[0], 1.f);
  EXPECT_EQ(y[1], 1.f);
  for (size_t i : {2, 3, 4, 5}) EXPECT_EQ(y[i], 0.f) << "exp(" << x[i] << ") is subnormal or 0: 0";
  for (size_t i : {6, 7, 8}) EXPECT_EQ(y[i], kInf) << "exp(" << x[i] << ")";
  EXPECT_TRUE(std::isfinite(y[9]));
  EXPECT_GT(y[9], 3.3e38f);
  for (size_t i = 10; i < 16; ++i) EXPECT_NEAR(y[i], std::exp(double(x[i])), 2e-7 * std::exp(double(x[i]))) << x[i];
  EXPECT_TRUE(std::isnan(y[16]));
}

// The row in double: e[c] = exp(s[c] * scale + mask[c] - m_new) for c < visible, with m_new the
// max of m_old and the scaled, masked scores.
struct RowCase {
  int64_t visible, n;
  float scale;
  int64_t mask_col;  // -1: no mask
  float m_old;
};

TEST(ExpRowAvx512, RowMatchesTheRowInDouble) {
  if (!exp_row_avx512_supported()) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> score(-8.f, 8.f);
  const float ninf = -kInf;
  const std::vector<RowCase> cases = {
      {0, 0, 0.125f, -1, ninf},   {0, 5, 0.125f, -1, 1.f},    {1, 1, 0.125f, -1, ninf},  {17, 40, 0.125f, -1, ninf},
      {64, 64, 0.125f, -1, ninf}, {100, 256, 0.3f, -1, 0.5f}, {37, 37, 0.125f, -1, 50.f}, {33, 40, -0.5f, -1, ninf},
      {48, 50, 0.125f, 1, ninf},  {31, 31, 0.125f, 0, 0.2f},  {256, 256, 1.f, 1, ninf},
  };
  for (const RowCase& rc : cases) {
    const std::string what = "visible " + std::to_string(rc.visible) + " n " + std::to_string(rc.n) + " scale " +
                              std::to_string(rc.scale) + " mask_col " + std::to_string(rc.mask_col) + " m_old " +
                              std::to_string(rc.m_old);
    std::vector<float> row(size_t(rc.n)), mask(size_t(std::max<int64_t>(rc.n, 1)));
    for (float& s : row) s = score(gen);
    for (size_t c = 0; c < mask.size(); ++c) mask[c] = c % 3 == 1 ? ninf : score(gen);  // some keys masked
    const float* m = rc.mask_col < 0 ? nullptr : mask.data();
    // The scaled, masked scores and their max. With a mask (or scale <= 0) the kernel rounds them
    // to f32 (multiply, then add); otherwise it scales inside the FMA that subtracts the max, and
    // the product is exact in double.
    const bool rounded = m || !(rc.scale > 0);
    std::vector<double> t(size_t(rc.visible));
    float mx = rc.m_old;
    for (int64_t c = 0; c < rc.visible; ++c) {
      float v = row[size_t(c)] * rc.scale;
      if (m) v = v + m[c * rc.mask_col];
      t[size_t(c)] = rounded ? double(v) : double(row[size_t(c)]) * double(rc.scale);
      mx = std::max(mx, v);
    }
    double sum = -1;
    const float got_max = exp_row_avx512(row.data(), rc.visible, rc.n, rc.scale, m, rc.mask_col, rc.m_old, &sum);
    EXPECT_EQ(got_max, mx) << what;
    if (mx == ninf) continue;  // no finite score: the row is left to the caller (ops_attention.cc)
    double want_sum = 0;
    for (int64_t c = 0; c < rc.visible; ++c) {
      const double arg = t[size_t(c)] - double(mx), want = std::exp(arg);
      want_sum += double(row[size_t(c)]);
      // The argument is rounded to f32 once (half an ulp of arg: |arg| * 2^-24 relative in the
      // exp), then the exp is within 2 ulp. Results below 2^-126 are 0, masked keys (arg -inf) exactly 0.
      const double bound = std::isinf(arg) ? 0 : want * (std::fabs(arg) * 0x1p-24 + 0x1p-22) + 0x1p-126;
      EXPECT_NEAR(row[size_t(c)], want, bound) << what << " at " << c;
    }
    for (int64_t c = rc.visible; c < rc.n; ++c) EXPECT_EQ(row[size_t(c)], 0.f) << what << " at " << c;
    EXPECT_NEAR(sum, want_sum, 1e-12 * std::max(want_sum, 1.0)) << what;
  }
}

}  // namespace
}  // namespace dt::attention_detail
