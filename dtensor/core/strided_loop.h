// A loop over the elements of N same-shaped strided operands, one inner row at a time.
//
// strided_loop(shape, {&strides_a, &strides_b}, fn) calls fn(offsets, n, inner) for every row of
// the innermost dim, where offsets[k] is the element offset of the row's first element in operand
// k and inner[k] its stride along the row. Adjacent dims that are contiguous with each other in
// every operand are merged first, so a contiguous tensor is a single call with n = numel.
// Broadcast operands simply have stride 0 in the broadcast dims.
//
// parallel_strided_loop does the same with the elements (in row-major order of the merged dims)
// split into ranges on the rank's pool (parallel.h): a range may start or end inside a row, so fn
// sees pieces of rows; fn must write only the elements it is given.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "dtensor/core/parallel.h"
#include "dtensor/core/shape.h"

namespace dt {

namespace strided_detail {

// The merged dims of a strided loop: sizes[0] is the innermost dim, st[d][k] operand k's stride.
template <size_t N>
struct Collapsed {
  std::vector<int64_t> sizes;
  std::vector<std::array<int64_t, N>> st;
  int64_t numel = 1;
};

// Collapses dims: walks from innermost outwards, merging dim i into i+1 when every operand has
// stride[i] == stride[i+1] * size[i+1]. Size-1 dims are dropped. numel = 0 for an empty shape.
template <size_t N>
Collapsed<N> collapse(const Shape& shape, const std::array<const Strides*, N>& strides) {
  Collapsed<N> c;
  for (int64_t s : shape) c.numel *= s;
  if (c.numel == 0) return c;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    std::array<int64_t, N> s;
    for (size_t k = 0; k < N; ++k) s[k] = (*strides[k])[i];
    if (!c.sizes.empty()) {
      bool merge = true;
      for (size_t k = 0; k < N; ++k)
        if (s[k] != c.st.back()[k] * c.sizes.back()) merge = false;
      if (merge) {
        c.sizes.back() *= shape[i];
        continue;
      }
    }
    c.sizes.push_back(shape[i]);
    c.st.push_back(s);
  }
  return c;
}

// Calls fn for the elements [begin, end) (row-major over the merged dims), one row piece at a time.
template <size_t N, typename F>
void run_range(const Collapsed<N>& c, int64_t begin, int64_t end, F& fn) {
  std::array<int64_t, N> offsets{};
  if (c.sizes.empty()) {  // every dim has size 1: one element
    std::array<int64_t, N> inner{};
    if (begin < end) fn(offsets, int64_t(1), inner);
    return;
  }
  const int64_t n = c.sizes[0];
  const std::array<int64_t, N> inner = c.st[0];
  const size_t outer = c.sizes.size() - 1;
  // Position of `begin`: column `col` of the row with multi-index counter[] (innermost first).
  std::vector<int64_t> counter(outer, 0);
  int64_t rest = begin / n, col = begin % n;
  for (size_t d = 0; d < outer; ++d) {
    counter[d] = rest % c.sizes[d + 1];
    rest /= c.sizes[d + 1];
    for (size_t k = 0; k < N; ++k) offsets[k] += counter[d] * c.st[d + 1][k];
  }
  int64_t pos = begin;
  while (pos < end) {
    const int64_t len = std::min(n - col, end - pos);
    std::array<int64_t, N> o = offsets;
    for (size_t k = 0; k < N; ++k) o[k] += col * inner[k];
    fn(o, len, inner);
    pos += len;
    col = 0;
    size_t d = 0;
    for (; d < outer; ++d) {
      ++counter[d];
      for (size_t k = 0; k < N; ++k) offsets[k] += c.st[d + 1][k];
      if (counter[d] < c.sizes[d + 1]) break;
      for (size_t k = 0; k < N; ++k) offsets[k] -= c.st[d + 1][k] * c.sizes[d + 1];
      counter[d] = 0;
    }
    if (d == outer) return;
  }
}

}  // namespace strided_detail

template <size_t N, typename F>
void strided_loop(const Shape& shape, const std::array<const Strides*, N>& strides, F&& fn) {
  const auto c = strided_detail::collapse<N>(shape, strides);
  strided_detail::run_range<N>(c, 0, c.numel, fn);
}

// Elements per range of parallel_strided_loop: below this a loop runs on the calling thread (a
// task hand-off costs a few microseconds, 32 Ki f32 elements take about 10 with gelu's polynomial).
inline constexpr int64_t kElementwiseGrain = 32 * 1024;

template <size_t N, typename F>
void parallel_strided_loop(const Shape& shape, const std::array<const Strides*, N>& strides, F&& fn) {
  const auto c = strided_detail::collapse<N>(shape, strides);
  parallel_for(c.numel, kElementwiseGrain,
               [&](int64_t begin, int64_t end) { strided_detail::run_range<N>(c, begin, end, fn); });
}

}  // namespace dt
