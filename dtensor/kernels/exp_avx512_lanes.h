// The exponential's core on 16 AVX-512 lanes, written once for the two kernels that take exp in
// AVX-512 intrinsics: the attention kernel's softmax row (exp_row_fma.cc) and the sigmoid-gated
// activations (activation_fma.cc). Each clamps its argument and finishes with its own scalef
// (the row zeroes the lanes below its range; the activations scale x·p instead of p).
//
// Cephes' expf scheme, as fast_exp.h's portable form, on FMAs: n = round(x / ln2), r = x - n·ln2
// in two FMAs (Cody-Waite: ln2 in a 17-bit high part, so n·ln2_hi is exact for |n| <= 217, and a
// low part; one f32 ln2 would cost up to 25 ulp there), then p = e^r by the degree-7 polynomial in
// Horner form (7 FMAs). exp(x) = p·2^n, which vscalefps applies with a single rounding.
#pragma once

#include <immintrin.h>

#include "dtensor/kernels/fast_exp.h"

namespace dt::avx512_lanes {

// exp(x) = p · 2^n per lane.
struct ExpParts {
  __m512 p;
  __m512 n;
};

// Returns the parts of exp(x) for finite x in [-150, 100] (callers clamp; outside, n·ln2_hi is no
// longer exact). NaN lanes stay NaN.
__attribute__((target("avx512f"))) inline ExpParts exp_parts(__m512 x) {
  using namespace kernel::exp_detail;
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);  // exact: n·ln2_hi has 17 bits
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpPoly[0]);
#pragma GCC unroll 5
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPoly[i]));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return {p, n};
}

}  // namespace dt::avx512_lanes
