// The matmul family (mm, bmm, matmul, addmm, linear) on top of one strided GEMM through OpenBLAS.
//
// gemm() takes 2-d operands in any layout: a row-major view (unit column stride) is passed as is,
// a plain transpose (unit row stride) with the transposed flag, anything else (expanded, sliced
// with steps) is first copied contiguous. f32/f64 call cblas_sgemm/cblas_dgemm; bf16 operands go
// to the vdpbf16ps kernel (gemm_bf16_dot.h) or are widened to f32 for sgemm, f16 operands are
// widened; either way the result is rounded once on store (bf16: gemm_bf16 below). With one BLAS thread
// (threading.h) OpenBLAS's result depends only on the operands and shapes, so results are
// bitwise reproducible and ranks calling concurrently do not interfere.
#include <cblas.h>

#include <limits>
#include <optional>
#include <vector>

#include "dtensor/core/bf16_rows.h"
#include "dtensor/kernels/elementwise.h"
#include "dtensor/kernels/gemm_bf16_dot.h"
#include "dtensor/kernels/gemm_f32_packed.h"
#include "dtensor/kernels/gemm_panels.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/core/parallel.h"
#include "dtensor/core/threading.h"

namespace dt {

namespace {

// How a 2-d strided operand is handed to BLAS (row-major convention).
struct BlasOperand {
  CBLAS_TRANSPOSE trans;
  int64_t ld;
};

// Returns the BLAS form of a [rows, cols] view with strides (rs, cs) if it has one.
std::optional<BlasOperand> blas_operand(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  // A size-1 dim's stride is irrelevant; pick the value that makes the layout valid.
  if (cols == 1) cs = 1;
  if (rows == 1) rs = std::max<int64_t>(cols, 1);
  if (cs == 1 && rs >= std::max<int64_t>(cols, 1)) return BlasOperand{CblasNoTrans, rs};
  if (rs == 1 && cs >= std::max<int64_t>(rows, 1)) return BlasOperand{CblasTrans, cs};
  return std::nullopt;
}

// Returns a 2-d operand BLAS accepts: the view itself or a contiguous copy.
std::pair<Tensor, BlasOperand> as_blas(const Tensor& t) {
  if (auto op = blas_operand(t.shape()[0], t.shape()[1], t.strides()[0], t.strides()[1])) return {t, *op};
  Tensor c = t.contiguous();
  return {c, BlasOperand{CblasNoTrans, std::max<int64_t>(c.shape()[1], 1)}};
}

// A gemm epilogue's second operand: contiguous [m, n] f32 rows and the op applied with them.
struct PanelOperand {
  const float* data = nullptr;  // null: none
  EpilogueOp op = EpilogueOp::mul;
};

// gemm's b as a linear's weight, b = weight.transpose(0, 1): `packed` is the weight's packed copy
// (the interpreter's, runtime/packed_weights.h), or null. Not a linear (matmul, mm): sgemm.
struct LinearWeight {
  bool linear = false;
  const PackedWeight* packed = nullptr;
};

// Computes c = act(alpha * a @ b + beta * init) for 2-d a [m,k], b [k,n] and a c [m,n] with
// contiguous rows (row stride ldc >= n: contiguous, or a block of columns of a wider buffer),
// all of the same floating dtype T in {float, double}, or bf16 a and b with an f32 c (multiplied by
// gemm_bf16_dot; the caller checked the CPU has it); `init` ([m, n], any layout and dtype) is
// read only when beta != 0 (undefined: c's own contents are the seed). Each row panel is seeded from init, multiplied and activated in turn
// (the epilogue), so the output is visited once while in cache rather than once per step. act is
// none unless T is float. With `round_to` (T float only), each finished row panel is also rounded
// into round_to's [m, n] bf16 rows while in cache; an activation then applies to the rounded values
// and rounds again, exactly as a bf16 linear followed by the bf16 activation op would. With
// `other` (T float only, contiguous [m, n]), each activated panel is then multiplied by, or added
// to, its rows.
// With `weight` a linear's (b is its weight's W^T; T float, f32 operands), a row-major a
// multiplies through gemm_f32_packed against weight.packed, or on the packed path
// (f32_packed_linears) through gemm_f32_packing when there is no packed copy.
template <typename T>
void gemm(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& init, double alpha, double beta,
          Activation act, bf16* round_to = nullptr, PanelOperand other = {}, LinearWeight weight = {}) {
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  if (m == 0 || n == 0) return;
  DT_CHECK(((act == Activation::none && !round_to && !other.data) || std::is_same_v<T, float>))
      << "gemm epilogue on a non-f32 output";
  T* cp = static_cast<T*>(c.raw_data());
  const int64_t ldc = c.strides()[0];
  // The epilogue walks whole panels as one run of values: it needs contiguous rows.
  DT_CHECK(c.strides()[1] == 1 && ldc >= n && (ldc == n || (act == Activation::none && !round_to && !other.data)))
      << "gemm output with strides " << shape_str(c.strides()) << " for " << m << " x " << n;
  const bool seed = init.defined() && beta != 0;
  // Rows [r0, r1) of c = rows of init (a nested copy_ runs on this thread).
  auto seed_rows = [&](int64_t r0, int64_t r1) {
    if (seed) c.narrow(0, r0, r1 - r0).copy_(init.narrow(0, r0, r1 - r0));
  };
  auto epilogue = [&](int64_t r0, int64_t r1) {
    if constexpr (std::is_same_v<T, float>) {
      float* p = cp + r0 * n;
      const int64_t len = (r1 - r0) * n;
      if (round_to && act != Activation::none) round_through_bf16(p, len);
      apply_activation(act, p, len);
      // The mul or add op's result (both commutative: the same bits in either operand order).
      if (const float* o = other.data; o && other.op == EpilogueOp::mul)
        for (int64_t i = 0; i < len; ++i) p[i] = p[i] * o[r0 * n + i];
      else if (o)
        for (int64_t i = 0; i < len; ++i) p[i] = p[i] + o[r0 * n + i];
      if (round_to) narrow_to_bf16(p, round_to + r0 * n, len);
    }
  };
  if (k == 0) {  // empty sum: c = beta * c (beta == 0 ignores c, as BLAS does)
    seed_rows(0, m);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) cp[i * ldc + j] = beta == 0 ? T(0) : T(beta) * cp[i * ldc + j];
    epilogue(0, m);
    return;
  }
  init_compute_threads();
  // Named references, not structured bindings: the panel lambda captures them, which clang 14
  // (make fuzz) does not allow for bindings.
  const auto a_blas = as_blas(a), b_blas = as_blas(b);
  const Tensor& av = std::get<0>(a_blas);
  const Tensor& bv = std::get<0>(b_blas);
  const auto& ao = std::get<1>(a_blas);
  const auto& bo = std::get<1>(b_blas);
  for (int64_t v : {m, n, k, ao.ld, bo.ld, ldc})
    if (v > std::numeric_limits<blasint>::max())
      DT_THROW(ValueError) << "gemm size " << v << " exceeds the BLAS integer range";
  const bool bf16_dot = a.dtype() == DType::bf16;
  const PackedWeight* packed = weight.packed;
  DT_CHECK(!packed || (!bf16_dot && packed->k() == k && packed->n() == n))
      << "packed weight " << packed->n() << " x " << packed->k() << " for a gemm of " << m << " x " << k << " x " << n;
  // A linear's weight without a packed copy, packed block by block during the call: the same bits
  // as against the copy, so how a weight was passed (a file's bytes, packed once, or writable
  // memory) never changes a result.
  const bool packing = !packed && !bf16_dot && weight.linear && std::is_same_v<T, float> && f32_packed_linears();
  DT_CHECK(bf16_dot == (b.dtype() == DType::bf16) && (bf16_dot || a.dtype() == c.dtype()))
      << "gemm of " << dtype_name(a.dtype()) << " and " << dtype_name(b.dtype()) << " into " << dtype_name(c.dtype());
  const T* ap = static_cast<const T*>(av.raw_data());
  const T* bp = static_cast<const T*>(bv.raw_data());
  // Rows [r0, r1) of C from the same rows of A (row-major; a transposed A stores element (i, j)
  // at i + j * ld).
  auto panel = [&](int64_t r0, int64_t r1) {
    seed_rows(r0, r1);
    const int64_t a_offset = ao.trans == CblasNoTrans ? r0 * ao.ld : r0;
    if constexpr (std::is_same_v<T, float>) {
      if (bf16_dot) {
        // The (row, column) strides of a BLAS operand.
        const auto strides = [](const BlasOperand& o) {
          return o.trans == CblasNoTrans ? std::pair<int64_t, int64_t>{o.ld, 1} : std::pair<int64_t, int64_t>{1, o.ld};
        };
        const auto [a_rs, a_cs] = strides(ao);
        const auto [b_rs, b_cs] = strides(bo);
        gemm_bf16_dot(r1 - r0, n, k, float(alpha), static_cast<const bf16*>(av.raw_data()) + a_offset, a_rs, a_cs,
                      static_cast<const bf16*>(bv.raw_data()), b_rs, b_cs, float(beta), cp + r0 * ldc, ldc);
        epilogue(r0, r1);
        return;
      }
      if (packed && ao.trans == CblasNoTrans) {
        gemm_f32_packed(r1 - r0, float(alpha), ap + a_offset, ao.ld, *packed, float(beta), cp + r0 * ldc, ldc);
        epilogue(r0, r1);
        return;
      }
      if (packing && ao.trans == CblasNoTrans) {
        // b = Wᵀ: W's element (j, p) is b's (p, j).
        const bool b_rows = bo.trans == CblasNoTrans;
        gemm_f32_packing(r1 - r0, float(alpha), ap + a_offset, ao.ld, bp, n, k, b_rows ? 1 : bo.ld, b_rows ? bo.ld : 1,
                         float(beta), cp + r0 * ldc, ldc);
        epilogue(r0, r1);
        return;
      }
      cblas_sgemm(CblasRowMajor, ao.trans, bo.trans, blasint(r1 - r0), blasint(n), blasint(k), float(alpha), ap + a_offset,
                  blasint(ao.ld), bp, blasint(bo.ld), float(beta), cp + r0 * ldc, blasint(ldc));
    } else {
      cblas_dgemm(CblasRowMajor, ao.trans, bo.trans, blasint(r1 - r0), blasint(n), blasint(k), alpha, ap + a_offset,
                  blasint(ao.ld), bp, blasint(bo.ld), beta, cp + r0 * ldc, blasint(ldc));
    }
    epilogue(r0, r1);
  };
  // On the rank's threads (parallel.h) C is split into row panels of whole kGemmPanelQuantum
  // multiples (the last unit takes the remainder, so no panel is a small ragged tail). K is never
  // split, and each panel tiles its rows as the whole call would, so each element of C is the same
  // dot product whichever panel holds it (parallel_test checks it). C is never split by columns:
  // with Debian's OpenBLAS, splitting the columns of a 128-row product changed results at every
  // split point tried (multiples of 8 to 480), so a GEMM with fewer than two panels of rows
  // (decode) runs on one thread. The panel count is fixed here, at most the rank's threads and each
  // panel at least `grain` units; parallel_for then hands out whole panels.
  const int64_t q = kGemmPanelQuantum, units = std::max<int64_t>(1, m / q);
  const int64_t grain = std::max<int64_t>(1, kGemmPanelFlops / std::max<int64_t>(2 * n * k * q, 1));
  const int64_t panels = std::min<int64_t>(units / grain, threads_per_rank());
  if (panels <= 1) {
    panel(0, m);
    return;
  }
  // Panel p starts at the unit nearest to row m·p/panels, so the ragged rows are shared out with
  // the rest: whole units split evenly left them all to the last panel (1024 rows on 2 threads:
  // 480 + 544, the slower half 6 % over m/2; now 528 + 496). When rounding would leave a panel
  // under `grain` units, the edges fall back to whole units split evenly.
  std::vector<int64_t> edge(size_t(panels) + 1, units);
  for (int64_t p = 0; p < panels; ++p) edge[size_t(p)] = std::min(units, (2 * m * p + panels * q) / (2 * panels * q));
  for (int64_t p = 0; p < panels; ++p)
    if (edge[size_t(p) + 1] - edge[size_t(p)] < grain) {
      for (int64_t e = 0; e < panels; ++e) edge[size_t(e)] = units * e / panels;
      break;
    }
  auto unit_row = [&](int64_t u) { return u == units ? m : u * q; };
  parallel_for(panels, 1, [&](int64_t p0, int64_t p1) {
    panel(unit_row(edge[size_t(p0)]), unit_row(edge[size_t(p1)]));
  });
}

// bf16 GEMM. The widened operands and the f32 product live in scratch buffers of the calling
// thread, kept between calls: fresh multi-MB buffers cost a page fault per 4 KiB touched (a sixth
// of the bf16 gpt forward's time went to the kernel zeroing pages). They hold at most the largest
// GEMM's operands and product in f32 (32 MB per thread for the anchor gpt's lm_head).
struct Bf16Scratch {
  std::shared_ptr<Storage> slot[3];
  // Returns a contiguous f32 tensor of `shape` over slot i (grown when too small). Valid until the
  // next call with the same i on this thread.
  Tensor get(int i, const Shape& shape) {
    const size_t bytes = size_t(std::max<int64_t>(numel(shape), 1)) * sizeof(float);
    if (!slot[i] || slot[i]->nbytes() < bytes) slot[i] = Storage::allocate_uninitialized(bytes);
    return Tensor::from_storage(slot[i], DType::f32, shape, contiguous_strides(shape), 0);
  }
};
thread_local Bf16Scratch g_bf16_scratch;

// Returns the 2-d bf16 view t widened to f32 in scratch slot i, in a layout BLAS reads in place:
// row-major rows stay rows, a transposed view (a linear's weight.T) stays a transposed view of
// its widened storage, anything else is widened from a contiguous copy.
Tensor widen_operand(const Tensor& t, int i) {
  const int64_t rows = t.shape()[0], cols = t.shape()[1];
  const auto op = blas_operand(rows, cols, t.strides()[0], t.strides()[1]);
  const Tensor v = op ? t : t.contiguous();
  const bool trans = op && op->trans == CblasTrans;
  const int64_t ld = op ? op->ld : cols;
  // The stored matrix: [rows, cols] row-major, or [cols, rows] when transposed; ld apart.
  const int64_t outer = trans ? cols : rows, inner = trans ? rows : cols;
  Tensor w = g_bf16_scratch.get(i, {outer, inner});
  const bf16* src = static_cast<const bf16*>(v.raw_data());
  float* dst = static_cast<float*>(w.raw_data());
  for (int64_t r = 0; r < outer; ++r) widen_bf16(src + r * ld, dst + r * inner, inner);
  return trans ? w.transpose(0, 1) : w;
}

// act(alpha * a @ b + beta * init) for 2-d bf16 a and b, rounded once to bf16. The products of
// bf16 values are exact in f32 and the sum accumulates in f32, as PyTorch's CPU bf16 matmul does,
// by one of two paths (bf16_gemm_path):
//  - dot: a pair dot product on the bf16 operands, gemm_bf16_dot.h: AMX's tdpbf16ps where the CPU
//    has it (Sapphire Rapids: the bf16 gpt forward at one thread 84 ms against 252 in f32, bench
//    model --bf16), else AVX512-BF16's vdpbf16ps. On the AMD EPYC host (Zen 4) vdpbf16ps retires at
//    twice the f32 FMA rate, 234 vs 117 GFLOP/s (kernels_bench BM_PeakBf16Dot / BM_PeakF32Fma).
//  - widen: sgemm on the operands widened to f32. On the earlier Xeon host (AVX512-BF16, no AMX
//    exposed) vdpbf16ps retires at half the f32 FMA rate, 86 vs 175 GFLOP/s, so this is the faster
//    bf16 GEMM there, and the only one on CPUs without AVX512-BF16. Debian's OpenBLAS 0.3.21
//    declares cblas_sbgemm but is built without it.
Tensor gemm_bf16(const Tensor& a, const Tensor& b, const Tensor& init, double alpha, double beta, Activation act) {
  const int64_t m = a.shape()[0], n = b.shape()[1];
  Tensor out = Tensor::uninitialized({m, n}, DType::bf16);
  if (m == 0 || n == 0) return out;
  const bool dot = bf16_gemm_path() == Bf16GemmPath::dot;
  const Tensor aw = dot ? a : widen_operand(a, 0), bw = dot ? b : widen_operand(b, 1);
  // A bias (a row expanded over m) is widened once; other seeds are read through copy_.
  Tensor seed = init;
  if (init.defined() && beta != 0 && init.strides()[0] == 0 && init.strides()[1] == 1)
    seed = init.narrow(0, 0, 1).to(DType::f32).expand({m, n});
  gemm<float>(aw, bw, g_bf16_scratch.get(2, {m, n}), seed, alpha, beta, act, static_cast<bf16*>(out.raw_data()));
  return out;
}

// The dtype a GEMM runs in for operands of dtype t (f32 for bf16/f16).
DType gemm_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// Computes act(alpha * a @ b + beta * init) for 2-d a, b (dtype checked by the caller) and returns
// it in a's dtype. `init` (already [m, n], any layout, or undefined when beta == 0) seeds the
// output. act must be none unless a is f32. `weight` (b as a linear's weight, gemm) is used when
// a and b are f32.
Tensor gemm_2d(const Tensor& a, const Tensor& b, const Tensor& init, double alpha, double beta,
               Activation act = Activation::none, LinearWeight weight = {}) {
  if (a.dtype() == DType::bf16) return gemm_bf16(a, b, init, alpha, beta, act);
  const DType dt = a.dtype(), gt = gemm_dtype(dt);
  const int64_t m = a.shape()[0], n = b.shape()[1];
  Tensor c = Tensor::uninitialized({m, n}, gt);
  const Tensor ag = a.dtype() == gt ? a : a.to(gt);
  const Tensor bg = b.dtype() == gt ? b : b.to(gt);
  if (gt == DType::f32)
    gemm<float>(ag, bg, c, init, alpha, beta, act, nullptr, {}, dt == gt && b.dtype() == gt ? weight : LinearWeight{});
  else
    gemm<double>(ag, bg, c, init, alpha, beta, act);
  return dt == gt ? c : c.to(dt);
}

void check_floating(const char* op, const Tensor& a, const Tensor& b) {
  kernel::check_same_dtype(op, a, b);
  if (!is_floating(a.dtype())) DT_THROW(DTypeError) << op << " does not support dtype " << dtype_name(a.dtype());
}

[[noreturn]] void throw_inner_mismatch(const char* op, const Tensor& a, const Tensor& b, int64_t ka, int64_t kb) {
  DT_THROW(ShapeError) << op << ": shapes " << shape_str(a.shape()) << " and " << shape_str(b.shape())
                       << " cannot be multiplied (" << ka << " != " << kb << ")";
}

void check_rank(const char* op, const char* which, const Tensor& t, int64_t rank) {
  if (t.dim() != rank)
    DT_THROW(ShapeError) << op << ": " << which << " must be " << rank << "-d, got shape " << shape_str(t.shape());
}

// Returns the matrix product of every batch of a [B..., m, k] and b [B..., k, n] whose batch dims
// already agree, as a contiguous [B..., m, n] tensor in a's dtype. Broadcast batch dims may be
// expanded views (stride 0): each batch reads its 2-d views in place.
Tensor batched(const Tensor& a, const Tensor& b) {
  const DType dt = a.dtype(), gt = gemm_dtype(dt);
  const int64_t r = a.dim();
  const Shape batch(a.shape().begin(), a.shape().end() - 2);
  const int64_t m = a.shape()[size_t(r - 2)], n = b.shape()[size_t(r - 1)];
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor out = Tensor::uninitialized(out_shape, gt);
  const int64_t B = numel(batch);
  if (B > 0 && m > 0 && n > 0) {
    // Walk the batch index in row-major order; each step multiplies two 2-d views straight into
    // the (contiguous) output slice.
    std::vector<int64_t> idx(batch.size(), 0);
    for (int64_t i = 0; i < B; ++i) {
      Tensor ai = a, bi = b, oi = out;
      for (size_t d = 0; d < batch.size(); ++d) {
        ai = ai.select(0, idx[d]);
        bi = bi.select(0, idx[d]);
        oi = oi.select(0, idx[d]);
      }
      if (gt == DType::f32)
        gemm<float>(ai.to(gt), bi.to(gt), oi, Tensor(), 1, 0, Activation::none);
      else
        gemm<double>(ai, bi, oi, Tensor(), 1, 0, Activation::none);
      for (size_t d = batch.size(); d-- > 0;) {
        if (++idx[d] < batch[d]) break;
        idx[d] = 0;
      }
    }
  }
  return dt == gt ? out : out.to(dt);
}

// Returns t viewed (or copied) as a 2-d [rows, last dim] matrix.
Tensor fold_to_2d(const Tensor& t) {
  const int64_t cols = t.shape().back();
  const int64_t rows = numel(Shape(t.shape().begin(), t.shape().end() - 1));
  return t.reshape({rows, cols});
}

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  check_rank("mm", "first operand", a, 2);
  check_rank("mm", "second operand", b, 2);
  check_floating("mm", a, b);
  if (a.shape()[1] != b.shape()[0]) throw_inner_mismatch("mm", a, b, a.shape()[1], b.shape()[0]);
  return gemm_2d(a, b, Tensor(), 1, 0);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_rank("bmm", "first operand", a, 3);
  check_rank("bmm", "second operand", b, 3);
  check_floating("bmm", a, b);
  if (a.shape()[0] != b.shape()[0])
    DT_THROW(ShapeError) << "bmm: batch sizes of " << shape_str(a.shape()) << " and " << shape_str(b.shape())
                         << " differ (" << a.shape()[0] << " != " << b.shape()[0] << ")";
  if (a.shape()[2] != b.shape()[1]) throw_inner_mismatch("bmm", a, b, a.shape()[2], b.shape()[1]);
  return batched(a, b);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (a.dim() == 0 || b.dim() == 0)
    DT_THROW(ShapeError) << "matmul: both operands need at least 1 dim, got shapes " << shape_str(a.shape())
                         << " and " << shape_str(b.shape());
  check_floating("matmul", a, b);
  const int64_t ka = a.shape().back();
  const int64_t kb = b.dim() == 1 ? b.shape()[0] : b.shape()[size_t(b.dim() - 2)];
  if (ka != kb) throw_inner_mismatch("matmul", a, b, ka, kb);
  // 1-d operands become a row (a) or a column (b) matrix; that dim is dropped from the result.
  if (a.dim() <= 2 && b.dim() <= 2) {
    Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
    Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
    Tensor c = gemm_2d(a2, b2, Tensor(), 1, 0);
    if (b.dim() == 1) c = c.squeeze(1);
    if (a.dim() == 1) c = c.squeeze(0);
    return c;
  }
  if (b.dim() <= 2) {
    // [..., m, k] @ [k, n]: fold the batch into m (one GEMM instead of one per batch).
    Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
    Shape out_shape(a.shape().begin(), a.shape().end() - 1);
    if (b.dim() == 2) out_shape.push_back(b.shape()[1]);
    return gemm_2d(fold_to_2d(a), b2, Tensor(), 1, 0).view(out_shape);
  }
  // Batch broadcasting: a [A..., m, k], b [B..., k, n] -> [broadcast(A, B)..., m, n].
  Tensor a3 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Shape abatch(a3.shape().begin(), a3.shape().end() - 2);
  const Shape bbatch(b.shape().begin(), b.shape().end() - 2);
  Shape batch = kernel::broadcast_for("matmul", abatch, bbatch);
  Shape ae = batch, be = batch;
  ae.insert(ae.end(), a3.shape().end() - 2, a3.shape().end());
  be.insert(be.end(), b.shape().end() - 2, b.shape().end());
  Tensor c = batched(a3.expand(ae), b.expand(be));
  if (a.dim() == 1) c = c.squeeze(-2);
  return c;
}

Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, double beta, double alpha) {
  check_rank("addmm", "first matrix", a, 2);
  check_rank("addmm", "second matrix", b, 2);
  check_floating("addmm", a, b);
  kernel::check_same_dtype("addmm", self, a);
  if (a.shape()[1] != b.shape()[0]) throw_inner_mismatch("addmm", a, b, a.shape()[1], b.shape()[0]);
  const Shape out_shape{a.shape()[0], b.shape()[1]};
  if (kernel::broadcast_for("addmm", self.shape(), out_shape) != out_shape)
    DT_THROW(ShapeError) << "addmm: self of shape " << shape_str(self.shape()) << " does not broadcast to "
                         << shape_str(out_shape);
  return gemm_2d(a, b, self.expand(out_shape), alpha, beta);
}

void gemm_into(const Tensor& a, const Tensor& b, const Tensor& c, double beta) {
  check_rank("gemm_into", "first operand", a, 2);
  check_rank("gemm_into", "second operand", b, 2);
  check_floating("gemm_into", a, b);
  kernel::check_same_dtype("gemm_into", a, c);
  if (a.shape()[1] != b.shape()[0]) throw_inner_mismatch("gemm_into", a, b, a.shape()[1], b.shape()[0]);
  DT_CHECK(c.is_contiguous() && c.shape() == (Shape{a.shape()[0], b.shape()[1]}) && gemm_dtype(c.dtype()) == c.dtype())
      << "gemm_into output " << shape_str(c.shape()) << " is not a contiguous f32/f64 [m, n]";
  // An undefined init with beta != 0 makes BLAS read c itself as the seed.
  if (c.dtype() == DType::f32) gemm<float>(a, b, c, Tensor(), 1, beta, Activation::none);
  else gemm<double>(a, b, c, Tensor(), 1, beta, Activation::none);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_act(x, weight, bias, Activation::none);
}

Tensor linear_binary(const Tensor& x, const Tensor& weight, const Tensor& bias, EpilogueOp op, const Tensor& other,
                     const PackedWeight* packed) {
  const char* name = op == EpilogueOp::mul ? "linear_mul" : "linear_add";
  if (x.dtype() != DType::f32 || weight.dtype() != DType::f32 || other.dtype() != DType::f32 ||
      (bias.defined() && bias.dtype() != DType::f32))
    DT_THROW(DTypeError) << name << ": a linear with a fused product or sum supports f32 only";
  check_rank("linear", "weight", weight, 2);
  Shape out_shape(x.shape().begin(), x.shape().end() - (x.dim() > 0 ? 1 : 0));
  out_shape.push_back(weight.shape()[0]);
  if (x.dim() == 0 || x.shape().back() != weight.shape()[1] || other.shape() != out_shape ||
      (bias.defined() && bias.shape() != Shape{weight.shape()[0]}))
    DT_THROW(ShapeError) << name << ": x " << shape_str(x.shape()) << ", weight " << shape_str(weight.shape())
                         << (bias.defined() ? ", bias " + shape_str(bias.shape()) : std::string()) << " and other "
                         << shape_str(other.shape()) << " do not match";
  const Tensor x2 = fold_to_2d(x), o = other.contiguous();
  const int64_t m = x2.shape()[0], n = weight.shape()[0];
  Tensor c = Tensor::uninitialized({m, n}, DType::f32);
  const Tensor init = bias.defined() ? bias.expand({m, n}) : Tensor();
  gemm<float>(x2, weight.transpose(0, 1), c, init, 1, bias.defined() ? 1 : 0, Activation::none, nullptr,
              {o.data<float>(), op}, {true, packed});
  return c.view(other.shape());
}

Tensor linear_act(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act) {
  return linear_act(x, weight, bias, act, nullptr);
}

void linear_into(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& out,
                 const PackedWeight* packed) {
  check_rank("linear", "weight", weight, 2);
  check_floating("linear", x, weight);
  kernel::check_same_dtype("linear", x, out);
  if (x.dtype() != DType::f32 && x.dtype() != DType::f64)
    DT_THROW(DTypeError) << "linear into a strided output supports f32 and f64 only, got " << dtype_name(x.dtype());
  Shape want(x.shape().begin(), x.shape().end() - (x.dim() > 0 ? 1 : 0));
  want.push_back(weight.shape()[0]);
  if (x.dim() == 0 || x.shape().back() != weight.shape()[1] || out.shape() != want ||
      (bias.defined() && bias.shape() != Shape{weight.shape()[0]}))
    DT_THROW(ShapeError) << "linear_into: x " << shape_str(x.shape()) << ", weight " << shape_str(weight.shape())
                         << (bias.defined() ? ", bias " + shape_str(bias.shape()) : std::string())
                         << " do not give out " << shape_str(out.shape());
  if (bias.defined()) kernel::check_same_dtype("linear", x, bias);
  // out's leading dims must fold into rows one stride apart, each row contiguous.
  const int64_t d = out.dim(), n = want.back(), m = n == 0 ? 0 : out.numel() / n;
  bool folds = out.strides()[size_t(d - 1)] == 1;
  for (int64_t i = d - 3; i >= 0 && folds; --i)
    folds = out.shape()[size_t(i)] == 1 ||
            out.strides()[size_t(i)] == out.strides()[size_t(i + 1)] * out.shape()[size_t(i + 1)];
  const int64_t ldc = d >= 2 ? out.strides()[size_t(d - 2)] : n;
  if (!folds || ldc < n)
    DT_THROW(ValueError) << "linear_into: out of shape " << shape_str(out.shape()) << " and strides "
                         << shape_str(out.strides()) << " is not rows of contiguous values one stride apart";
  if (m == 0 || n == 0) return;
  const Tensor c = Tensor::from_storage(out.storage(), out.dtype(), {m, n}, {ldc, 1}, out.offset());
  const Tensor x2 = fold_to_2d(x), init = bias.defined() ? bias.expand({m, n}) : Tensor();
  if (x.dtype() == DType::f32)
    gemm<float>(x2, weight.transpose(0, 1), c, init, 1, bias.defined() ? 1 : 0, Activation::none, nullptr, {},
                {true, packed});
  else
    gemm<double>(x2, weight.transpose(0, 1), c, init, 1, bias.defined() ? 1 : 0, Activation::none);
}

Tensor linear_act(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act, const PackedWeight* packed) {
  check_rank("linear", "weight", weight, 2);
  check_floating("linear", x, weight);
  if (x.dim() == 0) DT_THROW(ShapeError) << "linear: input must have at least 1 dim, got a scalar";
  const int64_t in = weight.shape()[1], out = weight.shape()[0];
  if (x.shape().back() != in)
    DT_THROW(ShapeError) << "linear: input " << shape_str(x.shape()) << " and weight " << shape_str(weight.shape())
                         << " do not match (in_features " << x.shape().back() << " != " << in << ")";
  if (bias.defined()) {
    kernel::check_same_dtype("linear", x, bias);
    if (bias.shape() != Shape{out})
      DT_THROW(ShapeError) << "linear: bias of shape " << shape_str(bias.shape()) << " does not match out_features "
                           << out;
  }
  Shape out_shape(x.shape().begin(), x.shape().end() - 1);
  out_shape.push_back(out);
  Tensor x2 = fold_to_2d(x);
  // weight.T is a plain transpose: BLAS reads it in place with the transposed flag.
  Tensor init = bias.defined() ? bias.expand({x2.shape()[0], out}) : Tensor();
  if (act != Activation::none && x.dtype() != DType::f32 && x.dtype() != DType::bf16)
    DT_THROW(DTypeError) << "linear with a fused activation supports f32 and bf16 only, got " << dtype_name(x.dtype());
  return gemm_2d(x2, weight.transpose(0, 1), init, 1, bias.defined() ? 1 : 0, act, {true, packed}).view(out_shape);
}

}  // namespace dt
