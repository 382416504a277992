// A loop over the elements of N same-shaped strided operands, one inner row at a time.
//
// strided_loop(shape, {&strides_a, &strides_b}, fn) calls fn(offsets, n, inner) for every row of
// the innermost dim, where offsets[k] is the element offset of the row's first element in operand
// k and inner[k] its stride along the row. Adjacent dims that are contiguous with each other in
// every operand are merged first, so a contiguous tensor is a single call with n = numel.
// Broadcast operands simply have stride 0 in the broadcast dims.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "dtensor/core/shape.h"

namespace dt {

template <size_t N, typename F>
void strided_loop(const Shape& shape, const std::array<const Strides*, N>& strides, F&& fn) {
  for (int64_t s : shape)
    if (s == 0) return;
  // Collapse dims: walk from innermost outwards, merging dim i into i+1 when every operand has
  // stride[i] == stride[i+1] * size[i+1]. Size-1 dims are dropped.
  std::vector<int64_t> sizes;
  std::vector<std::array<int64_t, N>> st;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    std::array<int64_t, N> s;
    for (size_t k = 0; k < N; ++k) s[k] = (*strides[k])[i];
    if (!sizes.empty()) {
      bool merge = true;
      for (size_t k = 0; k < N; ++k)
        if (s[k] != st.back()[k] * sizes.back()) merge = false;
      if (merge) {
        sizes.back() *= shape[i];
        continue;
      }
    }
    sizes.push_back(shape[i]);
    st.push_back(s);
  }
  // Now sizes[0] is the innermost dim.
  std::array<int64_t, N> offsets{};
  if (sizes.empty()) {
    std::array<int64_t, N> inner{};
    fn(offsets, int64_t(1), inner);
    return;
  }
  const int64_t n = sizes[0];
  const std::array<int64_t, N> inner = st[0];
  const size_t outer = sizes.size() - 1;
  std::vector<int64_t> counter(outer, 0);
  while (true) {
    fn(offsets, n, inner);
    size_t d = 0;
    for (; d < outer; ++d) {
      ++counter[d];
      for (size_t k = 0; k < N; ++k) offsets[k] += st[d + 1][k];
      if (counter[d] < sizes[d + 1]) break;
      for (size_t k = 0; k < N; ++k) offsets[k] -= st[d + 1][k] * sizes[d + 1];
      counter[d] = 0;
    }
    if (d == outer) return;
  }
}

}  // namespace dt
