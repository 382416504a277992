#include "dtensor/core/bf16_rows.h"

#include <cstring>

#include "dtensor/core/blas_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define DT_BF16_ROWS_AVX512 1
#endif

namespace dt {

namespace {

#ifdef DT_BF16_ROWS_AVX512
#define DT_AVX512_TARGET __attribute__((target("avx512f")))

// GCC 12's shift and conversion intrinsics start from _mm512_undefined_epi32(), which
// -Wmaybe-uninitialized flags once they are inlined here; no value is read uninitialized. Clang
// has no such warning.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// Returns the bf16 bits of 16 f32 values, one per 32-bit lane (upper halves zero): dtype.h's
// rounding, add 0x7fff plus the lowest kept bit and truncate, or the quiet NaN (bits >> 16) | 0x40.
DT_AVX512_TARGET inline __m512i bf16_bits(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i quiet_nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), rounded, quiet_nan);
}

DT_AVX512_TARGET void widen_avx512(const bf16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  for (; i < n; ++i) dst[i] = float(src[i]);
}

DT_AVX512_TARGET void narrow_avx512(const float* src, bf16* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtepi32_epi16(bf16_bits(_mm512_loadu_ps(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = bf16(src[i]);
}

DT_AVX512_TARGET void round_through_avx512(float* p, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_si512(p + i, _mm512_slli_epi32(bf16_bits(_mm512_loadu_ps(p + i)), 16));
  for (; i < n; ++i) p[i] = float(bf16(p[i]));
}

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#undef DT_AVX512_TARGET

// True when this CPU and its OS run AVX-512 (looked up once).
bool use_avx512() {
  static const bool yes = cpu_isa() == BlasIsa::avx512;
  return yes;
}
#endif

}  // namespace

void widen_bf16(const bf16* src, float* dst, int64_t n) {
#ifdef DT_BF16_ROWS_AVX512
  if (use_avx512()) return widen_avx512(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]);
}

void narrow_to_bf16(const float* src, bf16* dst, int64_t n) {
#ifdef DT_BF16_ROWS_AVX512
  if (use_avx512()) return narrow_avx512(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16(src[i]);
}

void round_through_bf16(float* p, int64_t n) {
#ifdef DT_BF16_ROWS_AVX512
  if (use_avx512()) return round_through_avx512(p, n);
#endif
  for (int64_t i = 0; i < n; ++i) p[i] = float(bf16(p[i]));
}

}  // namespace dt
