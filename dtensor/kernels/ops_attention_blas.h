// Private helpers of the attention kernels (ops_attention.cc, the forward; ops_attention_grad.cc,
// the backward): the row-major GEMM they both multiply through, how a head's matrices are found
// inside q/k/v/mask tensors of any strides, the mask in additive form, and a row sum their
// vectorised row loops inline.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "dtensor/kernels/ops.h"
#include "dtensor/kernels/row_reduce.h"
#include "dtensor/core/tensor.h"

namespace dt::attention_detail {

// Computes c[m, n] = alpha · op(a) · op(b) + beta · c, row-major: op(a) = aᵀ when trans_a (a is
// [k, m]) else a ([m, k]); op(b) = bᵀ when trans_b (b is [n, k]) else b ([k, n]). Leading dims
// are row strides in elements. k = 0 gives c = beta · c without calling BLAS (an empty head dim:
// a and b may then be empty tensors' pointers).
template <typename C>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, C alpha, const C* a, int64_t lda, const C* b,
          int64_t ldb, C beta, C* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == C(0) ? C(0) : beta * c[i * ldc + j];
    return;
  }
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<C, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, blasint(m), blasint(n), blasint(k), alpha, a, blasint(lda), b, blasint(ldb),
                beta, c, blasint(ldc));
  else
    cblas_dgemm(CblasRowMajor, ta, tb, blasint(m), blasint(n), blasint(k), alpha, a, blasint(lda), b, blasint(ldb),
                beta, c, blasint(ldc));
}

// Returns t unchanged when its last dim has unit stride and its rows do not overlap (what BLAS
// needs of a row-major operand), else a contiguous copy.
inline Tensor blas_rows(const Tensor& t) {
  const int64_t rows = t.size(-2), cols = t.size(-1);
  const int64_t rs = t.strides()[size_t(t.dim() - 2)], cs = t.strides().back();
  const bool ok = (cs == 1 || cols == 1) && (rows == 1 || rs >= cols);
  return ok ? t : t.contiguous();
}

// Returns the element offset of batch `b` (row-major over the leading dims) in t.
inline int64_t batch_offset(const Tensor& t, int64_t b) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 3; d >= 0; --d) {
    const int64_t n = t.shape()[size_t(d)];
    off += (b % n) * t.strides()[size_t(d)];
    b /= n;
  }
  return off;
}

// Row stride of t's matrices, for BLAS: any value >= cols when there is a single row.
inline int64_t row_stride(const Tensor& t) {
  return t.size(-2) == 1 ? std::max<int64_t>(t.size(-1), 1) : t.strides()[size_t(t.dim() - 2)];
}

// Returns the additive mask (bool: 0 where true, -inf where false; any other dtype converted) in
// compute type C, viewed with broadcast strides as `scores` (q's leading dims, S, Sk); undefined
// for no mask.
template <typename C>
Tensor additive_mask(const Tensor& mask, const Shape& scores) {
  if (!mask.defined()) return {};
  Tensor m = mask.dtype() == DType::boolean
                 ? where(mask, Tensor::full({}, 0.0, dtype_of<C>()), Tensor::full({}, -INFINITY, dtype_of<C>()))
                 : mask.to(dtype_of<C>());
  Shape full_rank(scores.size() - size_t(m.dim()), 1);
  full_rank.insert(full_rank.end(), m.shape().begin(), m.shape().end());
  return m.reshape(full_rank).expand(scores);
}

// Returns Σ a[c] (or Σ a[c]·b[c] when `product`) over c < n in double, in kernel::row_sum's lane
// order, written out here because row_sum is not inlined into a target clone (and a call per
// element keeps the loop scalar).
template <typename C>
[[gnu::always_inline]] inline double lane_sum(const C* a, const C* b, int64_t n, bool product) {
  constexpr int L = kernel::kLanes;
  static_assert(L == 8, "the tree below combines 8 lanes");
  double l[L] = {};
  int64_t c = 0;
  if (product)
    for (; c + L <= n; c += L)
      for (int j = 0; j < L; ++j) l[j] += double(a[c + j]) * double(b[c + j]);
  else
    for (; c + L <= n; c += L)
      for (int j = 0; j < L; ++j) l[j] += double(a[c + j]);
  double s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
  for (; c < n; ++c) s += product ? double(a[c]) * double(b[c]) : double(a[c]);
  return s;
}

}  // namespace dt::attention_detail
