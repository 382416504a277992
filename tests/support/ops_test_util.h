// Helpers shared by the tests (the kernel tests ops_*_test.cc first): seeded inputs, strided views of them,
// naive double-precision reference loops to check the kernels against, and comparisons of results.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cfenv>
#include <cstdint>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "dtensor/kernels/ops.h"
#include "dtensor/core/rng.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace dt::test {

// Returns the largest |actual - expected| (infinity where the shapes differ or only one side is
// finite, as dt::compare counts it).
inline double max_abs_diff(const Tensor& actual, const Tensor& expected) {
  return compare(actual, expected).max_abs_diff;
}

// Returns uniform [low, high) values of the given shape and dtype, from a fixed seed.
inline Tensor uniform(const Shape& shape, DType dtype, uint64_t seed, double low = -2, double high = 2) {
  Generator gen(seed);
  if (is_floating(dtype)) return rand(shape, gen, dtype, low, high);
  if (dtype == DType::boolean) return gt(rand(shape, gen, DType::f64, 0, 1), Tensor::full({}, 0.5, DType::f64));
  return randint(shape, int64_t(low), int64_t(high), gen, dtype);
}

// Returns true if f produced a subnormal number (the underflow flag) or, on x86, read one (the
// denormal-operand flag of MXCSR): the CPU's slow path, 3-4x the time of an ordinary operation
// in the activation loops. Runs on the calling thread, whose flags these are, so call it with one
// thread per rank (the default).
inline bool computes_subnormals(const std::function<void()>& f) {
  std::feclearexcept(FE_ALL_EXCEPT);
#if defined(__SSE__)
  _mm_setcsr(_mm_getcsr() & ~0x3fu);
#endif
  f();
  bool seen = std::fetestexcept(FE_UNDERFLOW) != 0;
#if defined(__SSE__)
  seen = seen || (_mm_getcsr() & 0x2u) != 0;  // DE
#endif
  return seen;
}

// Inputs whose intermediates are subnormal or underflow: the tails x in [-100, -80] (every 64th
// float) and [-15.5, -13] (every 16th), subnormal x itself (every 4096th bit pattern, both signs),
// zeros, infinities and the kernels' clamp points (fast_math.h, fast_math_grad.h).
inline std::vector<float> activation_tail_inputs() {
  std::vector<float> xs = {0.0f, -0.0f, INFINITY, -INFINITY, -20.0f, 20.0f, -15.0f, 15.0f, 9.0f, 10.0f, 30.0f, -112.0f};
  auto sweep = [&](float lo, float hi, uint32_t step) {
    for (float x = lo; x <= hi; x = std::bit_cast<float>(std::bit_cast<uint32_t>(x) - step)) xs.push_back(x);
  };
  sweep(-100.0f, -80.0f, 64);  // negative floats: a smaller bit pattern is a value nearer 0
  sweep(-15.5f, -13.0f, 16);
  for (uint32_t b = 1; b < 0x00800000u; b += 4096) {
    xs.push_back(std::bit_cast<float>(b));
    xs.push_back(std::bit_cast<float>(b | 0x80000000u));
  }
  return xs;
}

// Returns the row-major index into `shape` of the element that broadcasts to flat index `i` of
// `out_shape` (numpy rules), computed the slow obvious way.
inline int64_t broadcast_index(const Shape& shape, const Shape& out_shape, int64_t i) {
  int64_t idx = 0, mul = 1;
  const size_t lead = out_shape.size() - shape.size();
  for (size_t d = out_shape.size(); d-- > 0;) {
    const int64_t coord = i % out_shape[d];
    i /= out_shape[d];
    if (d < lead) continue;
    const int64_t s = shape[d - lead];
    idx += (s == 1 ? 0 : coord) * mul;
    mul *= s;
  }
  return idx;
}

// Checks every element of `actual` against `expected` (row-major) within atol + rtol*|expected|.
// NaN must match NaN.
inline void expect_values(const Tensor& actual, const std::vector<double>& expected, double rtol, double atol,
                          const std::string& what = "") {
  std::vector<double> a = actual.to_doubles();
  ASSERT_EQ(a.size(), expected.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = expected[i];
    bool ok = (std::isnan(x) && std::isnan(y)) || x == y || std::fabs(x - y) <= atol + rtol * std::fabs(y);
    if (!ok && reported++ < 5) ADD_FAILURE() << what << " element " << i << ": got " << x << ", want " << y;
  }
}

// Tolerances for comparing a kernel in `dtype` against a double reference.
inline double rtol_for(DType t) {
  switch (t) {
    case DType::bf16: return 1.6e-2;
    case DType::f16: return 2e-3;
    case DType::f32: return 2e-6;
    default: return 1e-12;
  }
}

// Checks a GEMM's output c = alpha * a @ b + beta * c0 (a [m, k], b [k, n], any strides, values
// as stored) element by element against the f64 sum of the same products, within f32 accumulation
// error: (k + 2) * 2^-24 of the sum of the terms' magnitudes (a lost k step, a wrong panel or a
// misplaced tile is off by a whole term or more). beta == 0 ignores c0.
inline void expect_gemm_matches_f64(const Tensor& got, const Tensor& a, const Tensor& b, const Tensor& c0,
                                    float alpha, float beta) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const std::vector<double> av = a.contiguous().to_doubles(), bv = b.contiguous().to_doubles(), cv = c0.to_doubles();
  const std::vector<double> g = got.to_doubles();
  int64_t bad = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double term = av[size_t(i * k + p)] * bv[size_t(p * n + j)];
        sum += term;
        mag += std::abs(term);
      }
      const double seed = beta == 0 ? 0 : double(beta) * cv[size_t(i * n + j)];
      const double want = double(alpha) * sum + seed;
      const double tol = double(k + 2) * std::ldexp(1.0, -24) * (std::abs(double(alpha)) * mag + std::abs(seed));
      const double x = g[size_t(i * n + j)];
      if (!(std::abs(x - want) <= tol) && bad++ < 5)
        ADD_FAILURE() << "c[" << i << ", " << j << "] = " << x << ", want " << want << " within " << tol;
    }
  EXPECT_EQ(bad, 0);
}

// Runs `body` and checks it throws E with a one-line message holding every one of `parts`.
template <typename E>
void expect_error(const std::function<void()>& body, const std::vector<std::string>& parts) {
  try {
    body();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

}  // namespace dt::test
