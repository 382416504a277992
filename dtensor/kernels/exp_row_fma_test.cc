// exp_row_fma's exp against std::exp (ulps over the normal range, the special values softmax rows
// meet) and its row contract against the same row computed in double, at each width the CPU runs;
// and that the AVX2 and AVX-512 rows give the same bits.
#include "dtensor/kernels/exp_row_fma.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "dtensor/kernels/gemm_f32_packed.h"
#include "tests/support/packed_isas.h"

namespace dt::attention_detail {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

#define DT_SKIP_WITHOUT_FMA() \
  if (!exp_row_fma_supported()) GTEST_SKIP() << "this CPU has no AVX2 and FMA"

// Runs check at each width the CPU has (the packed GEMM's, which the row follows), named in failures.
template <typename F>
void at_each_width(F&& check) {
  for (PackedIsa isa : test::cpu_packed_isas()) {
    const ScopedPackedIsa scoped(isa);
    SCOPED_TRACE(test::packed_isa_name(isa));
    check();
  }
}

// Returns exp_fma of each x (through its vector loop and a tail).
std::vector<float> exp_of(const std::vector<float>& x) {
  std::vector<float> y(x.size(), -1.f);
  exp_fma(x.data(), y.data(), int64_t(x.size()));
  return y;
}

// A dense grid (every 1/512) over the whole normal output range, plus the region near 0.
std::vector<float> normal_range() {
  std::vector<float> x;
  for (float v = -87.33f; v <= 88.72f; v += 1.0f / 512) x.push_back(v);
  for (float v = -1e-3f; v <= 1e-3f; v += 1e-6f) x.push_back(v);
  x.push_back(-87.33654f);  // the smallest input with a normal result
  return x;
}

TEST(ExpRowFma, ExpWithinTwoUlpOverTheNormalRange) {
  DT_SKIP_WITHOUT_FMA();
  at_each_width([] {
    const std::vector<float> x = normal_range();
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
  });
}

TEST(ExpRowFma, ExpSpecialValues) {
  DT_SKIP_WITHOUT_FMA();
  at_each_width([] {
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
  });
}

// The row in double: e[c] = exp(s[c] * scale + mask[c] - m_new) for c < visible, with m_new the
// max of m_old and the scaled, masked scores.
struct RowCase {
  int64_t visible, n;
  float scale;
  int64_t mask_col;  // -1: no mask
  float m_old;

  std::string name() const {
    return "visible " + std::to_string(visible) + " n " + std::to_string(n) + " scale " + std::to_string(scale) +
           " mask_col " + std::to_string(mask_col) + " m_old " + std::to_string(m_old);
  }
};

// Rows on and off the 8- and 16-lane steps, with and without masks and running maxima.
std::vector<RowCase> row_cases() {
  const float ninf = -kInf;
  return {
      {0, 0, 0.125f, -1, ninf},   {0, 5, 0.125f, -1, 1.f},    {1, 1, 0.125f, -1, ninf},  {17, 40, 0.125f, -1, ninf},
      {64, 64, 0.125f, -1, ninf}, {100, 256, 0.3f, -1, 0.5f}, {37, 37, 0.125f, -1, 50.f}, {33, 40, -0.5f, -1, ninf},
      {48, 50, 0.125f, 1, ninf},  {31, 31, 0.125f, 0, 0.2f},  {256, 256, 1.f, 1, ninf},  {7, 9, 0.125f, 1, ninf},
      {8, 8, 0.125f, -1, ninf},   {9, 16, 0.125f, -1, ninf},  {23, 24, 0.125f, 1, 0.f},  {250, 256, 0.125f, -1, ninf},
  };
}

// A row's scores and mask (every third key masked), drawn from gen.
struct RowInput {
  std::vector<float> row, mask;
  const float* m = nullptr;  // mask.data(), or null for a case without a mask
};

RowInput row_input(const RowCase& rc, std::mt19937& gen) {
  std::uniform_real_distribution<float> score(-8.f, 8.f);
  RowInput in;
  in.row.resize(size_t(rc.n));
  in.mask.resize(size_t(std::max<int64_t>(rc.n, 1)));
  for (float& s : in.row) s = score(gen);
  for (size_t c = 0; c < in.mask.size(); ++c) in.mask[c] = c % 3 == 1 ? -kInf : score(gen);
  if (rc.mask_col >= 0) in.m = in.mask.data();
  return in;
}

TEST(ExpRowFma, RowMatchesTheRowInDouble) {
  DT_SKIP_WITHOUT_FMA();
  at_each_width([] {
    std::mt19937 gen(3);
    for (const RowCase& rc : row_cases()) {
      const std::string what = rc.name();
      RowInput in = row_input(rc, gen);
      std::vector<float>& row = in.row;
      const float* m = in.m;
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
      const float got_max = exp_row_fma(row.data(), rc.visible, rc.n, rc.scale, m, rc.mask_col, rc.m_old, &sum);
      EXPECT_EQ(got_max, mx) << what;
      if (mx == -kInf) continue;  // no finite score: the row is left to the caller (ops_attention.cc)
      double want_sum = 0;
      for (int64_t c = 0; c < rc.visible; ++c) {
        const double arg = t[size_t(c)] - double(mx), want = std::exp(arg);
        want_sum += double(row[size_t(c)]);
        // The argument is rounded to f32 once (half an ulp of arg: |arg| * 2^-24 relative in the
        // exp), then the exp is within 2 ulp. Results below 2^-126 are 0, masked keys (arg -inf)
        // exactly 0.
        const double bound = std::isinf(arg) ? 0 : want * (std::fabs(arg) * 0x1p-24 + 0x1p-22) + 0x1p-126;
        EXPECT_NEAR(row[size_t(c)], want, bound) << what << " at " << c;
      }
      for (int64_t c = rc.visible; c < rc.n; ++c) EXPECT_EQ(row[size_t(c)], 0.f) << what << " at " << c;
      EXPECT_NEAR(sum, want_sum, 1e-12 * std::max(want_sum, 1.0)) << what;
    }
  });
}

// The AVX2 row runs the AVX-512 row's steps in halves (exp_row_fma.cc): the same exponentials over
// the normal range and the specials, and for every row case the same max, exponentials and double
// sum, bit for bit. Needs an AVX-512 CPU to run both.
TEST(ExpRowFma, Avx2AndAvx512AreBitwiseEqual) {
  DT_SKIP_WITHOUT_FMA();
  if (test::cpu_packed_isas().size() < 2) {
    EXPECT_THROW(set_packed_isa(PackedIsa::avx512), ValueError);
    GTEST_SKIP() << "this CPU has no AVX-512: only the AVX2 row runs here (checked against double)";
  }
  // What one width computes: the exps of the inputs, then each row case's max, row and sum.
  const auto run = [](PackedIsa isa) {
    const ScopedPackedIsa scoped(isa);
    std::vector<float> x = normal_range();
    for (float v : {-kInf, kInf, -1000.f, -87.34f, 88.72f, 88.73f, 100.f, 1e-30f, -1e-30f, -0.f}) x.push_back(v);
    std::vector<float> bits = exp_of(x);
    std::vector<double> sums;
    std::mt19937 gen(3);
    for (const RowCase& rc : row_cases()) {
      RowInput in = row_input(rc, gen);
      double sum = -1;
      bits.push_back(exp_row_fma(in.row.data(), rc.visible, rc.n, rc.scale, in.m, rc.mask_col, rc.m_old, &sum));
      bits.insert(bits.end(), in.row.begin(), in.row.end());
      sums.push_back(sum);
    }
    return std::pair{bits, sums};
  };
  const auto [narrow, narrow_sums] = run(PackedIsa::avx2);
  const auto [wide, wide_sums] = run(PackedIsa::avx512);
  ASSERT_EQ(narrow.size(), wide.size());
  size_t differ = 0;
  for (size_t i = 0; i < narrow.size(); ++i) differ += std::memcmp(&narrow[i], &wide[i], 4) != 0;
  EXPECT_EQ(differ, 0u) << "of " << narrow.size() << " values";
  ASSERT_EQ(narrow_sums.size(), wide_sums.size());
  for (size_t i = 0; i < narrow_sums.size(); ++i)
    EXPECT_EQ(std::memcmp(&narrow_sums[i], &wide_sums[i], 8), 0) << row_cases()[i].name();
}

}  // namespace
}  // namespace dt::attention_detail
