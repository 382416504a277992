// The softmax row of the packed attention, in AVX-512 and in AVX2 + FMA intrinsics.
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
// The AVX2 row is the AVX-512 row on 8-lane halves of each 16-value step. Its exp core is
// exp_avx2_lanes.h's, which gives the AVX-512 lanes' p and n bit for bit; scalef's p·2^n is
// p·2^n1·2^(n - n1) with n1 = n clamped to [-125, 127], where the first product is exact (p is in
// [0.7, 1.42]) and the second rounds once, as scalef does, into the subnormal range or to +inf.
// The sum keeps the AVX-512 row's two 8-lane double accumulators as four 4-lane ones (lanes 0-3,
// 4-7, 8-11, 12-15 of each step) and both rows finish with the same reduction, written out here
// (GCC's and clang's _mm512_reduce_add_pd group the lanes differently). The row max is exact in
// any order. So every row without a NaN score gets the same exponentials, sum and max at both
// widths (exp_row_fma_test.cc); with a NaN score both give a NaN output row.
//
// Measured, one thread, kernels_bench BM_Attention [4, 8, S, 64]: the AVX-512 row on Zen 4, see the
// commit that added it. The AVX2 row on Zen 3 against exp_row_f32 (min of 8 alternating rounds on a
// noisy host): S 256 causal 8.73 -> 7.48 ms, non-causal 14.8 -> 12.2; S 1024 non-causal 403 -> 340,
// causal within the noise (180-197 both).
#include "dtensor/kernels/exp_row_fma.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "dtensor/core/blas_kernels.h"
#include "dtensor/kernels/exp_avx2_lanes.h"
#include "dtensor/kernels/exp_avx512_lanes.h"
#include "dtensor/kernels/gemm_f32_packed.h"

// GCC 12's max, min and roundscale intrinsics start from _mm512_undefined_ps(), which
// -Wmaybe-uninitialized flags once they are inlined here; no value is read uninitialized. Clang has
// no such warning (and warns about the unknown option), so it is silenced for GCC only.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace dt::attention_detail {

namespace {

#define DT_EXP_ROW_AVX512 __attribute__((target("avx512f")))
#define DT_EXP_ROW_AVX2 __attribute__((target("avx2,fma")))

// The sum of the four lanes of t as (t0 + t2) + (t1 + t3): the last steps of both rows' sums.
DT_EXP_ROW_AVX2 inline double sum4(__m256d t) {
  const __m128d h = _mm_add_pd(_mm256_extractf128_pd(t, 1), _mm256_castpd256_pd128(t));
  return _mm_cvtsd_f64(h) + _mm_cvtsd_f64(_mm_unpackhi_pd(h, h));
}

// ---- AVX-512: 16 lanes, masks for the tails ----

// Returns the lanes of a 16-value step with `left` values still to do.
DT_EXP_ROW_AVX512 inline __mmask16 lanes16(int64_t left) {
  return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
}

// Returns exp(x) per lane (see exp_fma): exp_avx512_lanes.h's p·2^n, applied by scalef. Lanes
// below -87.33654 (-inf included) are 0; NaN passes through max/min (which return their second
// operand when either is NaN) and the mask (unordered compare).
DT_EXP_ROW_AVX512 inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33654f), hi = _mm512_set1_ps(100.0f);
  const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);
  const __m512 xc = _mm512_min_ps(hi, _mm512_max_ps(lo, x));  // above 88.72 scalef overflows to +inf
  const auto [p, n] = avx512_lanes::exp_parts(xc);
  return _mm512_maskz_scalef_ps(keep, p, n);
}

DT_EXP_ROW_AVX512 void exp_avx512(const float* x, float* y, int64_t n) {
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 k = lanes16(n - c);
    _mm512_mask_storeu_ps(y + c, k, exp16(_mm512_maskz_loadu_ps(k, x + c)));
  }
}

DT_EXP_ROW_AVX512 float exp_row_avx512(float* row, int64_t visible, int64_t n, float scale, const float* m,
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
      const __mmask16 k = lanes16(visible - c);
      __m512 t = _mm512_maskz_loadu_ps(k, row + c);
      if (!m) t = _mm512_mul_ps(t, vs);
      else if (mask_col == 1) t = _mm512_add_ps(_mm512_mul_ps(t, vs), _mm512_maskz_loadu_ps(k, m + c));
      _mm512_mask_storeu_ps(row + c, k, t);
      vmax = _mm512_mask_max_ps(vmax, k, vmax, t);
    }
    pass2_scale = 1;
  } else {
    for (int64_t c = 0; c < visible; c += 16) {
      const __mmask16 k = lanes16(visible - c);
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
    const __mmask16 k = lanes16(visible - c);
    const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, row + c), vs, vneg_max)));
    _mm512_mask_storeu_ps(row + c, k, e);
    sum_lo = _mm512_add_pd(sum_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    sum_hi = _mm512_add_pd(sum_hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  std::fill(row + visible, row + n, 0.f);
  const __m512d sum = _mm512_add_pd(sum_lo, sum_hi);
  *block_sum = sum4(_mm256_add_pd(_mm512_castpd512_pd256(sum), _mm512_extractf64x4_pd(sum, 1)));
  return m_new;
}

// ---- AVX2 + FMA: 8 lanes, the AVX-512 row's steps in halves (see the file comment) ----

// Returns the lanes i < left of an 8-value step (none when left <= 0), as a maskload mask.
DT_EXP_ROW_AVX2 inline __m256i lanes8(int64_t left) {
  const int l = int(std::clamp<int64_t>(left, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(l), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Loads and stores of an 8-value step with `left` values still to do: plain ones for a whole step,
// masked ones (zeros read outside) for the tail only, as vmaskmovps is slow on Zen 3 (the row with
// masked steps throughout took 18 ms where exp_row_f32 took 15, non-causal [4, 8, 256, 64]).
DT_EXP_ROW_AVX2 inline __m256 load8(const float* p, int64_t left) {
  return left >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes8(left));
}
DT_EXP_ROW_AVX2 inline void store8(float* p, int64_t left, __m256 v) {
  if (left >= 8) _mm256_storeu_ps(p, v);
  else _mm256_maskstore_ps(p, lanes8(left), v);
}

// Returns exp(x) per lane, as exp16's lanes: p·2^n with n1 = n clamped to [-125, 127], p·2^n1
// exact and ·2^(n - n1) (n - n1 in [-1, 17]) rounding once, as scalef. A NaN lane's p is NaN.
DT_EXP_ROW_AVX2 inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f), hi = _mm256_set1_ps(100.0f);
  const __m256 keep = _mm256_cmp_ps(x, lo, _CMP_NLT_UQ);
  const __m256 xc = _mm256_min_ps(hi, _mm256_max_ps(lo, x));
  const auto [p, n] = avx2_lanes::exp_parts(xc);
  const __m256i ni = _mm256_cvtps_epi32(n);  // n is integral; NaN gives INT_MIN, and p is NaN then
  const __m256i n1 = _mm256_min_epi32(_mm256_max_epi32(ni, _mm256_set1_epi32(-125)), _mm256_set1_epi32(127));
  const __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, avx2_lanes::pow2(n1)), avx2_lanes::pow2(_mm256_sub_epi32(ni, n1)));
  return _mm256_and_ps(keep, e);
}

DT_EXP_ROW_AVX2 void exp_avx2(const float* x, float* y, int64_t n) {
  for (int64_t c = 0; c < n; c += 8) store8(y + c, n - c, exp8(load8(x + c, n - c)));
}

// Stores and returns the exponentials of one 8-value half-step of pass 2 (zero where masked).
DT_EXP_ROW_AVX2 inline __m256 exp_half_step(float* row, int64_t left, __m256 vs, __m256 vneg_max) {
  if (left <= 0) return _mm256_setzero_ps();
  __m256 e = exp8(_mm256_fmadd_ps(load8(row, left), vs, vneg_max));
  if (left < 8) e = _mm256_and_ps(_mm256_castsi256_ps(lanes8(left)), e);
  store8(row, left, e);
  return e;
}

DT_EXP_ROW_AVX2 float exp_row_avx2(float* row, int64_t visible, int64_t n, float scale, const float* m,
                                   int64_t mask_col, float m_old, double* block_sum) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  // Pass 1, as exp_row_avx512's.
  float pass2_scale = scale;
  __m256 vmax = _mm256_set1_ps(neg_inf);
  if (m || !(scale > 0)) {
    if (m && mask_col != 1)
      for (int64_t c = 0; c < visible; ++c) row[c] = row[c] * scale + m[c * mask_col];
    const __m256 vs = _mm256_set1_ps(scale);
    for (int64_t c = 0; c < visible; c += 8) {
      const int64_t left = visible - c;
      __m256 t = load8(row + c, left);
      if (!m) t = _mm256_mul_ps(t, vs);
      else if (mask_col == 1) t = _mm256_add_ps(_mm256_mul_ps(t, vs), load8(m + c, left));
      store8(row + c, left, t);
      vmax = left >= 8 ? _mm256_max_ps(vmax, t)
                       : _mm256_blendv_ps(vmax, _mm256_max_ps(vmax, t), _mm256_castsi256_ps(lanes8(left)));
    }
    pass2_scale = 1;
  } else {
    for (int64_t c = 0; c < visible; c += 8) {
      const int64_t left = visible - c;
      const __m256 t = _mm256_max_ps(vmax, load8(row + c, left));
      vmax = left >= 8 ? t : _mm256_blendv_ps(vmax, t, _mm256_castsi256_ps(lanes8(left)));
    }
  }
  __m128 h = _mm_max_ps(_mm256_extractf128_ps(vmax, 1), _mm256_castps256_ps128(vmax));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  float row_max = _mm_cvtss_f32(h);
  if (pass2_scale != 1) row_max *= scale;
  const float m_new = std::max(m_old, row_max);
  if (m_new == neg_inf) return m_new;
  // Pass 2 in 16-value steps: lanes 0-7 of a step into a0 (0-3) and a1 (4-7), lanes 8-15 into a2
  // and a3, which are the AVX-512 row's sum_lo and sum_hi in halves.
  const __m256 vs = _mm256_set1_ps(pass2_scale), vneg_max = _mm256_set1_ps(-m_new);
  __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t c = 0; c < visible; c += 16) {
    const __m256 e0 = exp_half_step(row + c, visible - c, vs, vneg_max);
    const __m256 e1 = exp_half_step(row + c + 8, visible - c - 8, vs, vneg_max);
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e0)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e0, 1)));
    a2 = _mm256_add_pd(a2, _mm256_cvtps_pd(_mm256_castps256_ps128(e1)));
    a3 = _mm256_add_pd(a3, _mm256_cvtps_pd(_mm256_extractf128_ps(e1, 1)));
  }
  std::fill(row + visible, row + n, 0.f);
  // exp_row_avx512's sum_lo + sum_hi is [a0 + a2, a1 + a3]; then the same reduction.
  *block_sum = sum4(_mm256_add_pd(_mm256_add_pd(a0, a2), _mm256_add_pd(a1, a3)));
  return m_new;
}

bool wide() { return packed_isa() == PackedIsa::avx512; }

}  // namespace

bool exp_row_fma_supported() { return cpu_isa() >= BlasIsa::avx2; }  // cpu_isa's avx2 includes FMA

void exp_fma(const float* x, float* y, int64_t n) {
  if (wide()) exp_avx512(x, y, n);
  else exp_avx2(x, y, n);
}

float exp_row_fma(float* row, int64_t visible, int64_t n, float scale, const float* m, int64_t mask_col,
                  float m_old, double* block_sum) {
  return wide() ? exp_row_avx512(row, visible, n, scale, m, mask_col, m_old, block_sum)
                : exp_row_avx2(row, visible, n, scale, m, mask_col, m_old, block_sum);
}

}  // namespace dt::attention_detail
