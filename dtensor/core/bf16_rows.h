// bf16 <-> f32 over contiguous runs of values, with AVX-512 where the CPU has it.
//
// The conversions are dtype.h's, bit for bit: widening is the 16-bit shift, narrowing rounds to
// nearest even and turns a NaN into a quiet NaN of the same sign (PyTorch's c10::BFloat16
// rounding). Not AVX512-BF16's vcvtneps2bf16, which also flushes subnormal inputs to zero.
//
// Every bf16 kernel loads its operands into f32 and rounds its results back (dtype.h), so these
// loops run over every value a bf16 model computes. Compiled for the baseline x86-64 target the
// loops run on 4 lanes of SSE2 with the rounding spelled out in shuffles: on the AMD EPYC host
// (Zen 4) rounding the bf16 gpt forward's GEMM outputs took about 11 ms of its 205 (perf), and
// the 16-lane loops here took the forward from 203 to 196 ms.
#pragma once

#include <cstdint>

#include "dtensor/core/dtype.h"

namespace dt {

// Writes dst[i] = float(src[i]) for i < n.
void widen_bf16(const bf16* src, float* dst, int64_t n);
// Writes dst[i] = bf16(src[i]) for i < n (round to nearest even).
void narrow_to_bf16(const float* src, bf16* dst, int64_t n);
// Rounds p[i] to the nearest bf16 in place, still stored as f32: float(bf16(p[i])).
void round_through_bf16(float* p, int64_t n);

}  // namespace dt
