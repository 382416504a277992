// Private helpers of the row kernels (ops_nn.cc, ops_attention.cc): a row's max and sum, and the
// exp they use, written so that the compiler vectorises them and results are reproducible.
//
// Row loops reduce in kLanes interleaved lanes (element i goes to lane i % kLanes, lanes combined
// in a fixed tree): the order depends only on n, so results are reproducible, and independent
// lanes let the compiler vectorise a reduction it may not reassociate.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "dtensor/kernels/fast_exp.h"

namespace dt::kernel {

inline constexpr int kLanes = 8;

// Returns the max of a row, -inf when n = 0 (NaN-free rows; a NaN simply propagates through the
// later exp).
// Both are always inlined, so that they take the vector width of the SIMD-cloned row kernels that
// call them (simd_clones.h) instead of being called at the baseline's.
template <typename C>
[[gnu::always_inline]] inline C row_max(const C* v, int64_t n) {
  C lanes[kLanes];
  for (C& l : lanes) l = -std::numeric_limits<C>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] = v[i + j] > lanes[j] ? v[i + j] : lanes[j];
  C mx = lanes[0];
  for (int j = 1; j < kLanes; ++j) mx = lanes[j] > mx ? lanes[j] : mx;
  for (; i < n; ++i) mx = v[i] > mx ? v[i] : mx;
  return mx;
}

// Returns the sum over i < n of term(i) (a double), in lanes.
template <typename Term>
[[gnu::always_inline]] inline double row_sum(int64_t n, Term term) {
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] += term(i + j);
  double s = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  for (; i < n; ++i) s += term(i);
  return s;
}

// Returns exp(v) for softmax-like rows: the vectorisable fast_exp for f32 compute (f32, bf16,
// f16), std::exp for f64. fast_exp flushes results below 2^-126 to 0, which a row normalised by a
// sum >= 1 cannot tell apart.
template <typename C>
inline C softmax_exp(C v) {
  if constexpr (std::is_same_v<C, float>)
    return fast_exp(v);
  else
    return std::exp(v);
}

// Writes e[i] = softmax_exp(v[i] - mx) for i < n and returns Σ e[i] (row_sum's lanes, in double):
// the exps of a softmax-like row. The f32 one is compiled for each CPU's vector width
// (simd_clones.h; the same bits on every width): a plain loop runs at a third of the rate
// (ops_nn.cc).
double exp_row_sum(const float* v, float mx, float* e, int64_t n);
double exp_row_sum(const double* v, double mx, double* e, int64_t n);

}  // namespace dt::kernel
