// The softmax row of the attention kernel, in AVX-512 intrinsics.
//
// fast_exp.h's exp is portable C++ compiled without contraction (every SIMD clone gives the same
// bits): the Cephes polynomial as separate multiplies and adds, 2^n built from integer bits in
// two factors, clamps as selects: about 30 instructions per 16 values. Here the same reduction and
// polynomial run as FMAs, n comes from one roundscale and 2^n from one scalef (which also gives
// +inf past the top), and the zero below -87.33654 is a masked result: 16 instructions. The row
// makes two passes instead of five (scale, mask, max, exp, sum): the max of the unscaled scores
// times scale is the max of the scaled ones (rounding is monotonic), so without a mask the first
// pass only reads; the second computes s·scale - max in one FMA (one rounding instead of two),
// the exp, the store and the double sum.
//
// Measured on the AMD EPYC (Zen 4) host, one thread, kernels_bench BM_Attention [4, 8, 256, 64]
// causal: see the commit that added this file.
#include "dtensor/kernels/exp_row_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "dtensor/core/blas_kernels.h"
#include "dtensor/kernels/exp_avx512_lanes.h"

// GCC 12's max, min and roundscale intrinsics start from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized flags once they are inlined here; no value is read uninitialized. Clang has
// no such warning (and warns about the unknown option), so it is silenced for GCC only.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace dt::attention_detail {

namespace {

#define DT_EXP_ROW_TARGET __attribute__((target("avx512f")))

// Returns the lanes of a 16-value step with `left` values still to do.
DT_EXP_ROW_TARGET inline __mmask16 lanes(int64_t left) {
  return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
}

// Returns exp(x) per lane (see exp_avx512): exp_avx512_lanes.h's p·2^n, applied by scalef. Lanes below kLo (-inf included) are 0; NaN passes through max/min
// (which return their second operand when either is NaN) and the mask (unordered compare).
DT_EXP_ROW_TARGET inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33654f), hi = _mm512_set1_ps(100.0f);
  const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);
  const __m512 xc = _mm512_min_ps(hi, _mm512_max_ps(lo, x));  // above 88.72 scalef overflows to +inf
  const auto [p, n] = avx512_lanes::exp_parts(xc);
  return _mm512_maskz_scalef_ps(keep, p, n);
}

}  // namespace

bool exp_row_avx512_supported() { return cpu_isa() == BlasIsa::avx512; }

DT_EXP_ROW_TARGET void exp_avx512(const float* x, float* y, int64_t n) {
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 k = lanes(n - c);
    _mm512_mask_storeu_ps(y + c, k, exp16(_mm512_maskz_loadu_ps(k, x + c)));
  }
}

DT_EXP_ROW_TARGET float exp_row_avx512(float* row, int64_t visible, int64_t n, float scale, const float* m,
                                       int64_t mask_col, float m_old, double* block_sum) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const __m512 vneg_inf = _mm512_set1_ps(neg_inf);
  // Pass 1: the row's max of the scaled scores. With a mask (or a scale <= 0, which reverses the
  // order) the scaled, masked scores are stored, rounded as ops_attention.cc's exp_row rounds them
  // (multiply, then add), and pass 2 scales by 1.
  float pass2_scale = scale;
  __m512 vmax = vneg_inf;
  if (m || !(scale > 0)) {
    if (m && mask_col != 1)  // a mask broadcast along the keys: scalar, rare
      for (int64_t c = 0; c < visible; ++c) row[c] = row[c] * scale + m[c * mask_col];
    const __m512 vs = _mm512_set1_ps(scale);
    for (int64_t c = 0; c < visible; c += 16) {
      const __mmask16 k = lanes(visible - c);
      __m512 t = _mm512_maskz_loadu_ps(k, row + c);
      if (!m) t = _mm512_mul_ps(t, vs);
      else if (mask_col == 1) t = _mm512_add_ps(_mm512_mul_ps(t, vs), _mm512_maskz_loadu_ps(k, m + c));
      _mm512_mask_storeu_ps(row + c, k, t);
      vmax = _mm512_mask_max_ps(vmax, k, vmax, t);
    }
    pass2_scale = 1;
  } else {
    for (int64_t c = 0; c < visible; c += 16) {
      const __mmask16 k = lanes(visible - c);
      vmax = _mm512_mask_max_ps(vmax, k, vmax, _mm512_maskz_loadu_ps(k, row + c));
    }
  }
  float row_max = _mm512_reduce_max_ps(vmax);
  if (pass2_scale != 1) row_max *= scale;
  const float m_new = std::max(m_old, row_max);
  if (m_new == neg_inf) return m_new;  // no finite score so far: the caller looks at the row
  // Pass 2: e = exp(s·scale - m_new), stored, summed in double (two 8-lane accumulators, combined
  // in a fixed order: the sum depends only on the row).
  const __m512 vs = _mm512_set1_ps(pass2_scale), vneg_max = _mm512_set1_ps(-m_new);
  __m512d sum_lo = _mm512_setzero_pd(), sum_hi = _mm512_setzero_pd();
  for (int64_t c = 0; c < visible; c += 16) {
    const __mmask16 k = lanes(visible - c);
    const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, row + c), vs, vneg_max)));
    _mm512_mask_storeu_ps(row + c, k, e);
    sum_lo = _mm512_add_pd(sum_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    sum_hi = _mm512_add_pd(sum_hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  std::fill(row + visible, row + n, 0.f);
  *block_sum = _mm512_reduce_add_pd(_mm512_add_pd(sum_lo, sum_hi));
  return m_new;
}

}  // namespace dt::attention_detail
