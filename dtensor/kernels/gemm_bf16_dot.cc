// The vdpbf16ps GEMM: a Goto-style blocked GEMM whose inner step multiplies pairs of k.
//
// vdpbf16ps takes two vectors of 16 bf16 pairs and adds to each f32 lane the two products of its
// pair: acc[j] += a[2p] * b[2p][j] + a[2p+1] * b[2p+1][j]. So both operands are packed in pairs of k:
//   - B (kc x nc block) into panels of kNr = 32 columns; a panel holds, for each k pair p, 32 words
//     (one per column) of (b[2p][j], b[2p+1][j]): 128 bytes, two zmm loads;
//   - A (mc x kc block) into rows of pair words (a[i][2p], a[i][2p+1]), a fixed kKc / 2 words
//     apart; the micro-kernel broadcasts each word to all 16 lanes.
// The micro-kernel keeps a 12 x 32 tile of C in 24 zmm accumulators and runs one vdpbf16ps per
// (row, half) per k pair. A pair past an odd k, rows past m and columns past n are packed as zeros,
// so every tile runs the same instruction sequence and only stores are masked.
//
// Worked example, k = 5, block kc = 5: pairs p = 0, 1, 2 hold k (0, 1), (2, 3), (4, pad 0).
//
// Loop order and block sizes (BLIS's): for each nc block of columns, for each kc block of k, pack
// B's block (kKc x kNc: 128 pairs x 2048 columns, 1 MiB, read from L2/L3); for each mc block of rows
// pack A's block (kMc x kKc = 240 x 256: 120 KiB, stays in L2); then for each 32-column panel of B
// (16 KiB, stays in L1) run the 12-row tiles of A down it. C accumulates across kc blocks in
// memory: the first block stores beta * c + alpha * acc, later ones c + alpha * acc. The blocks
// depend only on k and n, never on m, which is why any split of the rows gives the same bits.
//
// On a CPU with AMX the same packed blocks feed the tile multiply instead (amx_kernel): a 32 x 32
// block of C per step, 16 pairs of k per instruction. For it the k pairs of a block pad with zero
// pairs to a multiple of 16 (in A's rows and B's panels) and A's rows with zero rows to a multiple
// of 32, and A's blocks are 256 rows.
#include "dtensor/kernels/gemm_bf16_dot.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dtensor/core/blas_kernels.h"
#include "dtensor/core/error.h"

namespace dt {

namespace {

constexpr int64_t kMr = 12, kNr = 32;
constexpr int64_t kKc = 256, kMc = 240, kNc = 2048;  // kKc even: blocks start on a pair
static_assert(kKc % 2 == 0 && kMc % kMr == 0 && kNc % kNr == 0);

#define DT_BF16_DOT_TARGET __attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl")))

// Packs column half [jh, jh + 16) of one B panel (16 of its 32 words per pair) from any strides:
// the fallback for views that are neither row-major nor transposed (direct callers only; gemm()
// hands over one of the two).
void pack_b_half_strided(const uint16_t* b, int64_t rs, int64_t cs, int64_t n, int64_t k_end, int64_t k0,
                         int64_t pairs, int64_t jh, uint32_t* half) {
  for (int64_t jj = 0; jj < 16; ++jj)
    for (int64_t p = 0; p < pairs; ++p) {
      const int64_t j = jh + jj, r = k0 + 2 * p;
      const uint32_t lo = j < n ? b[r * rs + j * cs] : 0, hi = j < n && r + 1 < k_end ? b[(r + 1) * rs + j * cs] : 0;
      half[p * kNr + jj] = lo | hi << 16;
    }
}

// GCC 12's unpack and shuffle intrinsics start from _mm512_undefined_epi32(), which
// -Wmaybe-uninitialized flags once they are inlined here; no value is read uninitialized. Clang has
// no such warning (and warns about the unknown option), so it is silenced for GCC only.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// Transposes 16 x 16 32-bit words in place: r[i] lane j becomes r[j] lane i.
DT_BF16_DOT_TARGET void transpose_16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {  // 2 x 2 blocks of words
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // 4 x 4 blocks within each 128-bit lane
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {  // then the 4 x 4 grid of 128-bit lanes
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
  }
}

// Packs b's k rows [k0, k0 + kc) and columns [j0, j0 + nc) as pair words, panel by panel
// (layout above); columns past n and a pair past an odd k are zeros. Two layouts are vectorised:
// a linear's weight.T (rs == 1: a column's pairs are adjacent words, so 16 columns x 16 pairs are
// loaded and transposed) and a row-major b (cs == 1: rows 2p and 2p + 1 interleaved 16-bit by
// 16-bit).
// Panels are panel_pairs >= pairs rows of kNr words apart; rows past `pairs` are zeros (the AMX
// tiles read whole groups of 16 pairs).
DT_BF16_DOT_TARGET void pack_b(const uint16_t* b, int64_t rs, int64_t cs, int64_t k, int64_t n, int64_t k0,
                               int64_t kc, int64_t j0, int64_t nc, int64_t panel_pairs, uint32_t* out) {
  const int64_t pairs = (kc + 1) / 2, k_end = std::min(k, k0 + kc);
  alignas(64) static const uint16_t kInterleave[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                        8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  for (int64_t jp = 0; jp < nc; jp += kNr) {
    uint32_t* panel = out + jp * panel_pairs;  // jp / kNr panels of panel_pairs * kNr words before it
    if (panel_pairs > pairs) std::memset(panel + pairs * kNr, 0, size_t((panel_pairs - pairs) * kNr) * 4);
    for (int64_t jh = j0 + jp, h = 0; h < 2; ++h, jh += 16) {
      uint32_t* half = panel + 16 * h;
      const int64_t cols = std::clamp<int64_t>(n - jh, 0, 16);
      if (rs == 1) {
        for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
          const int64_t values = std::min<int64_t>(32, k_end - k0 - 2 * p0);  // bf16 of k in this chunk
          const __mmask32 kmask = values >= 32 ? ~__mmask32(0) : __mmask32((1u << values) - 1);
          __m512i r[16];
          for (int64_t jj = 0; jj < 16; ++jj)
            r[jj] = jj < cols ? _mm512_maskz_loadu_epi16(kmask, b + (jh + jj) * cs + k0 + 2 * p0) : _mm512_setzero_si512();
          transpose_16x16(r);
          for (int64_t q = 0; q < std::min<int64_t>(16, pairs - p0); ++q)
            _mm512_storeu_si512(half + (p0 + q) * kNr, r[q]);
        }
      } else if (cs == 1) {
        const __mmask32 cmask = __mmask32((1u << cols) - 1);
        for (int64_t p = 0; p < pairs; ++p) {
          const int64_t r = k0 + 2 * p;
          const __m512i lo = _mm512_maskz_loadu_epi16(cmask, b + r * rs + jh);
          const __m512i hi = r + 1 < k_end ? _mm512_maskz_loadu_epi16(cmask, b + (r + 1) * rs + jh) : _mm512_setzero_si512();
          _mm512_storeu_si512(half + p * kNr, _mm512_permutex2var_epi16(lo, interleave, hi));
        }
      } else {
        pack_b_half_strided(b, rs, cs, n, k_end, k0, pairs, jh, half);
      }
    }
  }
}

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Packs a's rows [i0, i0 + mc) and k [k0, k0 + kc) as rows of pair words, kKc / 2 words apart
// (a fixed stride, so that the micro-kernel addresses all its rows from one pointer with constant
// offsets); words past the kc values are zero up to `pairs` words (>= (kc + 1) / 2: the pair past
// an odd k, and for AMX the rest of a group of 16 pairs), and rows [mc, rows) are zeros (AMX tiles
// read 32 rows). A row-major a is a plain copy of each row.
void pack_a(const uint16_t* a, int64_t rs, int64_t cs, int64_t i0, int64_t mc, int64_t rows, int64_t k0, int64_t kc,
            int64_t pairs, uint32_t* out) {
  for (int64_t i = 0; i < mc; ++i) {
    const uint16_t* row = a + (i0 + i) * rs;
    auto* dst = reinterpret_cast<uint16_t*>(out + i * (kKc / 2));
    if (cs == 1) {
      std::memcpy(dst, row + k0, size_t(kc) * 2);
    } else {
      for (int64_t p = 0; p < kc; ++p) dst[p] = row[(k0 + p) * cs];
    }
    std::fill(dst + kc, dst + 2 * pairs, uint16_t(0));
  }
  for (int64_t i = mc; i < rows; ++i) std::fill_n(out + i * (kKc / 2), pairs, 0u);
}

// The C tile's rows [0, Rows) of packed A rows (pa: the first, kKc / 2 words apart) times a packed B panel over `pairs` k pairs, into
// c (row stride ldc) under the column masks. Every accumulator sees the same instruction sequence
// whatever Rows is, so a tail tile's values are the full tile's.
template <int Rows>
DT_BF16_DOT_TARGET void micro_kernel(int64_t pairs, const uint32_t* pa, const uint32_t* pb, float* c, int64_t ldc,
                                     __mmask16 mask0, __mmask16 mask1, float alpha, bool first, float beta) {
  __m512 acc[Rows][2];
  // Fully unrolled, so that the accumulators live in registers.
#pragma GCC unroll 12
  for (int i = 0; i < Rows; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(pb);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(pb + 16);
#pragma GCC unroll 12
    for (int i = 0; i < Rows; ++i) {
      const __m512bh ai = (__m512bh)_mm512_set1_epi32(int(pa[i * (kKc / 2)]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
    }
    pa += 1;
    pb += kNr;
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
  for (int i = 0; i < Rows; ++i) {
    float* ci = c + i * ldc;
    for (int h = 0; h < 2; ++h) {
      const __mmask16 mask = h ? mask1 : mask0;
      const __m512 prod = alpha == 1 ? acc[i][h] : _mm512_mul_ps(va, acc[i][h]);
      __m512 old = _mm512_maskz_loadu_ps(mask, ci + 16 * h);
      if (first) old = beta == 0 ? _mm512_setzero_ps() : _mm512_mul_ps(vb, old);
      _mm512_mask_storeu_ps(ci + 16 * h, mask, _mm512_add_ps(old, prod));
    }
  }
}

using MicroKernel = void (*)(int64_t, const uint32_t*, const uint32_t*, float*, int64_t, __mmask16, __mmask16, float,
                             bool, float);
template <size_t... R>
constexpr auto micro_kernels(std::index_sequence<R...>) {
  return std::array<MicroKernel, sizeof...(R)>{&micro_kernel<int(R) + 1>...};
}
// kMicroKernels[r - 1] computes r rows.
constexpr auto kMicroKernels = micro_kernels(std::make_index_sequence<size_t(kMr)>());

// The AMX tile kernel. Tiles 0-3 hold a 32 x 32 block of C as four 16 x 16 f32 tiles, tiles 4-5
// two 16-row slices of packed A (16 pair words = 32 k per row, rows kKc / 2 words apart) and tiles
// 6-7 the two 16-column halves of a B panel over the same 16 pairs (rows kNr words apart): the
// packed layouts above are already the tiles' layouts. tdpbf16ps adds to each f32 element the
// products of its row's and column's 16 pairs, exact products summed in f32, subnormals as zero.
constexpr int64_t kMrAmx = 32, kPairsAmx = 16, kMcAmx = 256;
static_assert(kMcAmx % kMrAmx == 0 && (kKc / 2) % kPairsAmx == 0);

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

#define DT_BF16_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f")))

// Tiles 0-7 of 16 rows x 64 bytes. A constant in memory: GCC 12 drops the stores to a local
// config before ldtilecfg (it does not see that the instruction reads all 64 bytes), which left
// the tiles unconfigured and the first tile instruction faulting.
constexpr TileConfig tile_config() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = 16;
  }
  return config;
}
alignas(64) constexpr TileConfig kTileConfig = tile_config();

DT_BF16_AMX_TARGET void load_tile_config() { _tile_loadconfig(&kTileConfig); }

// Marks the tiles unused again (the kernel then need not save them on a context switch).
DT_BF16_AMX_TARGET void release_tiles() { _tile_release(); }

// The C block of packed A rows [0, 32) (pa: the first) times a B panel over `pairs` (a multiple of
// 16) pairs, into c's rows [0, rows) under the column masks; alpha, first and beta as for
// micro_kernel. Every element sees the same tile instructions whatever rows is.
DT_BF16_AMX_TARGET void amx_kernel(int64_t pairs, const uint32_t* pa, const uint32_t* pb, float* c, int64_t ldc,
                                   int64_t rows, __mmask16 mask0, __mmask16 mask1, float alpha, bool first,
                                   float beta) {
  constexpr long a_stride = (kKc / 2) * 4, b_stride = kNr * 4;
  asm volatile("" ::: "memory");  // the packed blocks are stored before the tiles load them (below)
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t p = 0; p < pairs; p += kPairsAmx) {
    _tile_loadd(4, pa + p, a_stride);
    _tile_loadd(5, pa + 16 * (kKc / 2) + p, a_stride);
    _tile_loadd(6, pb + p * kNr, b_stride);
    _tile_loadd(7, pb + p * kNr + 16, b_stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float acc[kMrAmx][kNr];
  _tile_stored(0, &acc[0][0], b_stride);
  _tile_stored(1, &acc[0][16], b_stride);
  _tile_stored(2, &acc[16][0], b_stride);
  _tile_stored(3, &acc[16][16], b_stride);
  // GCC's tile intrinsics are asm statements that declare no memory operands: this keeps the
  // packing's stores before the tile loads, and the reads of acc after the tile stores.
  asm volatile("" ::: "memory");
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int64_t i = 0; i < rows; ++i) {
    float* ci = c + i * ldc;
    for (int h = 0; h < 2; ++h) {
      const __mmask16 mask = h ? mask1 : mask0;
      const __m512 sum = _mm512_load_ps(&acc[i][16 * h]);
      const __m512 prod = alpha == 1 ? sum : _mm512_mul_ps(va, sum);
      __m512 old = _mm512_maskz_loadu_ps(mask, ci + 16 * h);
      if (first) old = beta == 0 ? _mm512_setzero_ps() : _mm512_mul_ps(vb, old);
      _mm512_mask_storeu_ps(ci + 16 * h, mask, _mm512_add_ps(old, prod));
    }
  }
}

// The packed blocks of the calling thread, kept between calls (64-byte aligned).
struct PackBuffers {
  std::unique_ptr<uint32_t[], decltype(&std::free)> a{nullptr, &std::free}, b{nullptr, &std::free};
  PackBuffers() {
    a.reset(static_cast<uint32_t*>(std::aligned_alloc(64, size_t(std::max(kMc, kMcAmx) * kKc / 2) * 4)));
    b.reset(static_cast<uint32_t*>(std::aligned_alloc(64, size_t(kNc * kKc / 2) * 4)));
    DT_CHECK(a && b) << "out of memory for the bf16 GEMM's packed blocks";
  }
};

bool prefer_dot() { return amd_cpu_family() >= 0x19 || amx_bf16_supported(); }
// AMX wherever usable (names private to this file differ within the target: unity builds).
bool prefer_amx() { return true; }

// dot on AMD family 0x19 and later and on CPUs with AMX (see the header for the measurements),
// widen elsewhere.
constinit KernelPathSwitch g_bf16_path({"DTENSOR_BF16_GEMM", "widen", "dot", "AVX512-BF16", &cpu_has_avx512_bf16, &prefer_dot});

// The dot path's instructions: AMX tiles wherever the CPU has them, unless set (tests).
constinit KernelPathSwitch g_dot_isa({nullptr, "avx512bf16", "amx", "AMX-BF16", &amx_bf16_supported, &prefer_amx});

}  // namespace

bool bf16_dot_supported() { return cpu_has_avx512_bf16(); }

// True when the CPU has AMX-TILE and AMX-BF16 (CPUID leaf 7, EDX bits 24 and 22) with AVX512-BF16,
// and Linux grants this process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, once per
// process; threads started later share it). Asked once.
bool amx_bf16_supported() {
  static const bool ok = [] {
#if defined(__x86_64__) && defined(__linux__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!cpu_has_avx512_bf16() || !__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    if (!(edx & (1u << 24)) || !(edx & (1u << 22))) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return ok;
}

Bf16GemmPath bf16_gemm_path() { return g_bf16_path.fast() ? Bf16GemmPath::dot : Bf16GemmPath::widen; }

void set_bf16_gemm_path(Bf16GemmPath path) { g_bf16_path.set(path == Bf16GemmPath::dot); }

Bf16DotIsa bf16_dot_isa() { return g_dot_isa.fast() ? Bf16DotIsa::amx : Bf16DotIsa::avx512bf16; }

void set_bf16_dot_isa(Bf16DotIsa isa) { g_dot_isa.set(isa == Bf16DotIsa::amx); }

void gemm_bf16_dot(int64_t m, int64_t n, int64_t k, float alpha, const bf16* a, int64_t a_rs, int64_t a_cs,
                   const bf16* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc) {
  DT_CHECK(bf16_dot_supported() && k >= 1) << "gemm_bf16_dot on a CPU without AVX512-BF16 or with k " << k;
  thread_local PackBuffers buf;
  const auto* a16 = reinterpret_cast<const uint16_t*>(a);
  const auto* b16 = reinterpret_cast<const uint16_t*>(b);
  const bool amx = bf16_dot_isa() == Bf16DotIsa::amx;
  if (amx) load_tile_config();  // the tile registers' shapes are the calling thread's state
  const int64_t mc_block = amx ? kMcAmx : kMc, mr = amx ? kMrAmx : kMr;
  for (int64_t j0 = 0; j0 < n; j0 += kNc) {
    const int64_t nc = std::min(kNc, n - j0), nc_padded = (nc + kNr - 1) / kNr * kNr;
    for (int64_t k0 = 0; k0 < k; k0 += kKc) {
      const int64_t kc = std::min(kKc, k - k0), pairs = (kc + 1) / 2;
      const int64_t panel_pairs = amx ? (pairs + kPairsAmx - 1) / kPairsAmx * kPairsAmx : pairs;
      pack_b(b16, b_rs, b_cs, k, n, k0, kc, j0, nc_padded, panel_pairs, buf.b.get());
      for (int64_t i0 = 0; i0 < m; i0 += mc_block) {
        const int64_t mc = std::min(mc_block, m - i0), mc_padded = (mc + mr - 1) / mr * mr;
        pack_a(a16, a_rs, a_cs, i0, mc, mc_padded, k0, kc, panel_pairs, buf.a.get());
        for (int64_t jp = 0; jp < nc; jp += kNr) {
          const int64_t cols = std::min(kNr, nc - jp);
          const auto mask0 = __mmask16(cols >= 16 ? 0xffff : (1u << cols) - 1);
          const auto mask1 = __mmask16(cols >= 32 ? 0xffff : cols <= 16 ? 0 : (1u << (cols - 16)) - 1);
          for (int64_t ip = 0; ip < mc; ip += mr) {
            const int64_t rows = std::min(mr, mc - ip);
            const uint32_t* pa = buf.a.get() + ip * (kKc / 2);
            const uint32_t* pb = buf.b.get() + jp * panel_pairs;
            float* ct = c + (i0 + ip) * ldc + j0 + jp;
            if (amx)
              amx_kernel(panel_pairs, pa, pb, ct, ldc, rows, mask0, mask1, alpha, k0 == 0, beta);
            else
              kMicroKernels[size_t(rows - 1)](pairs, pa, pb, ct, ldc, mask0, mask1, alpha, k0 == 0, beta);
          }
        }
      }
    }
  }
  if (amx) release_tiles();
}

}  // namespace dt
