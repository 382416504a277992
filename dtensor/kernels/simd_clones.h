// DT_SIMD_CLONES: compiles a function for AVX-512, AVX2 and the baseline, picked at load time by
// the CPU (GCC/clang target_clones). For the compute-bound elementwise loops over fast_math.h's
// kernels (the activations and their derivatives): wider vectors do the same IEEE operations on
// more lanes. GCC's avx512f target enables FMA, but dtensor_core is built with -ffp-contract=off,
// so no multiply-add is contracted and every clone computes bitwise the same values as the
// scalar kernels. Such a function must call nothing in its loop (the kernels it uses are
// always_inline) or the loop does not vectorise; not [[gnu::flatten]], which clang refuses with
// target_clones.
//
// ThreadSanitizer instruments the ifunc resolver that target_clones generates, and the dynamic
// loader runs that resolver before the TSan runtime is up (a crash at load): TSan builds compile
// the baseline only.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define DT_SIMD_CLONES
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DT_SIMD_CLONES
#endif
#endif
#ifndef DT_SIMD_CLONES
#define DT_SIMD_CLONES [[gnu::target_clones("avx512f", "avx2", "default")]]
#endif
