// The packed attention's softmax row in FMA intrinsics (ops_attention.cc, with the packed f32 GEMM):
// scale, mask, row max, exp and the row's sum in two passes over the row, the exp written with FMAs
// in about half the instructions of fast_exp's portable form. It runs at the packed GEMM's vector
// width (packed_isa(): AVX-512, or AVX2 + FMA), and the two widths give the same bits for every row
// without a NaN score, so the packed attention's result does not depend on which of the two CPUs
// ran it. Not bitwise fast_exp: both are within about 1 ulp of exp (exp_row_fma_test.cc).
#pragma once

#include <cstdint>

namespace dt::attention_detail {

// True when this CPU (and its OS) runs the functions below (AVX2 and FMA).
bool exp_row_fma_supported();

// Writes y[i] = exp(x[i]) for i < n with the row's exp: within 2 ulp of exp over the normal range;
// 0 below -87.33654 (where exp is subnormal, so exp(-inf) = 0 exactly), +inf above 88.7228, NaN
// for NaN. For tests; requires exp_row_fma_supported().
void exp_fma(const float* x, float* y, int64_t n);

// Turns one score row in place into exponentials against the row's new running max, over keys
// [0, visible) of a row of n (the rest become 0): scale, add the mask row (m: keys mask_col apart;
// null for none), take the max with the running max m_old, exp, and sum in double into
// *block_sum. Returns the new max; -inf when no score so far is finite, or when a NaN score hid
// the finite ones from the vector max (then the row holds the scores, scaled and masked or,
// without a mask, possibly unscaled, for the caller to look at). The contract of
// ops_attention.cc's exp_row; requires exp_row_fma_supported().
float exp_row_fma(float* row, int64_t visible, int64_t n, float scale, const float* m, int64_t mask_col,
                  float m_old, double* block_sum);

}  // namespace dt::attention_detail
