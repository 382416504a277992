// scaled_dot_product_attention as one tiled kernel: flash-style blocks with an online softmax.
//
// softmax(q·kᵀ/√D + mask)·v is computed per head, one block of kQueryBlock query rows at a time.
// For each block of up to kKeyBlock keys the score tile s = q_blk·k_blkᵀ/√D is one sgemm into a
// scratch tile; every row of the tile is turned into exponentials against the row's running max
// m, its running sum l (in double) is updated, and the block's contribution p·v_blk is one more
// sgemm accumulated straight into the output rows. When a later key block raises a row's max, the
// row's sum and output so far are rescaled by exp(m_old - m_new) first. After the last key block
// each output row is divided by its sum.
//
// So the only score memory is one [kQueryBlock, kKeyBlock] tile (32 KiB in f32), not [S, Sk] per
// head, and a causal mask costs nothing: query block [i0, i0 + bq) sees keys j <= i only, so key
// blocks from i0 + bq on are never computed (about half the q·kᵀ and p·v flops at long sequences),
// and inside the last block each row's exponentials stop at its diagonal (the rest of the row is 0).
//
// Worked example, causal, S = Sk = 100, kQueryBlock = 30, kKeyBlock = 256, sgemm path: query
// blocks [0, 30), [30, 60), [60, 90), [90, 100) use keys [0, 30), [0, 60), [0, 90), [0, 100): 280
// key columns of the 400 a full [100, 100] score matrix has (and 5,050 of them are unmasked). Row
// 40 of the second block takes exponentials of columns 0..40 and writes 0 to 41..59.
//
// On the packed path (k and v packed once per head, gemm_f32_packed) a block runs as groups of
// kPackedRows = 6 rows, each with its own online softmax over its own keys: rows [36, 42) use keys
// [0, 42), so the causal triangle is cut at 6 rows instead of the block's 30, and the packed GEMM
// computes only the 16-column vectors that hold keys (the diagonal panel's [36, 42) in one vector
// of 16, not four). Groups cost nothing extra there: the packed GEMM runs 6-row tiles anyway.
// Its row work is exp_row_fma.h's, at the packed GEMM's width (AVX-512 or AVX2, the same bits), so
// a packed attention gives one result on either CPU. Causal [4, 8, 256, 64] forward on Zen 4,
// kernels_bench, one thread, alternating: 5.08-5.26 ms -> 4.23-4.30 ms (non-causal 7.82-8.25 ->
// 6.95-6.98; S = 1024 127-131 -> 110-115, causal 69.9-72.5 -> 64.6-67.8).
//
// Grouped-query k/v: q head h reads kv head h / (Hq / Hkv) through the kv pointer of its task, so
// k and v are never repeated. A mask (bool masks become 0 / -inf once, in the mask's own shape) is
// read through broadcast strides and added to each scaled score tile before its row max.
//
// Without a mask every row sees key 0, so its max is finite after the first key block; a later
// key block can hold none of a causal row's keys (rows [252, 258) use key blocks [0, 256) and
// [256, 258), where rows 252..255 see nothing): that block adds 0 to the row and keeps its max. A
// mask can hide a row's whole block (its max stays -inf: the block adds nothing) or the whole row
// (sum 0: the row is 0/0 = NaN, as torch's). A NaN score makes its whole row NaN, as in torch,
// whichever key block holds it (attend_rows). On the sgemm path the row work (scale,
// mask, max, exp, sum) is plain loops compiled for each CPU's vector width (exp_row_f32), in the
// same operation order as before, so results are unchanged bit for bit; with baseline SSE2 loops
// the causal [4, 8, 256, 64] forward took 8.5 ms instead of 6.7 (kernels_bench, one run each). Results match the unfused softmax(scores)·v to a few ulps (fast_exp is the same
// exp as dt::softmax's); with Sk <= kKeyBlock no rescaling happens at all.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "dtensor/kernels/elementwise.h"
#include "dtensor/kernels/exp_row_fma.h"
#include "dtensor/kernels/gemm_f32_packed.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/kernels/ops_attention_blas.h"
#include "dtensor/core/parallel.h"
#include "dtensor/kernels/row_reduce.h"
#include "dtensor/kernels/simd_clones.h"
#include "dtensor/core/threading.h"

namespace dt {

namespace {

using namespace attention_detail;

// kQueryBlock is a multiple of the packed micro-kernel's rows, so that only a head's last block
// can have a narrower tile (with 32, every block ended in a 2-row tile: 4 % of the causal
// [4, 8, 256, 64] forward's time).
constexpr int64_t kQueryBlock = 30;
constexpr int64_t kKeyBlock = 256;
static_assert(kQueryBlock % kPackedRows == 0);
// Key blocks start at a panel and a k block of the packed layout (gemm_f32_packed_block's rule).
static_assert(kKeyBlock % kPackedPanelCols == 0 && kKeyBlock % kPackedKBlock == 0);

// One head's matrices: row i of q is q + i * ldq (unit column stride), likewise k and v.
template <typename C>
struct Head {
  const C* q;
  const C* k;
  const C* v;
  C* out;  // contiguous [S, Dv]
  int64_t ldq, ldk, ldv;
  const C* mask = nullptr;  // additive, element (i, j) at mask + i * mask_ld + j * mask_col
  int64_t mask_ld = 0, mask_col = 0;
  // k and v packed for gemm_f32_packed (f32 only; null: k and v multiply through sgemm):
  // packed_k's W is k [Sk, D] (the product q·kᵀ), packed_v's is vᵀ [Dv, Sk] (the product p·v).
  const PackedWeight* packed_k = nullptr;
  const PackedWeight* packed_v = nullptr;
};

// Per-call scratch of the tiled loop.
template <typename C>
struct Scratch {
  std::vector<C> tile = std::vector<C>(size_t(kQueryBlock * kKeyBlock));
  std::vector<C> row_max = std::vector<C>(size_t(kQueryBlock));
  std::vector<double> row_sum = std::vector<double>(size_t(kQueryBlock));
};

// Turns one score row of a tile in place into exponentials against the row's new running max,
// over keys [0, visible) of a row of n (the rest become 0): scale, add the mask row (m: keys
// mask_col apart; null for none), take the max with the running max m_old, exp, and sum in
// double into *block_sum. Returns the new max; -inf when no score so far is finite (every visible
// score -inf or NaN): then the row holds the scaled, masked scores for attend_rows to look at
// (the FMA row also returns -inf when a NaN hides finite scores from its max).
// Inlined into each caller's loop.
template <typename C>
[[gnu::always_inline]] inline C exp_row(C* row, int64_t visible, int64_t n, C scale, const C* m, int64_t mask_col,
                                        C m_old, double* block_sum) {
  // Scaling after the GEMM (not as its alpha) rounds the scores exactly as the unfused
  // matmul-then-mul did: a score's rounding error is amplified |score| times by exp.
  for (int64_t c = 0; c < visible; ++c) row[c] = row[c] * scale;
  if (m && mask_col == 1)
    for (int64_t c = 0; c < visible; ++c) row[c] += m[c];
  else if (m)
    for (int64_t c = 0; c < visible; ++c) row[c] += m[c * mask_col];
  const C m_new = std::max(m_old, kernel::row_max(row, visible));
  if (m_new == -std::numeric_limits<C>::infinity()) return m_new;
  for (int64_t c = 0; c < visible; ++c) row[c] = kernel::softmax_exp(row[c] - m_new);
  std::fill(row + visible, row + n, C(0));
  *block_sum = lane_sum(row, row, visible, false);
  return m_new;
}

// exp_row for f32, for each CPU's vector width (simd_clones.h): the same bits in every clone.
DT_SIMD_CLONES float exp_row_f32(float* row, int64_t visible, int64_t n, float scale, const float* m,
                                 int64_t mask_col, float m_old, double* block_sum) {
  return exp_row<float>(row, visible, n, scale, m, mask_col, m_old, block_sum);
}

// True when attention with S query rows multiplies through gemm_f32_packed against k and v
// packed once per kv head: on the f32 GEMM path that chose it (f32_gemm_path), and with at least
// one whole query block, as packing costs about as much as one block's products (decode, S = 1,
// keeps sgemm).
bool packed_attention(int64_t S) { return S >= kQueryBlock && f32_gemm_path() == F32GemmPath::packed; }

// Computes the score tile s [bq, bk] (row stride bk) = q rows [i0, i0 + bq) · k rows [j0, j0 + bk)ᵀ.
template <typename C>
void score_tile(const Head<C>& h, int64_t i0, int64_t bq, int64_t j0, int64_t bk, int64_t D, C* s) {
  if constexpr (std::is_same_v<C, float>)
    if (h.packed_k) {
      gemm_f32_packed_block(bq, 1.f, h.q + i0 * h.ldq, h.ldq, *h.packed_k, /*j0=*/j0, /*j1=*/j0 + bk, /*k0=*/0,
                            /*k1=*/D, 0.f, s, bk);
      return;
    }
  gemm<C>(/*trans_a=*/false, /*trans_b=*/true, bq, bk, D, C(1), h.q + i0 * h.ldq, h.ldq, h.k + j0 * h.ldk, h.ldk, C(0),
          s, bk);
}

// Adds p · v rows [j0, j0 + bk) to acc [bq, Dv], p being the tile s of exponentials.
template <typename C>
void accumulate_values(const Head<C>& h, int64_t bq, int64_t j0, int64_t bk, int64_t Dv, const C* s, C* acc) {
  if constexpr (std::is_same_v<C, float>)
    if (h.packed_v) {
      gemm_f32_packed_block(bq, 1.f, s, bk, *h.packed_v, /*j0=*/0, /*j1=*/Dv, /*k0=*/j0, /*k1=*/j0 + bk, 1.f, acc, Dv);
      return;
    }
  gemm<C>(/*trans_a=*/false, /*trans_b=*/false, bq, Dv, bk, C(1), s, bk, h.v + j0 * h.ldv, h.ldv, C(1), acc, Dv);
}

// Computes the query rows [i0, i0 + bq) of one head over all their keys (see the file comment).
// Sk, D, Dv >= 1, bq <= kQueryBlock.
template <typename C>
void attend_rows(const Head<C>& h, int64_t i0, int64_t bq, int64_t Sk, int64_t D, int64_t Dv, bool causal, C scale,
                 Scratch<C>& w) {
  const C neg_inf = -std::numeric_limits<C>::infinity();
  const int64_t key_end = causal ? std::min(Sk, i0 + bq) : Sk;
  C* acc = h.out + i0 * Dv;
  std::fill(acc, acc + bq * Dv, C(0));
  std::fill(w.row_max.begin(), w.row_max.end(), neg_inf);
  std::fill(w.row_sum.begin(), w.row_sum.end(), 0.0);
  for (int64_t j0 = 0; j0 < key_end; j0 += kKeyBlock) {
    const int64_t bk = std::min(kKeyBlock, key_end - j0);
    C* s = w.tile.data();
    score_tile(h, i0, bq, j0, bk, D, s);
    for (int64_t r = 0; r < bq; ++r) {
      C* row = s + r * bk;
      // Keys j0 + c with c < visible are unmasked for query i0 + r.
      const int64_t visible = causal ? std::clamp<int64_t>(i0 + r + 1 - j0, 0, bk) : bk;
      const C* m = h.mask ? h.mask + (i0 + r) * h.mask_ld + j0 * h.mask_col : nullptr;
      const C m_old = w.row_max[size_t(r)];
      double block_sum = 0;
      C m_new;
      if constexpr (std::is_same_v<C, float>)
        m_new = h.packed_k ? exp_row_fma(row, visible, bk, scale, m, h.mask_col, m_old, &block_sum)
                           : exp_row_f32(row, visible, bk, scale, m, h.mask_col, m_old, &block_sum);
      else
        m_new = exp_row<C>(row, visible, bk, scale, m, h.mask_col, m_old, &block_sum);
      if (m_new == neg_inf) {
        // No finite max so far: every visible score is -inf or NaN (or, on the FMA row, a NaN
        // hid the finite ones from the max). All -inf: everything masked so far (only a mask does
        // that, see the file comment), and the block adds nothing to the row. A NaN score makes torch's
        // softmax row NaN: the row's max, sum and output become NaN from this block on (a max
        // that ignores NaN would otherwise take the block for a masked one and let later key
        // blocks give finite outputs).
        if (std::none_of(row, row + visible, [](C x) { return std::isnan(x); })) {
          std::fill(row, row + bk, C(0));
          continue;
        }
        m_new = std::numeric_limits<C>::quiet_NaN();
        std::fill(row, row + bk, m_new);
        block_sum = std::numeric_limits<double>::quiet_NaN();
      }
      if (m_new != m_old && m_old != neg_inf) {  // m_old = -inf: the sum and output so far are 0
        const C rescale = kernel::softmax_exp(m_old - m_new);
        w.row_sum[size_t(r)] *= double(rescale);
        C* out_row = acc + r * Dv;
        for (int64_t c = 0; c < Dv; ++c) out_row[c] *= rescale;
      }
      w.row_sum[size_t(r)] += block_sum;
      w.row_max[size_t(r)] = m_new;
    }
    accumulate_values(h, bq, j0, bk, Dv, s, acc);
  }
  if (key_end == 0) return;  // no keys: the output stays 0, as softmax over nothing times v
  for (int64_t r = 0; r < bq; ++r) {
    const C l = C(w.row_sum[size_t(r)]);
    C* out_row = acc + r * Dv;
    for (int64_t c = 0; c < Dv; ++c) out_row[c] = out_row[c] / l;
  }
}

// Computes the query block of rows [i0, i0 + kQueryBlock) of one head (see the file comment).
// S, Sk, D, Dv >= 1. Blocks write disjoint output rows, so they run on any thread in any order.
template <typename C>
void attend_block(const Head<C>& h, int64_t i0, int64_t S, int64_t Sk, int64_t D, int64_t Dv, bool causal,
                  C scale, Scratch<C>& w) {
  const int64_t bq = std::min(kQueryBlock, S - i0);
  // Packed: kPackedRows rows at a time, each over its own keys (see the file comment).
  const int64_t rows = h.packed_k ? kPackedRows : bq;
  for (int64_t r0 = i0; r0 < i0 + bq; r0 += rows)
    attend_rows(h, r0, std::min(rows, i0 + bq - r0), Sk, D, Dv, causal, scale, w);
}

// Computes attention over q, k, v stored as T (f32, f64, or bf16/f16 computed in C = f32) into a
// T output. Stored in C, the heads are read in place. Stored in bf16/f16, each task is one head:
// it widens the head's q, k and v rows into f32 buffers of its own, runs the head's query blocks
// on them and rounds the head's output rows once, as widening the whole tensors with .to(f32),
// attending in f32 and rounding the result did (the same bits), without writing and reading back
// f32 copies of q, k and v (the anchor gpt's bf16 attention: 24.4-24.9 -> 22.5-22.9 ms).
template <typename C, typename T = C>
Tensor attend(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& mask0, bool causal, double scale) {
  const Tensor q = blas_rows(q0), k = blas_rows(k0), v = blas_rows(v0);
  const int64_t S = q.size(-2), D = q.size(-1), Sk = k.size(-2), Dv = v.size(-1);
  Shape out_shape = q.shape();
  out_shape.back() = Dv;
  // No keys (or an empty head dim) gives zeros, as softmax over nothing times v did.
  if (S == 0 || Sk == 0 || D == 0 || Dv == 0 || numel(out_shape) == 0) return Tensor::zeros(out_shape, dtype_of<T>());
  const Tensor mask = additive_mask<C>(mask0, attention_scores_shape(q.shape(), k.shape()));
  Tensor out = Tensor::uninitialized(out_shape, dtype_of<T>());
  init_compute_threads();
  const int64_t batches = out.numel() / (S * Dv);
  const int64_t blocks = (S + kQueryBlock - 1) / kQueryBlock;
  // Grouped-query: task batch b = outer · Hq + h reads kv batch outer · Hkv + h / group.
  const int64_t hq = q.dim() >= 3 ? q.size(-3) : 1, hkv = k.dim() >= 3 ? k.size(-3) : 1, group = hq / hkv;
  const T* qp = static_cast<const T*>(q.raw_data());
  const T* kp = static_cast<const T*>(k.raw_data());
  const T* vp = static_cast<const T*>(v.raw_data());
  const C* mp = mask.defined() ? static_cast<const C*>(mask.raw_data()) : nullptr;
  T* op = static_cast<T*>(out.raw_data());
  const int64_t ldq = row_stride(q), ldk = row_stride(k), ldv = row_stride(v);
  const int64_t mask_ld = mp ? mask.strides()[size_t(mask.dim() - 2)] : 0, mask_col = mp ? mask.strides().back() : 0;
  const C sc = C(scale != 0 ? scale : 1.0 / std::sqrt(double(D)));
  if constexpr (!std::is_same_v<T, C>) {
    // One task per head: its rows widened once, then its query blocks.
    parallel_for(batches, 1, [&](int64_t b0, int64_t b1) {
      Scratch<C> scratch;
      std::vector<C> qh(size_t(S * D)), kh(size_t(Sk * D)), vh(size_t(Sk * Dv)), oh(size_t(S * Dv));
      // The head's packed k and v, in one buffer for all of this task's heads.
      const int64_t k_floats = PackedWeight::floats(Sk, D);
      const Tensor packs = packed_attention(S) ? Tensor::uninitialized({k_floats + PackedWeight::floats(Dv, Sk)}) : Tensor();
      // Widens `rows` rows of `cols` values, ld apart from src, into contiguous dst.
      const auto widen_rows = [](const T* src, int64_t rows, int64_t cols, int64_t ld, C* dst) {
        for (int64_t r = 0; r < rows; ++r) kernel::load_run(src + r * ld, dst + r * cols, cols);
      };
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t kb = (b / hq) * hkv + (b % hq) / group;
        widen_rows(qp + batch_offset(q, b), S, D, ldq, qh.data());
        widen_rows(kp + batch_offset(k, kb), Sk, D, ldk, kh.data());
        widen_rows(vp + batch_offset(v, kb), Sk, Dv, ldv, vh.data());
        // Packed as the f32 path packs them, so that the bits stay those of attending in f32.
        std::unique_ptr<PackedWeight> pk, pv;
        if (packed_attention(S)) {
          pk = std::make_unique<PackedWeight>(kh.data(), Sk, D, D, 1, packs.data<float>());
          pv = std::make_unique<PackedWeight>(vh.data(), Dv, Sk, 1, Dv, packs.data<float>() + k_floats);
        }
        const Head<C> h{qh.data(), kh.data(), vh.data(), oh.data(), /*ldq=*/D, /*ldk=*/D, /*ldv=*/Dv,
                        mp ? mp + batch_offset(mask, b) : nullptr, mask_ld, mask_col, pk.get(), pv.get()};
        for (int64_t blk = 0; blk < blocks; ++blk)
          attend_block(h, blk * kQueryBlock, S, Sk, D, Dv, causal, sc, scratch);
        kernel::store_run<T>(oh.data(), op + b * S * Dv, S * Dv);
      }
    });
  } else {
    // On the packed f32 GEMM path every kv head's k and v are packed once, in parallel, for all
    // the query blocks (and grouped q heads) that read them (see the file comment).
    // All heads' packed k and v share one buffer: a storage, so that a large one is recycled
    // between calls (large_block_cache.h) instead of page-faulted afresh.
    std::vector<std::unique_ptr<PackedWeight>> packed_k, packed_v;
    Tensor packs;
    if constexpr (std::is_same_v<C, float>) {
      if (packed_attention(S)) {
        const int64_t kv_batches = batches / group;
        const int64_t k_floats = PackedWeight::floats(Sk, D), head_floats = k_floats + PackedWeight::floats(Dv, Sk);
        packs = Tensor::uninitialized({kv_batches * head_floats});
        float* base = packs.data<float>();
        packed_k.resize(size_t(kv_batches));
        packed_v.resize(size_t(kv_batches));
        parallel_for(kv_batches, 1, [&](int64_t b0, int64_t b1) {
          for (int64_t kb = b0; kb < b1; ++kb) {
            float* into = base + kb * head_floats;
            packed_k[size_t(kb)] = std::make_unique<PackedWeight>(kp + batch_offset(k, kb), Sk, D, ldk, 1, into);
            packed_v[size_t(kb)] =
                std::make_unique<PackedWeight>(vp + batch_offset(v, kb), Dv, Sk, 1, ldv, into + k_floats);
          }
        });
      }
    }
    // One task per (head, query block), split over the rank's threads. Causal blocks cost in
    // proportion to their index, so tasks go out last block first (largest first) and ranges are
    // small, so that threads finishing early take the remaining small ones.
    parallel_for(
        batches * blocks, 1,
        [&](int64_t t0, int64_t t1) {
          Scratch<C> scratch;
          for (int64_t t = t0; t < t1; ++t) {
            const int64_t blk = blocks - 1 - t / batches, b = t % batches;
            const int64_t kb = (b / hq) * hkv + (b % hq) / group;
            const Head<C> h{qp + batch_offset(q, b),
                            kp + batch_offset(k, kb),
                            vp + batch_offset(v, kb),
                            op + b * S * Dv,
                            ldq,
                            ldk,
                            ldv,
                            mp ? mp + batch_offset(mask, b) : nullptr,
                            mask_ld,
                            mask_col,
                            packed_k.empty() ? nullptr : packed_k[size_t(kb)].get(),
                            packed_v.empty() ? nullptr : packed_v[size_t(kb)].get()};
            attend_block(h, blk * kQueryBlock, S, Sk, D, Dv, causal, sc, scratch);
          }
        },
        /*ranges_per_thread=*/8);
  }
  return out;
}

}  // namespace

Shape attention_scores_shape(const Shape& q, const Shape& k) {
  Shape s = q;
  if (s.size() >= 2 && !k.empty()) s.back() = k.size() >= 2 ? k[k.size() - 2] : 0;
  return s;
}

int64_t attention_kv_group(const char* op, const Shape& q, const Shape& k, const Shape& v, const Shape* mask) {
  const size_t r = q.size();
  bool ok = r >= 2 && k.size() == r && v.size() == r && k[r - 1] == q[r - 1] && v[r - 2] == k[r - 2];
  for (size_t d = 0; ok && d + 2 < r; ++d)
    ok = k[d] == v[d] && (d + 3 == r || k[d] == q[d]);
  if (!ok)
    DT_THROW(ShapeError) << op << " shapes do not agree: q " << shape_str(q) << ", k " << shape_str(k) << ", v "
                         << shape_str(v);
  int64_t group = 1;
  if (r >= 3) {
    const int64_t hq = q[r - 3], hkv = k[r - 3];
    if (hkv == 0 ? hq != 0 : hq % hkv != 0)
      DT_THROW(ShapeError) << op << ": k/v heads " << hkv << " do not divide q heads " << hq
                           << " (grouped-query attention needs Hq a multiple of Hkv): q " << shape_str(q) << ", k "
                           << shape_str(k) << ", v " << shape_str(v);
    group = hkv == 0 ? 1 : hq / hkv;
  }
  if (mask) {
    const Shape scores = attention_scores_shape(q, k);
    bool fits = mask->size() <= scores.size();
    for (size_t i = 0; fits && i < mask->size(); ++i) {
      const int64_t m = (*mask)[mask->size() - 1 - i], s = scores[scores.size() - 1 - i];
      fits = m == s || m == 1;
    }
    if (!fits)
      DT_THROW(ShapeError) << op << ": mask " << shape_str(*mask) << " does not broadcast to the scores "
                           << shape_str(scores) << " (q's leading dims, then [S, Sk])";
  }
  return group;
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opts) {
  const char* op = "scaled_dot_product_attention";
  kernel::check_same_dtype(op, q, k);
  kernel::check_same_dtype(op, q, v);
  const Tensor& mask = opts.mask;
  if (mask.defined() && mask.dtype() != DType::boolean && mask.dtype() != q.dtype())
    DT_THROW(DTypeError) << op << ": mask must be bool or q's dtype " << dtype_name(q.dtype()) << ", got "
                         << dtype_name(mask.dtype());
  attention_kv_group(op, q.shape(), k.shape(), v.shape(), mask.defined() ? &mask.shape() : nullptr);
  Tensor out;
  kernel::dispatch<kernel::kFloat>(q.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    out = attend<compute_t<T>, T>(q, k, v, mask, opts.causal, opts.scale);  // bf16/f16: in f32, rounded once
  });
  return out;
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  AttentionOptions opts;
  opts.causal = causal;
  return scaled_dot_product_attention(q, k, v, opts);
}

}  // namespace dt
