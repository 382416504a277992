// The packed-weight f32 GEMM: B = W^T packed once into panels, A read in place.
//
// Layout of a PackedWeight: k is cut into blocks of kKc; each block holds B's rows [k0, k0 + kc)
// as panels of kNr = 64 columns, panel by panel, each panel kc rows of 64 floats (256 bytes, four
// zmm loads). Columns past n are zeros, so every panel runs the same instructions and only the
// stores are masked.
//
// Worked example, n = 100, k = 300: columns pad to 128 (two panels); block 0 holds k [0, 256):
// panel 0 at offset 0 (256 x 64 floats), panel 1 at 256 * 64; block 1 holds k [256, 300) from
// offset 256 * 128: panel 0 (44 x 64), then panel 1 at 256 * 128 + 44 * 64.
//
// The micro-kernel keeps a 6 x 64 tile of C in 24 zmm accumulators: per k it loads the panel's 4
// vectors and, for each of the 6 rows, broadcasts a[i][p] from A's row (no packing of A: six
// sequential streams the prefetchers follow) into 4 FMAs. Loop order: for each kNc block of
// columns (its B block, kKc x kNc = 256 KiB, stays in L2), for each kc block, for each 6-row tile
// (its A rows, 6 x 256 floats = 6 KiB, stay in L1), for each panel of the block. C accumulates
// across kc blocks in memory: the first stores beta * c + alpha * acc, later ones
// c + alpha * acc. The blocks depend only on k and n, never on m, and a column's sums never on
// its neighbours, which is why any split of rows or columns gives the same bits.
//
// On AVX2 + FMA (no AVX-512) the same layout runs 6 x 16 tiles of ymm, a panel as four 16-column
// slices, each slice kept in L1 over 96 rows of A at a time (gemm_avx2); every element sees the
// same FMAs in the same order, so the results are the AVX-512 kernels' bits.
//
// kKc is 256, not 512, for accuracy: each sum is a chain of at most 256 f32 additions, and the
// chains add in C. On the benchmark Llama (k = 512 and 1536) the logits' error against float64
// fell from 3.6e-6 max / 2.6e-7 rms (kKc 512) to 1.9e-6 / 1.9e-7 (ONNX Runtime, whose MLAS
// also sums k in blocks: 2.1e-6 / 1.9e-7; bench/compare_f64.py), and the two runtimes' logits now
// differ by 1.3e-6 (3.0e-6 before); the forward's time moved by under 1 % (alternating runs).
//
// Measured on the AMD EPYC (Zen 4) host, one thread, M = 1024, against OpenBLAS 0.3.21's Haswell
// sgemm (A @ W^T, the linear's call), GFLOP/s, alternating: N x K 512x512 114.8 vs 111.1, 256x512
// 117.2 vs 111.5, 1536x512 114.7 vs 109.3, 512x1536 113.4 vs 108.8, 4096x512 113.7 vs 107.1 (the
// core's FMA peak is 117.3). Packing A as well (k-major 6- or 12-row panels) ran at 97-113; the
// AVX2 6x16 tile at 97-110; a 12x32 tile 97-112: the A stream and the wide tile are what win.
#include "dtensor/kernels/gemm_f32_packed.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <utility>

#include "dtensor/core/blas_kernels.h"
#include "dtensor/core/error.h"

namespace dt {

namespace {

constexpr int64_t kMr = kPackedRows, kNr = kPackedPanelCols, kKc = kPackedKBlock, kNc = 256, kMcAvx2 = 96;
static_assert(kNc % kNr == 0 && kNr % 16 == 0);

#define DT_F32_PACKED_TARGET __attribute__((target("avx512f")))

// Returns the offset of k block k0's panel holding column j0 (a multiple of kNr) in a packed
// weight whose columns pad to n_padded.
int64_t panel_offset(int64_t k0, int64_t kc, int64_t j0, int64_t n_padded) { return k0 * n_padded + j0 * kc; }

// The C tile's rows [0, Rows) of A (a: the first row's k block, rows lda apart) times the first
// Vecs 16-column vectors of one packed panel (pb) over kc, into c (row stride ldc) under the column
// mask (bit j: column j of 64; only columns below 16 * Vecs may be set). Every accumulator sees
// the same instruction sequence whatever Rows, Vecs and the mask are; Vecs < 4 only skips the
// vectors no stored column is in (a narrow last panel, such as the causal attention's diagonal).
template <int Rows, int Vecs>
DT_F32_PACKED_TARGET void micro_kernel(int64_t kc, const float* a, int64_t lda, const float* pb, float* c, int64_t ldc,
                                       uint64_t mask, float alpha, bool first, float beta) {
  __m512 acc[Rows][Vecs];
  // Fully unrolled, so that the accumulators live in registers.
#pragma GCC unroll 6
  for (int i = 0; i < Rows; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < Vecs; ++v) acc[i][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    __m512 b[Vecs];
#pragma GCC unroll 4
    for (int v = 0; v < Vecs; ++v) b[v] = _mm512_load_ps(pb + 16 * v);
#pragma GCC unroll 6
    for (int i = 0; i < Rows; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i * lda + p]);
#pragma GCC unroll 4
      for (int v = 0; v < Vecs; ++v) acc[i][v] = _mm512_fmadd_ps(ai, b[v], acc[i][v]);
    }
    pb += kNr;
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 6
  for (int i = 0; i < Rows; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < Vecs; ++v) {
      float* cv = c + i * ldc + 16 * v;
      const __mmask16 m = __mmask16(mask >> (16 * v));
      const __m512 prod = alpha == 1 ? acc[i][v] : _mm512_mul_ps(va, acc[i][v]);
      __m512 old;
      if (first) old = beta == 0 ? _mm512_setzero_ps() : _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m, cv));
      else old = _mm512_maskz_loadu_ps(m, cv);
      _mm512_mask_storeu_ps(cv, m, _mm512_add_ps(old, prod));
    }
}

#define DT_F32_PACKED_AVX2_TARGET __attribute__((target("avx2,fma")))

// The same tile on AVX2 + FMA (16 ymm registers): Rows rows of A times the first Vecs 8-column
// vectors of one 16-column slice of a panel (pb: the slice's first column; its rows are still kNr
// floats apart), into c under `cols` (the slice's stored columns, a prefix: 1..16). 6 x 16 keeps
// 12 accumulators, 2 B vectors and a broadcast in registers. Per element it is the AVX-512
// kernel's sequence (one FMA per k in order, then alpha, then the old c), so the two give the same
// bits.
template <int Rows, int Vecs>
DT_F32_PACKED_AVX2_TARGET void micro_kernel_avx2(int64_t kc, const float* a, int64_t lda, const float* pb, float* c,
                                                 int64_t ldc, int cols, float alpha, bool first, float beta) {
  __m256 acc[Rows][Vecs];
#pragma GCC unroll 6
  for (int i = 0; i < Rows; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < Vecs; ++v) acc[i][v] = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    __m256 b[Vecs];
#pragma GCC unroll 2
    for (int v = 0; v < Vecs; ++v) b[v] = _mm256_load_ps(pb + 8 * v);
#pragma GCC unroll 6
    for (int i = 0; i < Rows; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i * lda + p);
#pragma GCC unroll 2
      for (int v = 0; v < Vecs; ++v) acc[i][v] = _mm256_fmadd_ps(ai, b[v], acc[i][v]);
    }
    pb += kNr;
  }
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
#pragma GCC unroll 2
  for (int v = 0; v < Vecs; ++v) {
    const int n = std::clamp(cols - 8 * v, 0, 8);  // stored columns of this vector, a prefix
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
#pragma GCC unroll 6
    for (int i = 0; i < Rows; ++i) {
      float* cv = c + i * ldc + 8 * v;
      const __m256 prod = alpha == 1 ? acc[i][v] : _mm256_mul_ps(va, acc[i][v]);
      __m256 old = _mm256_setzero_ps();
      if (!first || beta != 0) {  // beta == 0 ignores c, so it is not even read
        const __m256 loaded = n == 8 ? _mm256_loadu_ps(cv) : _mm256_maskload_ps(cv, m);
        old = first ? _mm256_mul_ps(vb, loaded) : loaded;
      }
      const __m256 sum = _mm256_add_ps(old, prod);
      if (n == 8) _mm256_storeu_ps(cv, sum);
      else _mm256_maskstore_ps(cv, m, sum);
    }
  }
}

using MicroKernel = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, uint64_t, float, bool, float);
constexpr int kVecs = int(kNr / 16);
template <size_t... I>
constexpr auto micro_kernels(std::index_sequence<I...>) {
  return std::array<MicroKernel, sizeof...(I)>{&micro_kernel<int(I) / kVecs + 1, int(I) % kVecs + 1>...};
}
// kMicroKernels[(r - 1) * kVecs + v - 1] computes r rows of the panel's first v vectors.
constexpr auto kMicroKernels = micro_kernels(std::make_index_sequence<size_t(kMr * kVecs)>());

using MicroKernelAvx2 = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, int, float, bool, float);
template <size_t... I>
constexpr auto micro_kernels_avx2(std::index_sequence<I...>) {
  return std::array<MicroKernelAvx2, sizeof...(I)>{&micro_kernel_avx2<int(I) / 2 + 1, int(I) % 2 + 1>...};
}
// kMicroKernelsAvx2[(r - 1) * 2 + v - 1] computes r rows of a 16-column slice's first v vectors.
constexpr auto kMicroKernelsAvx2 = micro_kernels_avx2(std::make_index_sequence<size_t(kMr * 2)>());

bool avx512() { return cpu_isa() == BlasIsa::avx512; }
bool avx2() { return cpu_isa() >= BlasIsa::avx2; }  // cpu_isa's avx2 includes FMA
// Every AVX-512 CPU, and AMD's Zen 2 (family 0x17 from model 0x30) and Zen 3 (family 0x19): the
// header's measurements.
bool prefer_packed() {
  return avx512() || amd_cpu_family() == 0x19 || (amd_cpu_family() == 0x17 && amd_cpu_model() >= 0x30);
}
bool always() { return true; }

// packed on AVX-512 and on AMD's Zen 2-4 (see the header for the measurements), blas elsewhere.
constinit KernelPathSwitch g_path({"DTENSOR_F32_GEMM", "blas", "packed", "AVX2 and FMA", &avx2, &prefer_packed});

// The micro-kernels' vector width: AVX-512 wherever the CPU has it, unless set (tests).
constinit KernelPathSwitch g_isa({nullptr, "avx2", "avx512", "AVX-512", &avx512, &always});

}  // namespace

bool f32_packed_supported() { return avx2(); }

PackedIsa packed_isa() { return g_isa.fast() ? PackedIsa::avx512 : PackedIsa::avx2; }

void set_packed_isa(PackedIsa isa) { g_isa.set(isa == PackedIsa::avx512); }

F32GemmPath f32_gemm_path() { return g_path.fast() ? F32GemmPath::packed : F32GemmPath::blas; }

void set_f32_gemm_path(F32GemmPath path) { g_path.set(path == F32GemmPath::packed); }

bool f32_packed_linears() { return f32_gemm_path() == F32GemmPath::packed && packed_isa() == PackedIsa::avx512; }

namespace {

// GCC 12's masked and unpacking intrinsics start from an undefined vector, which
// -Wmaybe-uninitialized flags once they are inlined here; no value is read uninitialized (as in
// activation_fma.cc). GCC only: clang has no such warning.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// The 64-bit halves of x and y interleaved within each 128-bit lane (low or high pair).
DT_F32_PACKED_TARGET inline __m512 unpack_lo_64(__m512 x, __m512 y) {
  return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(x), _mm512_castps_pd(y)));
}
DT_F32_PACKED_TARGET inline __m512 unpack_hi_64(__m512 x, __m512 y) {
  return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(x), _mm512_castps_pd(y)));
}

// W's rows j0 .. j0 + 63 over k [k0, k0 + kc) as one panel (kc rows of kNr floats; columns past n
// are 0), for a row-major W (w_cs == 1: a linear's weight, or k [Sk, D] in attention): 16 x 16
// tiles of W, each loaded as 16 rows (masked past kc), transposed in registers and stored as 16
// panel rows. Per-element loops wrote each value down a panel column (stride kNr) and made
// packing a linear's weight on every call about as costly as the hash it replaces.
DT_F32_PACKED_TARGET void pack_panel_rows_avx512(const float* w, int64_t n, int64_t w_rs, int64_t k0, int64_t kc,
                                                 int64_t j0, float* panel) {
  for (int64_t jj = 0; jj < kNr; jj += 16) {
    const int64_t rows = std::clamp<int64_t>(n - (j0 + jj), 0, 16);
    for (int64_t pp = 0; pp < kc; pp += 16) {
      const int64_t len = std::min<int64_t>(16, kc - pp);
      const __mmask16 m = __mmask16((1u << len) - 1);
      __m512 r[16], t[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        r[i] = i < rows ? _mm512_maskz_loadu_ps(m, w + (j0 + jj + i) * w_rs + k0 + pp) : _mm512_setzero_ps();
      // Rows a, b, c, d, ... -> lanes of 32 and then 64 bits interleaved within each 128-bit lane:
      // u[4g + s] holds rows 4g .. 4g + 3 at elements s, s + 4, s + 8, s + 12 (one per 128-bit lane).
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
      }
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        r[4 * g + 0] = unpack_lo_64(t[4 * g + 0], t[4 * g + 2]);
        r[4 * g + 1] = unpack_hi_64(t[4 * g + 0], t[4 * g + 2]);
        r[4 * g + 2] = unpack_lo_64(t[4 * g + 1], t[4 * g + 3]);
        r[4 * g + 3] = unpack_hi_64(t[4 * g + 1], t[4 * g + 3]);
      }
      // Element s + 4L of every row: the 128-bit lane L of u[s], u[4 + s], u[8 + s], u[12 + s].
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const __m512 v0 = _mm512_shuffle_f32x4(r[s], r[4 + s], 0x44), v1 = _mm512_shuffle_f32x4(r[s], r[4 + s], 0xEE);
        const __m512 v2 = _mm512_shuffle_f32x4(r[8 + s], r[12 + s], 0x44),
                     v3 = _mm512_shuffle_f32x4(r[8 + s], r[12 + s], 0xEE);
        t[s] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        t[s + 4] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
        t[s + 8] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        t[s + 12] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
      }
      for (int64_t q = 0; q < len; ++q) _mm512_storeu_ps(panel + (pp + q) * kNr + jj, t[q]);
    }
  }
}

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// One panel of W's rows j0 .. j0 + 63 over k [k0, k0 + kc), element (j, p) at w[j * w_rs + p * w_cs]
// (the layout in the file comment). A column-major W (vᵀ in attention, packed once per head) is
// copied panel row by panel row, 64 consecutive values each; a row-major one through 16 x 16
// transposes on AVX-512, else element by element in the order that reads W contiguously.
void pack_panel(const float* w, int64_t n, int64_t w_rs, int64_t w_cs, int64_t k0, int64_t kc, int64_t j0,
                float* panel) {
  const int64_t cols = std::clamp<int64_t>(n - j0, 0, kNr);  // the rest of the panel's columns are 0
  if (w_rs == 1) {
    for (int64_t p = 0; p < kc; ++p) {
      const float* src = w + j0 + (k0 + p) * w_cs;
      float* dst = panel + p * kNr;
      for (int64_t j = 0; j < cols; ++j) dst[j] = src[j];
      for (int64_t j = cols; j < kNr; ++j) dst[j] = 0.f;
    }
  } else if (w_cs == 1 && avx512()) {
    pack_panel_rows_avx512(w, n, w_rs, k0, kc, j0, panel);
  } else {
    for (int64_t j = 0; j < cols; ++j) {
      const float* src = w + (j0 + j) * w_rs + k0 * w_cs;
      for (int64_t p = 0; p < kc; ++p) panel[p * kNr + j] = src[p * w_cs];
    }
    for (int64_t j = cols; j < kNr; ++j)
      for (int64_t p = 0; p < kc; ++p) panel[p * kNr + j] = 0.f;
  }
}

// Where a product's B panels come from: a PackedWeight (packed once, whole), or W itself, whose
// kc x nc block the drivers pack into this thread's buffer when their loops reach it (as OpenBLAS
// packs B on every call). Both hold the same floats at the same offsets of a panel, so the
// micro-kernels run the same instructions on the same values: the same bits either way.
class PanelSource {
 public:
  explicit PanelSource(const PackedWeight& b) : packed_(&b), n_(b.n()), k_(b.k()) {}
  PanelSource(const float* w, int64_t n, int64_t k, int64_t w_rs, int64_t w_cs)
      : w_(w), w_rs_(w_rs), w_cs_(w_cs), n_(n), k_(k) {
    // One block per thread, allocated on its first such product and kept: a fresh 256 KiB per call
    // would page-fault on every call.
    static thread_local std::unique_ptr<float[], void (*)(void*)> block(nullptr, &std::free);
    if (!block) {
      block.reset(static_cast<float*>(std::aligned_alloc(64, size_t(kKc * kNc) * sizeof(float))));
      DT_CHECK(block) << "out of memory for a packed block";
    }
    block_ = block.get();
  }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }

  // Makes the panels of columns [jb, jb + nc) over k block kb (kc of its rows) available.
  void prepare(int64_t kb, int64_t kc, int64_t jb, int64_t nc) const {
    if (packed_) return;
    for (int64_t jp = jb; jp < jb + nc; jp += kNr) pack_panel(w_, n_, w_rs_, w_cs_, kb, kc, jp, block_ + (jp - jb) * kc);
  }
  // The panel holding column jp (a multiple of kNr in [jb, jb + nc)) of the block prepared last.
  const float* panel(int64_t kb, int64_t kc, int64_t jb, int64_t jp) const {
    if (packed_) return packed_->data() + panel_offset(kb, kc, jp, (n_ + kNr - 1) / kNr * kNr);
    return block_ + (jp - jb) * kc;
  }

 private:
  const PackedWeight* packed_ = nullptr;
  const float* w_ = nullptr;
  int64_t w_rs_ = 0, w_cs_ = 0;
  int64_t n_, k_;
  float* block_ = nullptr;
};

}  // namespace

int64_t PackedWeight::floats(int64_t n, int64_t k) { return (n + kNr - 1) / kNr * kNr * k; }

PackedWeight::PackedWeight(const float* w, int64_t n, int64_t k, int64_t w_rs, int64_t w_cs)
    : PackedWeight(w, n, k, w_rs, w_cs, nullptr) {}

PackedWeight::PackedWeight(const float* w, int64_t n, int64_t k, int64_t w_rs, int64_t w_cs, float* into)
    : n_(n), k_(k), data_(into, +[](void*) {}) {  // the caller's buffer: not freed here
  DT_CHECK(n >= 1 && k >= 1) << "packing a weight of " << n << " x " << k;
  DT_CHECK(reinterpret_cast<uintptr_t>(into) % 64 == 0) << "a packed weight's buffer must be 64-byte aligned";
  if (!into) {
    data_ = std::unique_ptr<float[], void (*)(void*)>(
        static_cast<float*>(std::aligned_alloc(64, size_t(floats(n, k)) * sizeof(float))), &std::free);
    DT_CHECK(data_) << "out of memory packing a " << n << " x " << k << " weight";
  }
  const int64_t n_padded = (n + kNr - 1) / kNr * kNr;
  for (int64_t k0 = 0; k0 < k; k0 += kKc) {
    const int64_t kc = std::min(kKc, k - k0);
    for (int64_t j0 = 0; j0 < n_padded; j0 += kNr)
      pack_panel(w, n, w_rs, w_cs, k0, kc, j0, data_.get() + panel_offset(k0, kc, j0, n_padded));
  }
}

namespace {

// gemm_f32_packed_block on AVX2 (arguments checked there): the same blocks, but the 6-row tiles
// run over kMcAvx2 rows at a time for each 16-column slice, so that the slice (kc x 16 floats,
// 16 KiB) stays in L1 while those rows' A (kMcAvx2 x kc, 96 KiB) comes from L2.
void gemm_avx2(int64_t m, float alpha, const float* a, int64_t lda, const PanelSource& b, int64_t j0, int64_t j1,
               int64_t k0, int64_t k1, float beta, float* c, int64_t ldc) {
  const int64_t k = b.k();
  for (int64_t jb = j0; jb < j1; jb += kNc) {
    const int64_t nc = std::min(kNc, j1 - jb);
    for (int64_t kb = k0; kb < k1; kb += kKc) {
      const int64_t kc = std::min(kKc, k - kb), used = std::min(kc, k1 - kb);
      b.prepare(kb, kc, jb, nc);
      for (int64_t ic = 0; ic < m; ic += kMcAvx2) {
        const int64_t mc = std::min(kMcAvx2, m - ic);
        for (int64_t js = jb; js < jb + nc; js += 16) {
          const int64_t jp = js / kNr * kNr;
          const int slice_cols = int(std::min<int64_t>(16, j1 - js));
          const float* slice = b.panel(kb, kc, jb, jp) + (js - jp);
          for (int64_t i = ic; i < ic + mc; i += kMr) {
            const int64_t rows = std::min(kMr, m - i);
            const MicroKernelAvx2 kernel = kMicroKernelsAvx2[size_t((rows - 1) * 2 + (slice_cols + 7) / 8 - 1)];
            kernel(used, a + i * lda + (kb - k0), lda, slice, c + i * ldc + (js - j0), ldc, slice_cols, alpha,
                   kb == k0, beta);
          }
        }
      }
    }
  }
}

// gemm_f32_packed_block's loops (arguments checked by the callers) over either panel source.
void gemm_blocks(int64_t m, float alpha, const float* a, int64_t lda, const PanelSource& b, int64_t j0, int64_t j1,
                 int64_t k0, int64_t k1, float beta, float* c, int64_t ldc) {
  if (k0 == k1) {  // an empty sum: c = beta * c, as BLAS
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < j1 - j0; ++j) c[i * ldc + j] = beta == 0 ? 0.f : beta * c[i * ldc + j];
    return;
  }
  if (packed_isa() == PackedIsa::avx2) return gemm_avx2(m, alpha, a, lda, b, j0, j1, k0, k1, beta, c, ldc);
  const int64_t k = b.k();
  for (int64_t jb = j0; jb < j1; jb += kNc) {
    const int64_t nc = std::min(kNc, j1 - jb);
    for (int64_t kb = k0; kb < k1; kb += kKc) {
      // The layout's block holds kc rows; the product uses the first `used` of them.
      const int64_t kc = std::min(kKc, k - kb), used = std::min(kc, k1 - kb);
      b.prepare(kb, kc, jb, nc);
      for (int64_t i = 0; i < m; i += kMr) {
        const int64_t rows = std::min(kMr, m - i);
        for (int64_t jp = jb; jp < jb + nc; jp += kNr) {
          const int64_t cols = std::min(kNr, j1 - jp);
          const uint64_t mask = cols == 64 ? ~uint64_t(0) : (uint64_t(1) << cols) - 1;
          const MicroKernel kernel = kMicroKernels[size_t((rows - 1) * kVecs + (cols + 15) / 16 - 1)];
          kernel(used, a + i * lda + (kb - k0), lda, b.panel(kb, kc, jb, jp), c + i * ldc + (jp - j0), ldc, mask,
                 alpha, kb == k0, beta);
        }
      }
    }
  }
}

}  // namespace

void gemm_f32_packed(int64_t m, float alpha, const float* a, int64_t lda, const PackedWeight& b, float beta, float* c,
                     int64_t ldc) {
  gemm_f32_packed_block(m, alpha, a, lda, b, 0, b.n(), 0, b.k(), beta, c, ldc);
}

void gemm_f32_packed_block(int64_t m, float alpha, const float* a, int64_t lda, const PackedWeight& b, int64_t j0,
                           int64_t j1, int64_t k0, int64_t k1, float beta, float* c, int64_t ldc) {
  DT_CHECK(f32_packed_supported()) << "gemm_f32_packed on a CPU without AVX2 and FMA";
  const int64_t n = b.n(), k = b.k();
  DT_CHECK(j0 % kNr == 0 && k0 % kKc == 0 && 0 <= j0 && j0 <= j1 && j1 <= n && 0 <= k0 && k0 <= k1 && k1 <= k)
      << "packed gemm block columns [" << j0 << ", " << j1 << "), k [" << k0 << ", " << k1 << ") of a " << n << " x "
      << k << " weight";
  gemm_blocks(m, alpha, a, lda, PanelSource(b), j0, j1, k0, k1, beta, c, ldc);
}

void gemm_f32_packing(int64_t m, float alpha, const float* a, int64_t lda, const float* w, int64_t n, int64_t k,
                      int64_t w_rs, int64_t w_cs, float beta, float* c, int64_t ldc) {
  DT_CHECK(f32_packed_supported()) << "gemm_f32_packing on a CPU without AVX2 and FMA";
  DT_CHECK(m >= 0 && n >= 0 && k >= 0) << "gemm_f32_packing of " << m << " x " << k << " x " << n;
  if (m == 0 || n == 0) return;
  gemm_blocks(m, alpha, a, lda, PanelSource(w, n, k, w_rs, w_cs), 0, n, 0, k, beta, c, ldc);
}

}  // namespace dt
