// Checks activation_fma's tanh gelu and silu: their error bounds against long double (the comment
// in activation_fma.cc) and their distance to fast_math.h's scalar kernels at the widest width the
// CPU runs; specials and that a value does not depend on where it sits in a row at each width (AVX2,
// and AVX-512 where present); and that the two widths give the same bits. Skipped on a CPU without
// AVX2 and FMA.
#include "dtensor/kernels/activation_fma.h"

#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "dtensor/core/blas_kernels.h"
#include "dtensor/kernels/fast_math.h"
#include "tests/support/ulp_error.h"

namespace dt {
namespace {

using test::LD;
using test::gelu_tanh_arg;
using test::gelu_tanh_grad_ref;
using test::silu_grad_ref;
using test::sigmoid_ref;
using test::ulp_error;

// The widths this CPU runs: none without AVX2 and FMA, AVX2, and AVX-512 where it has it.
std::vector<ActivationIsa> cpu_widths() {
  if (cpu_isa() < BlasIsa::avx2) return {};
  if (cpu_isa() == BlasIsa::avx512) return {ActivationIsa::avx2, ActivationIsa::avx512};
  return {ActivationIsa::avx2};
}
const char* width_name(ActivationIsa isa) { return isa == ActivationIsa::avx512 ? "AVX-512" : "AVX2"; }

#define DT_SKIP_WITHOUT_FMA() \
  if (cpu_widths().empty()) GTEST_SKIP() << "no AVX2 and FMA"

// Runs check at each width the CPU has, that width selected and named in any failure.
template <typename F>
void at_each_width(F&& check) {
  for (ActivationIsa width : cpu_widths()) {
    const ScopedActivationIsa scoped(width);
    SCOPED_TRACE(width_name(width));
    check();
  }
}

// Runs check at the widest width only: the long sweeps of inputs() need not run twice on an AVX-512
// CPU, where Avx2AndAvx512AreBitwiseEqual shows the narrower width gives the same bits over them.
template <typename F>
void at_widest_width(F&& check) {
  const ScopedActivationIsa scoped(cpu_widths().back());
  SCOPED_TRACE(width_name(cpu_widths().back()));
  check();
}

// The inputs: a seeded sample of all 2^32 bit patterns (NaN, ±inf, subnormals), uniform values in
// [-16, 16], and every float in the ranges where the results underflow or saturate.
std::vector<float> inputs() {
  std::vector<float> xs;
  std::mt19937 gen(23);
  std::uniform_real_distribution<float> moderate(-16.0f, 16.0f);
  for (int i = 0; i < (1 << 19); ++i) {
    xs.push_back(std::bit_cast<float>(uint32_t(gen())));
    xs.push_back(moderate(gen));
  }
  for (auto [lo, hi] : {std::pair{-113.0f, -100.0f}, {-1.05f, -0.95f}, {15.0f, 18.0f}})
    for (float x = lo; x <= hi; x = std::nextafter(x, INFINITY)) xs.push_back(x);
  return xs;
}

// Returns act over xs through activation_fma, as one row.
std::vector<float> run(Activation act, const std::vector<float>& xs) {
  std::vector<float> out(xs.size());
  activation_fma(act, xs.data(), out.data(), int64_t(xs.size()));
  return out;
}

TEST(ActivationFma, WithinTheirBoundsOfLongDouble) {
  DT_SKIP_WITHOUT_FMA();
  at_widest_width([] {
    const std::vector<float> xs = inputs();
    const std::vector<float> silu = run(Activation::silu, xs), gelu = run(Activation::gelu_tanh, xs);
    double silu_worst = 0, gelu_worst = 0, tail_worst = 0;  // tail: error / (4|t| + 4) below x = -1
    for (size_t i = 0; i < xs.size(); ++i) {
      const LD x = xs[i];
      silu_worst = std::max(silu_worst, ulp_error(silu[i], x * sigmoid_ref(x)));
      const LD t = gelu_tanh_arg(x);
      const double e = ulp_error(gelu[i], x * sigmoid_ref(t));
      if (xs[i] >= -1.0f || std::isnan(xs[i])) gelu_worst = std::max(gelu_worst, e);
      else tail_worst = std::max(tail_worst, e / (4 * double(std::fabs(t)) + 4));
    }
    std::printf("silu max %.3f ulp; gelu_tanh max %.3f ulp (x >= -1), tail max error / (4|t| + 4) = %.3f\n",
                silu_worst, gelu_worst, tail_worst);
    EXPECT_LE(silu_worst, 3.0);
    EXPECT_LE(gelu_worst, 4.0);
    EXPECT_LE(tail_worst, 1.0);
  });
}

// Against the scalar kernels the two paths serve: the same bounds, measured between them (where
// both are within a few ulp of the exact value, they are within the sum of each other).
TEST(ActivationFma, CloseToTheScalarKernels) {
  DT_SKIP_WITHOUT_FMA();
  at_widest_width([] {
    const std::vector<float> xs = inputs();
    const std::vector<float> silu = run(Activation::silu, xs), gelu = run(Activation::gelu_tanh, xs);
    double silu_worst = 0, gelu_worst = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      silu_worst = std::max(silu_worst, ulp_error(silu[i], LD(kernel::silu_f32(xs[i]))));
      if (xs[i] >= -1.0f || std::isnan(xs[i]))
        gelu_worst = std::max(gelu_worst, ulp_error(gelu[i], LD(kernel::gelu_tanh_f32(xs[i]))));
    }
    std::printf("against the scalar kernels: silu %.3f ulp, gelu_tanh %.3f ulp (x >= -1)\n", silu_worst, gelu_worst);
    EXPECT_LE(silu_worst, 6.0);  // 3 + 3 (silu_f32's bound)
    EXPECT_LE(gelu_worst, 8.0);  // 4 + 4 (gelu_tanh_f32's bound)
  });
}

TEST(ActivationFma, SpecialValues) {
  DT_SKIP_WITHOUT_FMA();
  at_each_width([] {
    const float inf = INFINITY;
    const std::vector<float> xs = {NAN, inf, -inf, 0.0f, -0.0f, 1e30f, -1e30f, FLT_MAX, -FLT_MAX, 1e-45f, -1e-45f};
    for (Activation act : {Activation::silu, Activation::gelu_tanh}) {
      const std::vector<float> y = run(act, xs);
      EXPECT_TRUE(std::isnan(y[0]));
      EXPECT_EQ(y[1], inf);
      EXPECT_TRUE(std::isnan(y[2]));  // -inf · 0, as torch
      EXPECT_EQ(std::bit_cast<uint32_t>(y[3]), 0u);
      EXPECT_EQ(std::bit_cast<uint32_t>(y[4]), 0x80000000u);  // -0
      EXPECT_EQ(y[5], 1e30f);
      EXPECT_EQ(std::bit_cast<uint32_t>(y[6]), 0x80000000u);  // underflows to -0
      EXPECT_EQ(y[7], FLT_MAX);
      EXPECT_EQ(std::bit_cast<uint32_t>(y[8]), 0x80000000u);
      // Tiny |x|: σ(t) = 1/2 and t ≈ 0: x/2 rounds to ±0 or the smallest subnormal, as x·σ(t) does.
      EXPECT_EQ(y[9], kernel::silu_f32(1e-45f));
      EXPECT_EQ(y[10], kernel::silu_f32(-1e-45f));
    }
  });
}

// A value does not depend on its position: every start and length (full vectors and masked tails)
// gives the bits of the element computed alone.
TEST(ActivationFma, SameBitsAtEveryPositionAndLength) {
  DT_SKIP_WITHOUT_FMA();
  at_each_width([] {
    std::mt19937 gen(5);
    std::uniform_real_distribution<float> dist(-12.0f, 12.0f);
    std::vector<float> xs(67);
    for (float& x : xs) x = dist(gen);
    for (Activation act : {Activation::silu, Activation::gelu_tanh}) {
      std::vector<float> alone(xs.size());
      for (size_t i = 0; i < xs.size(); ++i) activation_fma(act, &xs[i], &alone[i], 1);
      for (int64_t start : {0, 1, 7, 15, 16, 17})
        for (int64_t len : {0, 1, 15, 16, 17, 33, 50}) {
          std::vector<float> out(xs.size(), -7.0f);
          activation_fma(act, xs.data() + start, out.data() + start, len);
          for (int64_t i = 0; i < int64_t(xs.size()); ++i) {
            const float want = i >= start && i < start + len ? alone[size_t(i)] : -7.0f;  // nothing outside written
            ASSERT_EQ(std::memcmp(&out[size_t(i)], &want, 4), 0) << "start " << start << " len " << len << " i " << i;
          }
        }
    }
  });
}

// AVX2 builds vscalefps's product from two powers of two and blends instead of masking: the same
// bits as the AVX-512 lanes over every input of the bounds test. Needs an AVX-512 CPU to run both.
TEST(ActivationFma, Avx2AndAvx512AreBitwiseEqual) {
  DT_SKIP_WITHOUT_FMA();
  if (cpu_widths().size() < 2) {
    EXPECT_THROW(set_activation_isa(ActivationIsa::avx512), ValueError);
    GTEST_SKIP() << "this CPU has no AVX-512: only the AVX2 lanes run here (checked against long double)";
  }
  const std::vector<float> xs = inputs();
  for (Activation act : {Activation::silu, Activation::gelu_tanh}) {
    std::vector<float> narrow, wide;
    {
      const ScopedActivationIsa scoped(ActivationIsa::avx2);
      narrow = run(act, xs);
    }
    {
      const ScopedActivationIsa scoped(ActivationIsa::avx512);
      wide = run(act, xs);
    }
    size_t differ = 0;
    for (size_t i = 0; i < xs.size(); ++i) differ += std::memcmp(&narrow[i], &wide[i], 4) != 0;
    EXPECT_EQ(differ, 0u) << "of " << xs.size() << " values, activation " << int(act);
  }
}

// Returns act' over xs through activation_grad_fma, as one row.
std::vector<float> run_grad(Activation act, const std::vector<float>& xs) {
  std::vector<float> out(xs.size());
  activation_grad_fma(act, xs.data(), out.data(), int64_t(xs.size()));
  return out;
}

// The derivatives against long double, with the bounds of fast_math_grad.h's scalar kernels: each
// crosses zero (gelu at x = -0.75, silu at x = -1.28), where any f32 evaluation cancels, so the
// bound is 5 ulp of the result plus 4·2^-24 absolute, and 5 ulp relative for |x| >= 3; the tanh
// gelu's below x = -1, as its value, (4·|t| + 4) ulp. Specials: NaN stays NaN, +inf gives 1, -inf
// NaN (x·0), ±0 gives 1/2.
TEST(ActivationFma, DerivativesWithinTheirBoundsOfLongDouble) {
  DT_SKIP_WITHOUT_FMA();
  at_widest_width([] {
    std::vector<float> xs = inputs();
    for (auto [lo, hi] : {std::pair{-0.80f, -0.70f}, {-1.32f, -1.24f}, {8.5f, 9.5f}, {29.5f, 30.5f}})
      for (float x = lo; x <= hi; x = std::nextafter(x, INFINITY)) xs.push_back(x);
    const LD abs_allow = 4 * std::ldexp(LD(1), -24);
    for (Activation act : {Activation::silu, Activation::gelu_tanh}) {
      const bool gelu = act == Activation::gelu_tanh;
      const std::vector<float> g = run_grad(act, xs);
      double worst = 0, worst_rel = 0, tail = 0;
      float worst_x = 0;
      for (size_t i = 0; i < xs.size(); ++i) {
        const float x = xs[i];
        const LD exact = gelu ? gelu_tanh_grad_ref(x) : silu_grad_ref(x);
        if (std::isnan(x) || std::isinf(x) || std::isnan(exact)) {
          const bool ok = std::isnan(x) || x == -INFINITY ? std::isnan(g[i]) : g[i] == 1.0f;
          if (!ok) worst = 1e9, worst_x = x;
          continue;
        }
        if (gelu && x < -1.0f) {
          tail = std::max(tail, ulp_error(g[i], exact) / (4 * double(std::fabs(gelu_tanh_arg(x))) + 4));
          continue;
        }
        const int e = std::max(std::ilogb(std::fabs(exact) > 0 ? std::fabs(exact) : LD(1e-45)), -126);
        const double over = double(std::max(LD(0), std::fabs(LD(g[i]) - exact) - abs_allow) / std::ldexp(LD(1), e - 23));
        if (over > worst) worst = over, worst_x = x;
        if (std::fabs(x) >= 3) worst_rel = std::max(worst_rel, ulp_error(g[i], exact));
      }
      std::printf("%s': 4·2^-24 + %.3f ulp (at x = %.9g); |x| >= 3: %.3f ulp; tail error / (4|t| + 4) = %.3f\n",
                  gelu ? "gelu_tanh" : "silu", worst, double(worst_x), worst_rel, tail);
      EXPECT_LE(worst, 5.0) << "at x = " << worst_x;
      EXPECT_LE(worst_rel, 5.0);
      EXPECT_LE(tail, 1.0);
      for (float zero : {0.0f, -0.0f}) EXPECT_EQ(run_grad(act, {zero})[0], 0.5f);
    }
  });
}

// activation_and_grad_fma gives activation_fma's values and activation_grad_fma's derivatives bit
// for bit (the training step's fused gelu against the plain gelu and gelu_backward), over every
// start and length at each width, and the derivative may overwrite x; the two widths agree.
TEST(ActivationFma, ValueAndDerivativeInOnePassAreTheSeparateKernelsBits) {
  DT_SKIP_WITHOUT_FMA();
  const std::vector<float> xs = inputs();
  std::vector<std::vector<float>> grads_by_width;
  for (ActivationIsa width : cpu_widths()) {
    const ScopedActivationIsa scoped(width);
    SCOPED_TRACE(width_name(width));
    for (Activation act : {Activation::silu, Activation::gelu_tanh}) {
      const std::vector<float> value = run(act, xs), grad = run_grad(act, xs);
      std::vector<float> v(xs.size()), g = xs;  // g starts as x and is overwritten
      activation_and_grad_fma(act, g.data(), v.data(), g.data(), int64_t(xs.size()));
      EXPECT_EQ(std::memcmp(v.data(), value.data(), v.size() * 4), 0) << "value, activation " << int(act);
      EXPECT_EQ(std::memcmp(g.data(), grad.data(), g.size() * 4), 0) << "derivative, activation " << int(act);
      grads_by_width.push_back(grad);
      for (int64_t start : {0, 1, 7, 9, 16, 17})
        for (int64_t len : {0, 1, 7, 8, 15, 16, 17, 33}) {
          std::vector<float> vo(64, -7.0f), go(64, -7.0f);
          activation_and_grad_fma(act, xs.data() + start, vo.data() + start, go.data() + start, len);
          for (int64_t i = 0; i < 64; ++i) {
            const bool in = i >= start && i < start + len;
            const float want_v = in ? value[size_t(i)] : -7.0f, want_g = in ? grad[size_t(i)] : -7.0f;
            ASSERT_EQ(std::memcmp(&vo[size_t(i)], &want_v, 4), 0) << "start " << start << " len " << len << " i " << i;
            ASSERT_EQ(std::memcmp(&go[size_t(i)], &want_g, 4), 0) << "start " << start << " len " << len << " i " << i;
          }
        }
    }
  }
  if (grads_by_width.size() == 4) {  // AVX2 then AVX-512, each for silu and gelu
    for (size_t a = 0; a < 2; ++a)
      EXPECT_EQ(std::memcmp(grads_by_width[a].data(), grads_by_width[a + 2].data(), xs.size() * 4), 0) << a;
  }
}

}  // namespace
}  // namespace dt
