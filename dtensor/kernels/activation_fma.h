// FMA kernels for the two sigmoid-gated activations of the models we run: tanh gelu (GPT-2's, as
// x·σ(t)) and silu (Llama's SwiGLU, x·σ(x)), on AVX-512 or on AVX2.
//
// fast_math.h's scalar kernels vectorise through simd_clones.h to the same bits at every width,
// which rules out FMA and any instruction the baseline x86-64 target lacks: tanh gelu took about
// 65 instructions and two divisions per 16 values (0.84 ns per element on Zen 4, 7 ms of the anchor
// gpt's one-thread forward). These kernels use fused multiply-adds, a rounded n for 2^n and, on
// AVX-512, vscalefps for 2^n (which rounds subnormal results once and flushes underflow to 0,
// with no range split; AVX2 builds the same product from two powers of two, activation_fma.cc);
// about 25 instructions and one division per 16 values. Every step is an IEEE-specified
// instruction (no reciprocal estimate), so the bits are the same on every CPU with AVX2 and FMA,
// at either width, for every row length and start.
//
// They differ from the scalar kernels by a few ulp (bounds in activation_fma.cc, asserted in
// activation_fma_test.cc), so a process uses one or the other for every f32 computation of
// these two activations (ops_unary.cc, ops_activation_grad.cc): layouts, dtypes, fused epilogues
// and the training step's value all agree bitwise with the plain op.
#pragma once

#include <cstdint>

#include "dtensor/kernels/kernel_path.h"
#include "dtensor/kernels/ops.h"

namespace dt {

// How gelu (tanh) and silu compute f32 values: the scalar kernels' vector clones, or the FMA kernels.
enum class ActivationPath { portable, fma };

// Returns the path. Chosen once: DTENSOR_ACTIVATIONS=fma|portable if set (fma on a CPU without
// AVX2 and FMA throws ValueError), otherwise fma wherever the CPU has them.
ActivationPath activation_path();
// Overrides the path for this process (tests and benchmarks compare both).
void set_activation_path(ActivationPath path);
using ScopedActivationPath = ScopedKernelPath<ActivationPath, activation_path, set_activation_path>;

// The FMA kernels' vector width: AVX-512 where the CPU has it, else AVX2. The same bits either way.
enum class ActivationIsa { avx2, avx512 };
// Returns the width in use: the CPU's widest unless set.
ActivationIsa activation_isa();
// Sets the width for this process (tests: AVX2 on an AVX-512 CPU); ValueError for AVX-512 on a CPU
// without it.
void set_activation_isa(ActivationIsa isa);
using ScopedActivationIsa = ScopedKernelPath<ActivationIsa, activation_isa, set_activation_isa>;

// True when act's f32 values come from activation_fma (gelu_tanh or silu on the fma path).
bool uses_activation_fma(Activation act);

// out = act(x) for n contiguous f32 values (x == out allowed); act is gelu_tanh or silu.
// Requires the CPU to have AVX2 and FMA (activation_path() may be fma).
void activation_fma(Activation act, const float* x, float* out, int64_t n);

// grad = act'(x) for n contiguous f32 values (x == grad allowed); act is gelu_tanh or silu: the
// derivative on the fma path, for every f32 gelu_backward (tanh) and silu_backward and for the
// training step's fused gelu with its derivative, so that fused and unfused steps agree bitwise.
// Same requirement as activation_fma; the same bits at either width and for any row length and
// start. Bounds in activation_fma_test.cc.
void activation_grad_fma(Activation act, const float* x, float* grad, int64_t n);
// value = act(x) (activation_fma's bits) and grad = act'(x) (activation_grad_fma's bits) in one
// pass over x; grad may be x itself (the training step overwrites x with its derivative), value
// must overlap neither.
void activation_and_grad_fma(Activation act, const float* x, float* value, float* grad, int64_t n);

}  // namespace dt
