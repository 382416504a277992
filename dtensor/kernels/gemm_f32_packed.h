// An f32 GEMM against a weight packed once (what ONNX Runtime's MLAS does with constant weights),
// and the choice between it and OpenBLAS's sgemm (ops_matmul.cc, linear_act).
//
// A linear's weight W [n, k] is the GEMM's B = W^T. OpenBLAS packs B into its panel layout on
// every call; a PackedWeight holds that layout, built once and reused while the weight stays the
// same (the interpreter's cache, runtime/packed_weights.h). A, the activations, is read in place
// (row-major), so nothing is packed per call. Results differ from sgemm's by the order of the f32
// additions only (both accumulate in f32): |difference| <= ~2 k eps sum_p |a_ip b_pj|.
#pragma once

#include <cstdint>
#include <memory>

#include "dtensor/kernels/kernel_path.h"

namespace dt {

// How f32 GEMMs with a packed constant weight multiply: OpenBLAS's sgemm, or gemm_f32_packed.
enum class F32GemmPath { blas, packed };

// True when this CPU (and its OS) can run gemm_f32_packed (AVX2 and FMA; AVX-512 F where present).
bool f32_packed_supported();

// The vector width of gemm_f32_packed's micro-kernels: 6 x 64 tiles of zmm on AVX-512, 6 x 16
// tiles of ymm on AVX2 + FMA, over the same packed layout. Both compute every element with the
// same FMAs in the same order, so their results are bitwise equal (gemm_f32_packed_test.cc).
enum class PackedIsa { avx2, avx512 };
// Returns the width in use: the CPU's widest unless set.
PackedIsa packed_isa();
// Sets the width for this process (tests: AVX2 on an AVX-512 CPU); ValueError for AVX-512 on a CPU
// without it.
void set_packed_isa(PackedIsa isa);
using ScopedPackedIsa = ScopedKernelPath<PackedIsa, packed_isa, set_packed_isa>;

// Returns the path. Chosen once: DTENSOR_F32_GEMM=packed|blas if set (packed on a CPU without
// AVX2 and FMA throws ValueError), otherwise by CPU, where the faster one was measured: packed on
// every AVX-512 CPU, on AMD family 0x19 (Zen 3 with AVX2: attention only, see f32_packed_linears)
// and on Zen 2 (family 0x17 from model 0x30, AVX2: attention only), blas everywhere else (Zen 1 and
// Intel's AVX2 CPUs unmeasured).
//   - Intel Xeon with AVX-512 and AMX (2026-12-03, one thread, alternating): kernels_bench
//     BM_LinearShapes on Llama's shapes 152-166 GFLOP/s packed once, 152-161 packed during the
//     call, 146-158 OpenBLAS's SkylakeX sgemm; ONNX Runtime over dtensor on the benchmark Llama
//     (bench/compare_runtimes.py) 1.11-1.12 / 1.07 at 1 / 2 threads on blas, 1.17-1.21 / 1.19 packed. Until
//     linears without a packed copy packed during the call (gemm_f32_packing), a writable weight
//     was hashed on every run to tell whether it changed (8.9 ms of the anchor gpt's 64 MiB), and
//     blas stayed the default here. Intel's AVX-512 CPUs before Sapphire Rapids are unmeasured.
//   - Zen 4 with AVX-512: linears 4-8 % over OpenBLAS's Haswell sgemm on Llama's shapes.
//   - Zen 2: [4, 8, S, 64] attention one thread against OpenBLAS's Haswell sgemm, kernels_bench
//     BM_Attention tiled, two alternating rounds: causal S = 256 8.30-8.41 -> 6.39-6.44 ms, not
//     causal 14.1-14.6 -> 10.8-10.9, S = 1024 causal 132-135 -> 113, not causal 263-270 -> 244-250.
F32GemmPath f32_gemm_path();
// Overrides the path for this process; ValueError for packed on a CPU without AVX2 and FMA.
void set_f32_gemm_path(F32GemmPath path);

// True when f32 linears multiply through the packed kernels (gemm_f32_packed against the copy the
// interpreter keeps of a read-only weight, runtime/packed_weights.h; gemm_f32_packing for any
// other weight): on the packed path with the AVX-512 micro-kernels. The
// AVX2 6 x 16 kernel ran at 0.92-0.95 of OpenBLAS's Haswell sgemm on the same shapes (Zen 3, one
// thread, 82-88 vs 89-91 GFLOP/s; blocking A over 48-192 rows changed nothing), so on AVX2 the
// packed path packs only attention's k and v, where it pays (causal [4, 8, 256, 64] forward
// 7.01 -> 6.07 ms, ops_attention.cc).
bool f32_packed_linears();

// Sets the path for a scope and restores the previous one at its end (tests, benchmarks).
using ScopedF32GemmPath = ScopedKernelPath<F32GemmPath, f32_gemm_path, set_f32_gemm_path>;

// B = W^T of a weight W [n, k] in gemm_f32_packed's panel layout (gemm_f32_packed.cc). Immutable.
class PackedWeight {
 public:
  // Packs W, element (j, p) at w[j * w_rs + p * w_cs]. n, k >= 1.
  PackedWeight(const float* w, int64_t n, int64_t k, int64_t w_rs, int64_t w_cs);
  // Packs W into `into`: floats(n, k) floats, 64-byte aligned, which the caller owns and keeps
  // alive while this lives (attention packs every head into one recycled buffer: a fresh small
  // allocation per head page-faulted 2 MiB per layer on tensor-parallel ranks).
  PackedWeight(const float* w, int64_t n, int64_t k, int64_t w_rs, int64_t w_cs, float* into);
  // The floats a packed n x k weight holds (n padded to whole panels): a multiple of 64.
  static int64_t floats(int64_t n, int64_t k);
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  const float* data() const { return data_.get(); }

 private:
  int64_t n_, k_;
  std::unique_ptr<float[], void (*)(void*)> data_;
};

// Computes c = alpha * a @ b.W^T + beta * c for row-major f32 a [m, b.k()] (row stride lda) into
// row-major c [m, b.n()] (row stride ldc); beta == 0 ignores c's contents. Each element of c is
// computed by the same instructions in the same order whatever m, its row and its column are, so
// any split of the rows (or of W's rows) gives the same bits, on either PackedIsa. Requires
// f32_packed_supported().
void gemm_f32_packed(int64_t m, float alpha, const float* a, int64_t lda, const PackedWeight& b, float beta, float* c,
                     int64_t ldc);

// gemm_f32_packed against W read in place (element (j, p) at w[j * w_rs + p * w_cs], W [n, k]):
// each kKc x kNc block of B = W^T is packed into a buffer of the calling thread just before its
// products, as OpenBLAS packs B on every call. The linears whose weight has no packed copy
// (a writable weight, which may change between runs: runtime/packed_weights.h) multiply this way,
// so a product's bits never depend on whether its weight was packed once: they are
// gemm_f32_packed's on PackedWeight(w, n, k, w_rs, w_cs). m, n, k >= 0.
void gemm_f32_packing(int64_t m, float alpha, const float* a, int64_t lda, const float* w, int64_t n, int64_t k,
                      int64_t w_rs, int64_t w_cs, float beta, float* c, int64_t ldc);

// The packed layout's granularity (gemm_f32_packed.cc): W's rows (the product's columns) in
// panels of kPackedPanelCols, and k in blocks of kPackedKBlock. A's rows go through the
// micro-kernel kPackedRows at a time: a caller that splits rows at multiples of it runs no
// narrower tile than it must.
inline constexpr int64_t kPackedPanelCols = 64, kPackedKBlock = 256, kPackedRows = 6;

// gemm_f32_packed over a block of the product: c [m, j1 - j0] = alpha * a @ B[k0:k1, j0:j1] +
// beta * c, where B = b.W^T, a's column 0 is k index k0 and c's column 0 is W's row j0. j0 is a
// multiple of kPackedPanelCols and k0 one of kPackedKBlock (so the block starts at a panel and at a
// k block of the layout); j1 <= b.n(), k1 <= b.k(). The attention kernel multiplies its score
// tiles through this against k and v packed once per head (ops_attention.cc). Each element is
// computed as gemm_f32_packed computes it when k0 = 0 and k1 = b.k(). The work is in whole
// 16-column vectors: a block whose last panel holds 16 columns costs a quarter of a full panel.
void gemm_f32_packed_block(int64_t m, float alpha, const float* a, int64_t lda, const PackedWeight& b, int64_t j0,
                           int64_t j1, int64_t k0, int64_t k1, float beta, float* c, int64_t ldc);

}  // namespace dt
