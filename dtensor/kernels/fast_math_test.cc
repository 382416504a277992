// Checks the max ulp error of every fast_math.h kernel against a long-double reference, over a
// seeded sample of all 2^32 float bit patterns (NaN, ±inf, subnormals included) and exhaustive
// sweeps of every float in the ranges where an approximation switches, saturates or underflows.
#include "dtensor/kernels/fast_math.h"
#include "dtensor/kernels/fast_math_grad.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tests/support/ulp_error.h"

namespace dt::kernel {
namespace {

using test::LD;
using test::gelu_tanh_arg;
using test::gelu_tanh_grad_ref;
using test::silu_grad_ref;
using test::sigmoid_ref;
using test::ulp_error;

struct Kernel {
  const char* name;
  float (*f)(float);
  std::function<LD(LD)> ref;
  double max_ulp;                               // asserted bound (the comment in fast_math.h)
  std::vector<std::pair<float, float>> sweeps;  // every float in [lo, hi]
};

std::vector<Kernel> kernels() {
  return {
      {"exp", exp_f32, [](LD x) { return std::exp(x); }, 1,
       {{-104.5f, -87.0f}, {88.0f, 89.0f}, {0.34f, 0.36f}}},
      {"log", log_f32, [](LD x) { return std::log(x); }, 1,
       {{0.0f, 1e-44f}, {1.1e-38f, 1.2e-38f}, {0.70f, 0.72f}, {0.99f, 1.01f}, {1.40f, 1.42f}}},
      {"tanh", tanh_f32, [](LD x) { return std::tanh(x); }, 2,
       {{0.55f, 0.70f}, {8.9f, 9.2f}}},
      {"sigmoid", sigmoid_f32, sigmoid_ref, 2.5, {{-104.5f, -87.0f}, {15.0f, 18.0f}}},
      {"silu", silu_f32, [](LD x) { return x * sigmoid_ref(x); }, 3,
       {{-113.0f, -100.0f}, {15.0f, 18.0f}}},
      {"erf", erf_f32, [](LD x) { return std::erf(x); }, 2.5,
       {{0.70f, 0.80f}, {3.8f, 4.0f}}},
      {"gelu", gelu_f32, [](LD x) { return x / 2 * std::erfc(-x / std::sqrt(LD(2))); }, 6,
       {{-15.5f, -13.0f}, {-1.2f, -0.9f}, {0.9f, 1.2f}}},
      // Bounded for x >= -1; the tail is checked separately below.
      {"gelu_tanh", [](float x) { return x < -1.0f ? 0.0f : gelu_tanh_f32(x); },
       [](LD x) { return x < LD(-1.0f) ? 0 : x * sigmoid_ref(gelu_tanh_arg(x)); }, 4,
       {{-1.0f, -0.5f}, {0.9f, 1.1f}}},
  };
}

// Returns the max ulp error of k over the sample and the sweeps, and the input where it occurs.
std::pair<double, float> worst_error(const Kernel& k) {
  double worst = 0;
  float worst_x = 0;
  auto check = [&](float x) {
    const double e = ulp_error(k.f(x), k.ref(LD(x)));
    if (e > worst) {
      worst = e;
      worst_x = x;
    }
  };
  std::mt19937 gen(17);
  // Whole range: uniform bit patterns (every binade equally likely); where values matter most:
  // uniform in [-16, 16].
  std::uniform_real_distribution<float> moderate(-16.0f, 16.0f);
  for (int i = 0; i < (1 << 19); ++i) {
    check(std::bit_cast<float>(uint32_t(gen())));
    check(moderate(gen));
  }
  for (auto [lo, hi] : k.sweeps)
    for (float x = lo; x <= hi; x = std::nextafter(x, INFINITY)) check(x);
  return {worst, worst_x};
}

TEST(FastMath, MaxUlpErrorOverTheWholeFloatRange) {
  for (const Kernel& k : kernels()) {
    auto [worst, x] = worst_error(k);
    std::printf("%-10s max error %.3f ulp at x = %.9g\n", k.name, worst, double(x));
    EXPECT_LE(worst, k.max_ulp) << k.name << " at x = " << x;
  }
}

TEST(FastMath, GeluTanhTailErrorGrowsOnlyWithTheArgument) {
  // Below x = -1 the rounding of t = 2·√(2/π)·(x + 0.044715·x³) dominates: the error bound is
  // 4·|t| + 4 ulp (see fast_math.h), down to where the result underflows.
  double worst_ratio = 0;
  float worst_x = 0;
  // Every 4th float: 4M inputs.
  for (float x = -1.0f; x >= -20.0f; x = std::bit_cast<float>(std::bit_cast<uint32_t>(x) + 4)) {
    const LD t = gelu_tanh_arg(LD(x));
    const double e = ulp_error(gelu_tanh_f32(x), x * sigmoid_ref(t)) / (4 * double(std::fabs(t)) + 4);
    if (e > worst_ratio) {
      worst_ratio = e;
      worst_x = x;
    }
  }
  std::printf("gelu_tanh tail: max error / (4|t| + 4) = %.3f at x = %.9g\n", worst_ratio, double(worst_x));
  EXPECT_LE(worst_ratio, 1.0);
}

// The activation derivatives (fast_math_grad.h): |error| <= 5 ulp + 4·2^-24 absolute everywhere
// (each crosses zero, where f32 terms near 0.3 cancel), and <= 5 ulp relative for |x| >= 3; the
// tanh-gelu derivative below x = -1 as its forward, (4·|t| + 4) ulp. Same sample as above plus
// sweeps of the zero crossings, the branch switches and the tails.
LD gelu_grad_ref(LD x) { return std::erfc(-x / std::sqrt(LD(2))) / 2 + x * std::exp(-x * x / 2) / std::sqrt(2 * LD(M_PI)); }

TEST(FastMath, ActivationDerivativesWithinTheirBounds) {
  struct Grad {
    const char* name;
    float (*f)(float);
    LD (*ref)(LD);
    float lo;  // checked for x >= lo
  };
  const LD abs_allow = 4 * std::ldexp(LD(1), -24);
  for (const Grad& k : {Grad{"gelu'", gelu_grad_f32, gelu_grad_ref, -INFINITY},
                        Grad{"gelu_tanh'", gelu_tanh_grad_f32, gelu_tanh_grad_ref, -1.0f},
                        Grad{"silu'", silu_grad_f32, silu_grad_ref, -INFINITY}}) {
    double worst = 0, worst_rel = 0;
    float worst_x = 0, worst_rel_x = 0;
    auto check = [&](float x) {
      if (!(x >= k.lo) && !std::isnan(x)) return;
      const float y = k.f(x);
      const LD exact = k.ref(LD(x));
      if (std::isnan(exact) || std::isnan(y) || std::isinf(y)) {
        // NaN in, NaN out; -inf gives NaN (x·0); +inf gives 1.
        const bool ok = std::isnan(x) || x == -INFINITY ? std::isnan(y) : y == float(exact);
        if (!ok) worst = 1e9, worst_x = x;
        return;
      }
      const int e = std::max(std::ilogb(std::fabs(exact) > 0 ? std::fabs(exact) : LD(1e-45)), -126);
      const LD ulp = std::ldexp(LD(1), e - 23), err = std::fabs(LD(y) - exact);
      const double over = double(std::max(LD(0), err - abs_allow) / ulp);
      if (over > worst) worst = over, worst_x = x;
      if (std::fabs(x) >= 3) {
        const double rel = ulp_error(y, exact);
        if (rel > worst_rel) worst_rel = rel, worst_rel_x = x;
      }
    };
    std::mt19937 gen(19);
    std::uniform_real_distribution<float> moderate(-16.0f, 16.0f);
    for (int i = 0; i < (1 << 18); ++i) {
      check(std::bit_cast<float>(uint32_t(gen())));
      check(moderate(gen));
    }
    for (auto [lo, hi] : std::vector<std::pair<float, float>>{
             {-0.80f, -0.70f}, {-1.32f, -1.24f}, {0.60f, 0.64f}, {1.22f, 1.26f}, {-15.5f, -14.5f}, {-113.0f, -111.0f},
             {14.5f, 15.5f}, {19.5f, 20.5f}, {29.5f, 30.5f}})
      for (float x = lo; x <= hi; x = std::nextafter(x, INFINITY)) check(x);
    std::printf("%-11s max error 4·2^-24 + %.3f ulp at x = %.9g; |x| >= 3: %.3f ulp at x = %.9g\n", k.name, worst,
                double(worst_x), worst_rel, double(worst_rel_x));
    EXPECT_LE(worst, 5.0) << k.name << " at x = " << worst_x;
    EXPECT_LE(worst_rel, 5.0) << k.name << " at x = " << worst_rel_x;
  }
  double worst_ratio = 0;
  float worst_x = 0;
  for (float x = -1.0f; x >= -20.0f; x = std::bit_cast<float>(std::bit_cast<uint32_t>(x) + 64)) {
    const LD t = gelu_tanh_arg(LD(x));
    const double e = ulp_error(gelu_tanh_grad_f32(x), gelu_tanh_grad_ref(x)) / (4 * double(std::fabs(t)) + 4);
    if (e > worst_ratio) worst_ratio = e, worst_x = x;
  }
  std::printf("gelu_tanh' tail: max error / (4|t| + 4) = %.3f at x = %.9g\n", worst_ratio, double(worst_x));
  EXPECT_LE(worst_ratio, 1.0);
  EXPECT_EQ(gelu_grad_f32(0.0f), 0.5f);
  EXPECT_EQ(silu_grad_f32(0.0f), 0.5f);
  EXPECT_EQ(gelu_tanh_grad_f32(-0.0f), 0.5f);
}

// Inputs whose intermediates would be subnormal: the underflow tails x in [-100, -80] (every 16th
// float) and subnormal x itself (every 256th bit pattern, both signs), within each kernel's bound.
// The kernels clamp exp's argument and scale subnormal results once at the end (fast_exp.h), so
// these are the inputs a change to the clamping would get wrong.
TEST(FastMath, UnderflowTailsAndSubnormalInputsWithinBounds) {
  std::vector<float> xs;
  for (float x = -100.0f; x <= -80.0f; x = std::bit_cast<float>(std::bit_cast<uint32_t>(x) - 16)) xs.push_back(x);
  for (uint32_t b = 1; b < 0x00800000u; b += 256) {
    xs.push_back(std::bit_cast<float>(b));
    xs.push_back(std::bit_cast<float>(b | 0x80000000u));
  }
  std::vector<Kernel> ks = kernels();
  for (Kernel& k : ks)  // the tail bound of tanh-gelu holds here too: its results are ±0 or x/2
    if (std::string(k.name) == "gelu_tanh") k.f = gelu_tanh_f32;
  for (const Kernel& k : ks) {
    if (std::string(k.name) == "log") continue;  // log's subnormal inputs are swept above
    double worst = 0;
    float worst_x = 0;
    for (float x : xs) {
      const double e = ulp_error(k.f(x), k.ref(LD(x)));
      if (e > worst) worst = e, worst_x = x;
    }
    EXPECT_LE(worst, k.max_ulp) << k.name << " at x = " << worst_x;
  }
  const LD abs_allow = 4 * std::ldexp(LD(1), -24);
  struct Grad {
    const char* name;
    float (*f)(float);
    LD (*ref)(LD);
  };
  for (const auto& [name, f, ref] : {Grad{"gelu'", gelu_grad_f32, gelu_grad_ref},
                                     Grad{"gelu_tanh'", gelu_tanh_grad_f32, gelu_tanh_grad_ref},
                                     Grad{"silu'", silu_grad_f32, silu_grad_ref}}) {
    double worst = 0;
    float worst_x = 0;
    for (float x : xs) {
      const LD exact = ref(LD(x));
      // 5 ulp relative (|x| >= 3, as ActivationDerivativesWithinTheirBounds), else 5 ulp + 4·2^-24.
      const double e = std::fabs(x) >= 3 ? ulp_error(f(x), exact)
                                         : double(std::max(LD(0), std::fabs(LD(f(x)) - exact) - abs_allow) /
                                                  std::ldexp(LD(1), std::max(std::ilogb(std::fabs(exact)), -126) - 23));
      if (e > worst) worst = e, worst_x = x;
    }
    EXPECT_LE(worst, 5.0) << name << " at x = " << worst_x;
  }
}

TEST(FastMath, SpecialValues) {
  const float inf = INFINITY, nan = NAN;
  EXPECT_EQ(exp_f32(-inf), 0.0f);
  EXPECT_EQ(exp_f32(inf), inf);
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
  EXPECT_EQ(exp_f32(-103.0f), float(std::exp(-103.0L)));  // subnormal result kept
  EXPECT_EQ(log_f32(0.0f), -inf);
  EXPECT_EQ(log_f32(-0.0f), -inf);
  EXPECT_EQ(log_f32(1.0f), 0.0f);
  EXPECT_EQ(log_f32(inf), inf);
  EXPECT_TRUE(std::isnan(log_f32(-1.0f)));
  EXPECT_TRUE(std::isnan(log_f32(-inf)));
  EXPECT_EQ(tanh_f32(inf), 1.0f);
  EXPECT_EQ(tanh_f32(-inf), -1.0f);
  EXPECT_EQ(sigmoid_f32(-inf), 0.0f);
  EXPECT_EQ(sigmoid_f32(inf), 1.0f);
  EXPECT_EQ(silu_f32(inf), inf);
  EXPECT_EQ(erf_f32(inf), 1.0f);
  EXPECT_EQ(erf_f32(-inf), -1.0f);
  EXPECT_EQ(gelu_f32(inf), inf);
  EXPECT_EQ(gelu_tanh_f32(inf), inf);
  // As torch: x · (something that is 0 at -inf) is NaN.
  EXPECT_TRUE(std::isnan(silu_f32(-inf)));
  EXPECT_TRUE(std::isnan(gelu_f32(-inf)));
  EXPECT_TRUE(std::isnan(gelu_tanh_f32(-inf)));
  for (auto f : {exp_f32, log_f32, tanh_f32, sigmoid_f32, silu_f32, erf_f32, gelu_f32, gelu_tanh_f32})
    EXPECT_TRUE(std::isnan(f(nan)));
  // Odd functions keep the sign of zero.
  EXPECT_TRUE(std::signbit(tanh_f32(-0.0f)));
  EXPECT_TRUE(std::signbit(erf_f32(-0.0f)));
}

// gelu_and_grad_f32 and gelu_tanh_and_grad_f32 share the work of the value and derivative kernels
// and must return their bits: every float in the ranges where a branch or clamp switches (the
// clamps at -15, 10, 15 and -20, 9, 20, the erf/erfc switches at u = -0.5 and 0.875), a seeded
// sample of all bit patterns, and the specials. A NaN result must be NaN; its payload may differ.
bool same_bits_or_nan(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) || (std::isnan(a) && std::isnan(b));
}
void expect_value_and_grad_equal(ValueAndGrad (*both)(float), float (*value)(float), float (*grad)(float)) {
  int64_t checked = 0, differ = 0;
  float first = 0;
  auto check = [&](float x) {
    const ValueAndGrad r = both(x);
    ++checked;
    if (!same_bits_or_nan(r.value, value(x)) || !same_bits_or_nan(r.grad, grad(x)))
      if (differ++ == 0) first = x;
  };
  std::mt19937 gen(23);
  std::uniform_real_distribution<float> moderate(-20.0f, 20.0f);
  for (int i = 0; i < (1 << 20); ++i) {
    check(std::bit_cast<float>(uint32_t(gen())));
    check(moderate(gen));
  }
  for (auto [lo, hi] : {std::pair{-15.01f, -14.99f}, {-0.7072f, -0.7071f}, {1.2374f, 1.2375f}, {9.99f, 10.01f},
                        {14.99f, 15.01f}, {-20.01f, -19.99f}, {8.99f, 9.01f}, {19.99f, 20.01f}})
    for (float x = lo; x <= hi; x = std::nextafter(x, INFINITY)) check(x);
  for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 3.4e38f, -3.4e38f, 1e-45f, -1e-45f}) check(x);
  EXPECT_EQ(differ, 0) << "of " << checked << ", first at x = " << first;
  EXPECT_GT(checked, 2 << 20);
}

TEST(FastMath, GeluAndGradEqualsTheTwoKernelsBitwise) {
  expect_value_and_grad_equal(gelu_and_grad_f32, gelu_f32, gelu_grad_f32);
  expect_value_and_grad_equal(gelu_tanh_and_grad_f32, gelu_tanh_f32, gelu_tanh_grad_f32);
}

}  // namespace
}  // namespace dt::kernel
