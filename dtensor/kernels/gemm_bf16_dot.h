// A bf16 GEMM on AVX512-BF16's pair dot product (vdpbf16ps), and the choice between it and
// widening the operands to f32 for sgemm (ops_matmul.cc, gemm_bf16).
//
// The two are numerically alike: the products of two bf16 values are exact in f32 and the sums
// accumulate in f32; only the order of the f32 additions differs (the dot kernel adds the two
// products of a k pair, then the pair to the running sum, block of k by block of k), so results
// agree to f32 rounding of the sum, not bit for bit. vdpbf16ps also treats subnormal inputs and
// results as zero (below 2^-126, far under bf16 GEMM tolerance for any data a model holds).
#pragma once

#include <cstdint>

#include "dtensor/core/dtype.h"
#include "dtensor/kernels/kernel_path.h"

namespace dt {

// How bf16 GEMMs multiply: widen to f32 and call sgemm, or the vdpbf16ps kernel below.
enum class Bf16GemmPath { widen, dot };

// True when this CPU (and its OS) can run gemm_bf16_dot.
bool bf16_dot_supported();

// Returns the path bf16 GEMMs take. Chosen once: DTENSOR_BF16_GEMM=dot|widen if set (dot on a CPU
// without AVX512-BF16 throws ValueError), otherwise by CPU, where the faster one was measured:
// dot on AMD family 0x19 and later with AVX512-BF16 (Zen 4: vdpbf16ps at twice the f32 FMA rate)
// and on CPUs with AMX (bf16_dot_isa), widen everywhere else (a Xeon host without AMX exposed ran
// vdpbf16ps at half the f32 FMA rate).
Bf16GemmPath bf16_gemm_path();
// Overrides the path for this process (tests and benchmarks compare both); ValueError for dot on a
// CPU without AVX512-BF16.
void set_bf16_gemm_path(Bf16GemmPath path);

// Sets the path for a scope and restores the previous one at its end (tests, benchmarks).
using ScopedBf16GemmPath = ScopedKernelPath<Bf16GemmPath, bf16_gemm_path, set_bf16_gemm_path>;

// The dot path's instructions: vdpbf16ps on zmm (a 12 x 32 tile of C per step), or AMX's tile
// multiply tdpbf16ps (32 x 32 per step, 16 pairs of k at a time: Sapphire Rapids and later), over
// the same packed layout. Both add exact products in f32 and treat subnormals as zero; the order of
// the f32 additions differs (AMX sums 16 pairs of k per instruction), so they agree to f32
// rounding of the sums, not bit for bit.
enum class Bf16DotIsa { avx512bf16, amx };
// True when this CPU has AMX-TILE and AMX-BF16 and the OS lets this process use the tiles.
bool amx_bf16_supported();
// Returns the instructions in use: AMX wherever supported, unless set.
Bf16DotIsa bf16_dot_isa();
// Sets them for this process (tests: vdpbf16ps on an AMX CPU); ValueError for AMX where unsupported.
void set_bf16_dot_isa(Bf16DotIsa isa);
using ScopedBf16DotIsa = ScopedKernelPath<Bf16DotIsa, bf16_dot_isa, set_bf16_dot_isa>;

// Computes c = alpha * a @ b + beta * c for bf16 a [m, k] (element (i, p) at a[i * a_rs + p * a_cs])
// and b [k, n] (element (p, j) at b[p * b_rs + j * b_cs]) into row-major f32 c [m, n] with row
// stride ldc; beta == 0 ignores c's contents. k >= 1. Each element of c is computed by the same
// instructions in the same order whatever m is, so any split of the rows gives the same bits.
// Requires bf16_dot_supported().
void gemm_bf16_dot(int64_t m, int64_t n, int64_t k, float alpha, const bf16* a, int64_t a_rs, int64_t a_cs,
                   const bf16* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc);

}  // namespace dt
