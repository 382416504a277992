// scaled_dot_product_attention's backward (ops_grad.h), one query block at a time, beside the
// forward (ops_attention.cc).
//
// For P = softmax(q·kᵀ·scale + mask) (causal: keys j > i masked) and the output gradient g:
//   dv = Pᵀ·g;  dP = g·vᵀ;  D_i = Σ_j P_ij·dP_ij;  dS = P∘(dP − D);  dq = dS·k·scale;  dk = dSᵀ·q·scale
// and, for a float mask, dscores = dS. Each head walks its query blocks of kGradQueryBlock rows in
// order. For block [i0, i0 + bq) it computes the block's scores over the keys it can see (causal:
// keys [0, min(Sk, i0 + bq)), the rest of the row is masked, so those key columns are never
// computed: about half the flops at long sequences), multiplies dP in one more GEMM, takes the
// softmax of each row exactly as dt::softmax does (row max, fast_exp, sum in double, divide),
// turns dP into dS in place (one vectorised pass per step, compiled for each CPU's vector width),
// and then
//   dv[0, key_end) += Pᵀ·g_blk,  dk[0, key_end) += dSᵀ·q_blk·scale,  dq_blk = dS·k[0, key_end)·scale
// as three GEMMs. So the only score memory is the block's P and dP, [kGradQueryBlock, Sk] each per
// thread (2 × 32 KiB at S = 256 in f32), not [S, Sk] per head, and nothing is recomputed: the
// forward's output and row statistics are not needed, since a whole block row is held at once
// (FlashAttention-2's backward tiles keys too, and so needs the forward's logsumexp or a second
// pass over the keys: 7 GEMMs instead of these 5).
//
// Worked example, causal, S = Sk = 100, kGradQueryBlock = 32: blocks [0, 32), [32, 64), [64, 96),
// [96, 100) use keys [0, 32), [0, 64), [0, 96), [0, 100): 6,544 (query, key) pairs of the 10,000
// the naive backward multiplies. Row 10 of the first block has P and dS 0 at keys 11..31.
//
// A head is one task: its blocks accumulate into its dk and dv in block order, so every sum has
// one fixed order and results do not depend on the thread count. Grouped-query k/v: q head h
// reads kv head h / (Hq / Hkv) by pointer and, when Hq > Hkv, writes its own dk and dv, which are
// then summed over each group in head order.
//
// A fully masked row (a mask can hide every key of a row) has NaN probabilities in dt::softmax, as
// in torch: its dq and dscores rows are NaN, and since its P row is NaN at every key, so is all of
// its head's dk and dv, also at the causal keys this kernel does not compute.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "dtensor/kernels/elementwise.h"
#include "dtensor/core/error.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/kernels/ops_attention_blas.h"
#include "dtensor/kernels/ops_grad.h"
#include "dtensor/core/parallel.h"
#include "dtensor/kernels/row_reduce.h"
#include "dtensor/kernels/simd_clones.h"
#include "dtensor/core/threading.h"

namespace dt {
namespace {

using namespace attention_detail;

// Query rows per block: the dk/dv GEMMs have kGradQueryBlock as their inner dimension, so a larger
// block runs them nearer the GEMM rate, while a smaller one computes fewer masked causal pairs.
// Measured on [4, 8, S, 64] (kernels_bench): 32 is as fast as 64 and 128 without a causal mask and
// the fastest with one (causal S = 256, separate runs: 12.2 ms against about 13 and 15).
// Also measured, causal S = 256 (Zen 4, one thread, OpenBLAS's Haswell kernels, old and new
// alternating, min of 4-8 runs; 11.4-11.5 ms for this kernel), none faster: query blocks of 16,
// 24 and 40 (12.4, 11.7, 11.5 ms); dk and dv as GEMMs over key blocks of 32, 64 or 128 with all
// the panel rows that see them (inner dimension up to S instead of 32, P and dS of up to 256 rows
// kept: 11.7-11.8, 11.7, 12.3-12.4 ms, query blocks 32 or 64); the softmax rows with the exp and
// its sum, the divide and D each in one loop (11.7 ms), also the scale and max (12.1 ms: the max
// no longer vectorises). In a profile the GEMM kernel is 59 % of this op, OpenBLAS packing its
// operands 18 % and the softmax rows 13 %: packing is per call, and no blocking of these shapes
// makes the calls fewer without adding masked pairs. Nor did packing k and v once per kv head for
// gemm_f32_packed (the forward's way) pay: the scores, dP and dq through gemm_f32_packed_block,
// dk and dv on sgemm, [4, 8, 256, 64] at one thread, packed vs sgemm alternating, min of 5 runs x
// 3 rounds: causal 11.6-12.6 vs 11.4-12.8 ms (short causal key ranges pad to its 64-column
// panels), not causal 17.7-18.8 vs 18.6-21.8 ms (load 1.5-4); the anchor gpt's step did not
// move beyond noise.
constexpr int64_t kGradQueryBlock = 32;

// One head's operands (row i of q is q + i * ldq, unit column stride; likewise k, v, g) and its
// contiguous gradients.
template <typename C>
struct GradHead {
  const C* q;
  const C* k;
  const C* v;
  const C* g;
  int64_t ldq, ldk, ldv, ldg;
  const C* mask = nullptr;  // additive, element (i, j) at mask + i * mask_ld + j * mask_col
  int64_t mask_ld = 0, mask_col = 0;
  C* dq;                 // [S, D], row i at dq + i * lddq
  C* dk;                 // [Sk, D], zero on entry, row j at dk + j * lddk
  C* dv;                 // [Sk, Dv], zero on entry, row j at dv + j * lddv
  int64_t lddq, lddk, lddv;
  C* dscores = nullptr;  // [S, Sk], zero on entry; null unless the mask is float
};

// Turns one block row in place from scores q·kᵀ (pr) and dP (dr) into probabilities and dS, over
// keys [0, visible) of a row of n (keys past `visible` become 0): scale, add the mask row (m: keys
// mask_col apart; null for none), then the softmax as dt::softmax computes it (row max, exp,
// sum in double, divide), D = Σ P·dP in double and dS = P·(dP − D). Returns false, leaving the
// row half done, when every key is masked (the max is -inf). Inlined into each caller's loop.
template <typename C>
[[gnu::always_inline]] inline bool softmax_grad_row(C* pr, C* dr, int64_t visible, int64_t n, C scale, const C* m,
                                                    int64_t mask_col) {
  // Scaling after the GEMM rounds the scores as the forward and the unfused kernel do.
  for (int64_t c = 0; c < visible; ++c) pr[c] = pr[c] * scale;
  if (m && mask_col == 1)
    for (int64_t c = 0; c < visible; ++c) pr[c] += m[c];
  else if (m)
    for (int64_t c = 0; c < visible; ++c) pr[c] += m[c * mask_col];
  const C mx = kernel::row_max(pr, visible);
  if (mx == -std::numeric_limits<C>::infinity()) return false;
  for (int64_t c = 0; c < visible; ++c) pr[c] = kernel::softmax_exp(pr[c] - mx);
  const C sum = C(lane_sum(pr, pr, visible, false));
  for (int64_t c = 0; c < visible; ++c) pr[c] = pr[c] / sum;
  const C d = C(lane_sum(pr, dr, visible, true));
  for (int64_t c = 0; c < visible; ++c) dr[c] = pr[c] * (dr[c] - d);
  std::fill(pr + visible, pr + n, C(0));
  std::fill(dr + visible, dr + n, C(0));
  return true;
}

// softmax_grad_row for f32, for each CPU's vector width (simd_clones.h): its loops reduce in a
// fixed lane order, so every clone computes the same bits.
DT_SIMD_CLONES bool softmax_grad_row_f32(float* pr, float* dr, int64_t visible, int64_t n, float scale, const float* m,
                                         int64_t mask_col) {
  return softmax_grad_row<float>(pr, dr, visible, n, scale, m, mask_col);
}

// Computes one head's gradients (see the file comment). S, Sk >= 1; D, Dv >= 0. p and dp hold at
// least kGradQueryBlock * Sk values.
template <typename C>
void attend_grad_head(const GradHead<C>& h, int64_t S, int64_t Sk, int64_t D, int64_t Dv, bool causal, C scale,
                      C* p, C* dp) {
  const C nan = std::numeric_limits<C>::quiet_NaN();
  bool masked_row = false;
  for (int64_t i0 = 0; i0 < S; i0 += kGradQueryBlock) {
    const int64_t bq = std::min(kGradQueryBlock, S - i0);
    const int64_t key_end = causal ? std::min(Sk, i0 + bq) : Sk;
    const C* qb = h.q + i0 * h.ldq;
    const C* gb = h.g + i0 * h.ldg;
    gemm<C>(false, true, bq, key_end, D, C(1), qb, h.ldq, h.k, h.ldk, C(0), p, key_end);
    gemm<C>(false, true, bq, key_end, Dv, C(1), gb, h.ldg, h.v, h.ldv, C(0), dp, key_end);
    for (int64_t r = 0; r < bq; ++r) {
      C* pr = p + r * key_end;
      C* dr = dp + r * key_end;
      const int64_t visible = causal ? std::min(i0 + r + 1, key_end) : key_end;
      const C* m = h.mask ? h.mask + (i0 + r) * h.mask_ld : nullptr;
      bool seen;
      if constexpr (std::is_same_v<C, float>)
        seen = softmax_grad_row_f32(pr, dr, visible, key_end, scale, m, h.mask_col);
      else
        seen = softmax_grad_row<C>(pr, dr, visible, key_end, scale, m, h.mask_col);
      if (!seen) {  // every key masked: NaN probabilities (see the file comment)
        masked_row = true;
        std::fill(pr, pr + key_end, nan);
        std::fill(dr, dr + key_end, nan);
        if (h.dscores) std::fill(h.dscores + (i0 + r) * Sk, h.dscores + (i0 + r + 1) * Sk, nan);
        continue;
      }
      if (h.dscores) std::copy(dr, dr + key_end, h.dscores + (i0 + r) * Sk);
    }
    gemm<C>(true, false, key_end, Dv, bq, C(1), p, key_end, gb, h.ldg, C(1), h.dv, h.lddv);
    gemm<C>(true, false, key_end, D, bq, scale, dp, key_end, qb, h.ldq, C(1), h.dk, h.lddk);
    gemm<C>(false, false, bq, D, key_end, scale, dp, key_end, h.k, h.ldk, C(0), h.dq + i0 * h.lddq, h.lddq);
  }
  if (masked_row)
    for (int64_t j = 0; j < Sk; ++j) {
      std::fill(h.dk + j * h.lddk, h.dk + j * h.lddk + D, nan);
      std::fill(h.dv + j * h.lddv, h.dv + j * h.lddv + Dv, nan);
    }
}

// Returns a tensor of `shape` [..., H, S, D] for a gradient written by rows: zeros when `zero`,
// laid out in memory as [..., S, H, D] (dims -3 and -2 transposed) when there is a head dim. A
// model merges the heads as transpose(1, 2) then reshape to [..., S, H·D], which on this layout is
// a view: the backward's dq, dk and dv each skipped a copy of the whole gradient there (about
// 1 ms per step of the anchor gpt). Every kernel reads strided operands, so no consumer relies on
// the usual layout.
Tensor heads_inner(const Shape& shape, DType dt, bool zero) {
  if (shape.size() < 3) return zero ? Tensor::zeros(shape, dt) : Tensor::uninitialized(shape, dt);
  Shape memory = shape;
  std::swap(memory[memory.size() - 3], memory[memory.size() - 2]);
  const Tensor t = zero ? Tensor::zeros(memory, dt) : Tensor::uninitialized(memory, dt);
  return t.transpose(int64_t(shape.size()) - 3, int64_t(shape.size()) - 2);
}

// The gradients in compute type C (f32 or f64) for operands already converted to it.
template <typename C>
AttentionGrads attend_grad(const Tensor& g0, const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& mask0,
                           bool causal, double scale, int64_t group) {
  const Tensor q = blas_rows(q0), k = blas_rows(k0), v = blas_rows(v0), g = blas_rows(g0);
  const int64_t S = q.size(-2), D = q.size(-1), Sk = k.size(-2), Dv = v.size(-1);
  const Shape scores_shape = attention_scores_shape(q.shape(), k.shape());
  const bool float_mask = mask0.defined() && mask0.dtype() != DType::boolean;
  AttentionGrads r;
  int64_t heads = 1;  // q's matrices: the product of its leading dims
  for (int64_t d = 0; d + 2 < q.dim(); ++d) heads *= q.size(d);
  // dq: zero for S or Sk = 0, else every row is written. Grouped dk and dv are sums over a group's
  // heads (below), written contiguous.
  r.dq = heads_inner(q.shape(), dtype_of<C>(), /*zero=*/S == 0 || Sk == 0 || heads == 0);
  r.dk = group == 1 ? heads_inner(k.shape(), dtype_of<C>(), /*zero=*/true) : Tensor::zeros(k.shape(), dtype_of<C>());
  r.dv = group == 1 ? heads_inner(v.shape(), dtype_of<C>(), /*zero=*/true) : Tensor::zeros(v.shape(), dtype_of<C>());
  if (float_mask) r.dscores = Tensor::zeros(scores_shape, dtype_of<C>());
  // No queries or no keys: every gradient is 0, as the unfused kernel's empty GEMMs gave.
  if (S == 0 || Sk == 0 || heads == 0) return r;
  const Tensor mask = additive_mask<C>(mask0, scores_shape);
  const int64_t hq = q.dim() >= 3 ? q.size(-3) : 1, hkv = k.dim() >= 3 ? k.size(-3) : 1;
  // Grouped: each q head writes its own dk/dv ([heads, Sk, D]), summed over each group below.
  Tensor dk_heads = group == 1 ? r.dk : Tensor::zeros({heads, Sk, D}, dtype_of<C>());
  Tensor dv_heads = group == 1 ? r.dv : Tensor::zeros({heads, Sk, Dv}, dtype_of<C>());
  const C* qp = static_cast<const C*>(q.raw_data());
  const C* kp = static_cast<const C*>(k.raw_data());
  const C* vp = static_cast<const C*>(v.raw_data());
  const C* gp = static_cast<const C*>(g.raw_data());
  const C* mp = mask.defined() ? static_cast<const C*>(mask.raw_data()) : nullptr;
  C* dqp = static_cast<C*>(r.dq.raw_data());
  C* dkp = static_cast<C*>(dk_heads.raw_data());
  C* dvp = static_cast<C*>(dv_heads.raw_data());
  C* dsp = float_mask ? static_cast<C*>(r.dscores.raw_data()) : nullptr;
  const int64_t ldq = row_stride(q), ldk = row_stride(k), ldv = row_stride(v), ldg = row_stride(g);
  const int64_t mask_ld = mp ? mask.strides()[size_t(mask.dim() - 2)] : 0, mask_col = mp ? mask.strides().back() : 0;
  const C sc = C(scale != 0 ? scale : D > 0 ? 1.0 / std::sqrt(double(D)) : 1.0);
  init_compute_threads();
  // One task per q head; heads cost the same, so one range per thread.
  parallel_for(heads, 1, [&](int64_t b0, int64_t b1) {
    std::vector<C> p(size_t(kGradQueryBlock * Sk)), dp(size_t(kGradQueryBlock * Sk));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t kb = (b / hq) * hkv + (b % hq) / group;
      GradHead<C> h{.q = qp + batch_offset(q, b),
                    .k = kp + batch_offset(k, kb),
                    .v = vp + batch_offset(v, kb),
                    .g = gp + batch_offset(g, b),
                    .ldq = ldq,
                    .ldk = ldk,
                    .ldv = ldv,
                    .ldg = ldg,
                    .mask = mp ? mp + batch_offset(mask, b) : nullptr,
                    .mask_ld = mask_ld,
                    .mask_col = mask_col,
                    .dq = dqp + batch_offset(r.dq, b),
                    .dk = dkp + batch_offset(dk_heads, b),
                    .dv = dvp + batch_offset(dv_heads, b),
                    .lddq = row_stride(r.dq),
                    .lddk = row_stride(dk_heads),
                    .lddv = row_stride(dv_heads),
                    .dscores = dsp ? dsp + b * S * Sk : nullptr};
      attend_grad_head(h, S, Sk, D, Dv, causal, sc, p.data(), dp.data());
    }
  });
  if (group > 1) {  // kv head kb sums q heads kb·group + 0, 1, ... in order, in double
    auto sum_groups = [&](const C* src, C* dst, int64_t n) {
      parallel_for(heads / group, 1, [&](int64_t c0, int64_t c1) {
        for (int64_t kb = c0; kb < c1; ++kb)
          for (int64_t i = 0; i < n; ++i) {
            double s = 0;
            for (int64_t j = 0; j < group; ++j) s += double(src[(kb * group + j) * n + i]);
            dst[kb * n + i] = C(s);
          }
      });
    };
    sum_groups(dkp, static_cast<C*>(r.dk.raw_data()), Sk * D);
    sum_groups(dvp, static_cast<C*>(r.dv.raw_data()), Sk * Dv);
  }
  return r;
}

}  // namespace

AttentionGrads scaled_dot_product_attention_backward(const Tensor& grad, const Tensor& q, const Tensor& k,
                                                     const Tensor& v, const AttentionOptions& opts) {
  const char* op = "scaled_dot_product_attention_backward";
  const Tensor& mask = opts.mask;
  const int64_t group =
      attention_kv_group(op, q.shape(), k.shape(), v.shape(), mask.defined() ? &mask.shape() : nullptr);
  Shape out_shape = q.shape();
  out_shape.back() = v.size(-1);
  if (grad.shape() != out_shape)
    DT_THROW(ShapeError) << op << ": grad " << shape_str(grad.shape()) << " does not match the output "
                         << shape_str(out_shape);
  AttentionGrads r;
  kernel::dispatch<kernel::kFloat>(q.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;  // f32 for bf16/f16: compute in f32, round once at the end
    const DType ct = dtype_of<C>();
    r = attend_grad<C>(grad.to(ct), q.to(ct), k.to(ct), v.to(ct), mask, opts.causal, opts.scale, group);
  });
  r.dq = r.dq.to(q.dtype());
  r.dk = r.dk.to(k.dtype());
  r.dv = r.dv.to(v.dtype());
  if (r.dscores.defined()) r.dscores = r.dscores.to(q.dtype());
  return r;
}

AttentionGrads scaled_dot_product_attention_backward(const Tensor& grad, const Tensor& q, const Tensor& k,
                                                     const Tensor& v, bool causal) {
  AttentionOptions opts;
  opts.causal = causal;
  return scaled_dot_product_attention_backward(grad, q, k, v, opts);
}

}  // namespace dt
