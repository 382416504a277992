// exp_avx512_lanes.h's exponential core on 8 AVX2 + FMA lanes (activation_fma.cc, exp_row_fma.cc):
// the same Cody-Waite reduction and degree-7 polynomial, instruction for instruction, so p and n are
// the AVX-512 lanes' bits; and v·2^n without vscalefps.
#pragma once

#include <immintrin.h>

#include "dtensor/kernels/fast_exp.h"

namespace dt::avx2_lanes {

// exp(x) = p · 2^n per lane.
struct ExpParts {
  __m256 p;
  __m256 n;
};

// Returns the parts of exp(x) for finite x in [-150, 100] (callers clamp). NaN lanes stay NaN.
__attribute__((target("avx2,fma"))) inline ExpParts exp_parts(__m256 x) {
  using namespace kernel::exp_detail;
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);  // exact: n·ln2_hi has 17 bits
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kExpPoly[0]);
#pragma GCC unroll 5
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpPoly[i]));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  return {p, n};
}

// Returns 2^k for integer lanes k in [-126, 127], from the exponent bits.
__attribute__((target("avx2,fma"))) inline __m256 pow2(__m256i k) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

// Returns v·2^n for n in [-216, 0] with one rounding, as vscalefps, for v whose v·2^max(n, -125)
// is normal or zero (see activation_fma.cc): 2^max(n, -125) scales exactly, then
// 2^(n - max(n, -125)) (>= 2^-91) rounds once.
__attribute__((target("avx2,fma"))) inline __m256 scale_pow2(__m256 v, __m256i n) {
  const __m256i n1 = _mm256_max_epi32(n, _mm256_set1_epi32(-125));
  return _mm256_mul_ps(_mm256_mul_ps(v, pow2(n1)), pow2(_mm256_sub_epi32(n, n1)));
}

}  // namespace dt::avx2_lanes
