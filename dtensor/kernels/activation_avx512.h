// AVX-512 kernels for the two sigmoid-gated activations of the models we run: tanh gelu
// (GPT-2's, as x·σ(t)) and silu (Llama's SwiGLU, x·σ(x)).
//
// fast_math.h's scalar kernels vectorise through simd_clones.h to the same bits at every width,
// which rules out FMA and any instruction the baseline x86-64 target lacks: tanh gelu took about
// 65 instructions and two divisions per 16 values (0.84 ns per element on Zen 4, 7 ms of the anchor
// gpt's one-thread forward). These kernels use what AVX-512 has: fused multiply-adds, vscalefps
// for 2^n (which rounds subnormal results once and flushes underflow to 0, with no range split)
// and vroundscaleps for n; about 25 instructions and one division per 16 values. Every step is an
// IEEE-specified instruction (no reciprocal estimate), so the bits are the same on every AVX-512
// CPU, for every row length and start (the tail runs the same instructions under a mask).
//
// They differ from the scalar kernels by a few ulp (bounds in activation_avx512.cc, asserted in
// activation_avx512_test.cc), so a process uses one or the other for every f32 computation of
// these two activations (ops_unary.cc, ops_activation_grad.cc): layouts, dtypes, fused epilogues
// and the training step's value all agree bitwise with the plain op.
#pragma once

#include <cstdint>

#include "dtensor/kernels/kernel_path.h"
#include "dtensor/kernels/ops.h"

namespace dt {

// How gelu (tanh) and silu compute f32 values: the scalar kernels' vector clones, or AVX-512.
enum class ActivationPath { portable, avx512 };

// Returns the path. Chosen once: DTENSOR_ACTIVATIONS=avx512|portable if set (avx512 on a CPU
// without AVX-512 throws ValueError), otherwise avx512 wherever the CPU has it.
ActivationPath activation_path();
// Overrides the path for this process (tests and benchmarks compare both).
void set_activation_path(ActivationPath path);
using ScopedActivationPath = ScopedKernelPath<ActivationPath, activation_path, set_activation_path>;

// True when act's f32 values come from activation_avx512 (gelu_tanh or silu on the avx512 path).
bool uses_activation_avx512(Activation act);

// out = act(x) for n contiguous f32 values (x == out allowed); act is gelu_tanh or silu.
// Requires the CPU to have AVX-512 (activation_path() may be avx512).
void activation_avx512(Activation act, const float* x, float* out, int64_t n);

}  // namespace dt
