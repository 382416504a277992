// Reductions over dims (sum, mean, amax, amin) with keepdim.
//
// The reduction order is fixed by the shape alone, never by timing or alignment, so results are
// bitwise identical run to run. Three layouts:
//   rows:    x contiguous and the reduced dims are the trailing ones: each output reduces one
//            contiguous row, in 8 interleaved lanes (element i goes to lane i % 8) that are then
//            combined in lane order; the lanes let the compiler vectorise without reassociating.
//   columns: x contiguous and the reduced dims are the leading ones: output j accumulates
//            x[r, j] for r = 0, 1, ... (vectorised across j).
//   other:   x is permuted to (kept dims, reduced dims), copied contiguous and reduced as rows.
// Floating sums accumulate in double (then round to the dtype); integer and bool sums give i64
// like torch and wrap on overflow. amax/amin propagate NaN and reject an empty reduction.
#include <algorithm>
#include <limits>
#include <memory>

#include "dtensor/kernels/elementwise.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/core/parallel.h"
#include "dtensor/kernels/simd_clones.h"

namespace dt {

namespace {

using kernel::kAll;
using kernel::kFloat;
using kernel::is_nan;

// Elements read per range when a reduction's outputs are split over the rank's threads. A full
// reduction (one output) stays on one thread: splitting its sum would change the order of terms.
constexpr int64_t kReduceGrainElements = 32 * 1024;

template <typename C>
struct SumOp {
  using Acc = std::conditional_t<std::is_floating_point_v<C>, double, uint64_t>;
  static Acc init() { return Acc(0); }
  static void step(Acc& a, C v) { a += Acc(v); }  // unsigned for integers: wraps, no UB
  static void combine(Acc& a, Acc b) { a += b; }
};

template <typename C, bool IsMax>
struct ExtremumOp {
  using Acc = C;
  static Acc init() {
    if constexpr (std::is_floating_point_v<C>)
      return IsMax ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
    else
      return IsMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
  }
  static void step(Acc& a, C v) {
    if (is_nan(a)) return;
    if (is_nan(v) || (IsMax ? v > a : v < a)) a = v;
  }
  static void combine(Acc& a, Acc b) { step(a, b); }
};

// Reduces M contiguous rows of length R; out[m] = fin(acc of row m).
template <typename Op, typename T, typename Out, typename Fin>
void reduce_rows(const T* p, int64_t M, int64_t R, Out* out, Fin fin) {
  constexpr int kLanes = 8;
  for (int64_t m = 0; m < M; ++m) {
    const T* row = p + m * R;
    typename Op::Acc lanes[kLanes];
    for (auto& l : lanes) l = Op::init();
    int64_t i = 0;
    for (; i + kLanes <= R; i += kLanes)
      for (int j = 0; j < kLanes; ++j) Op::step(lanes[j], kernel::load(row[i + j]));
    typename Op::Acc acc = Op::init();
    for (int j = 0; j < kLanes; ++j) Op::combine(acc, lanes[j]);
    for (; i < R; ++i) Op::step(acc, kernel::load(row[i]));
    out[m] = fin(acc);
  }
}

// Adds column j of the [R, M] f32 block (row stride ld) to a[j], in double, rows in order: four
// rows per pass over a (a[j] += row r, then r + 1, ...: the order of the one-row loop, so the same
// bits), so a is loaded and stored a quarter as often. Compiled for each CPU's vector width
// (simd_clones.h); the baseline's two-lane conversions made the bias and norm-weight gradients'
// column sums about 1 % of the anchor gpt's training step.
DT_SIMD_CLONES void add_columns_f32(const float* p, int64_t R, int64_t M, int64_t ld, double* __restrict a) {
  int64_t r = 0;
  for (; r + 4 <= R; r += 4) {
    const float* __restrict r0 = p + r * ld;
    const float* __restrict r1 = r0 + ld;
    const float* __restrict r2 = r1 + ld;
    const float* __restrict r3 = r2 + ld;
    for (int64_t j = 0; j < M; ++j) {
      double s = a[j];
      s += double(r0[j]);
      s += double(r1[j]);
      s += double(r2[j]);
      s += double(r3[j]);
      a[j] = s;
    }
  }
  for (; r < R; ++r) {
    const float* __restrict row = p + r * ld;
    for (int64_t j = 0; j < M; ++j) a[j] += double(row[j]);
  }
}

// Reduces over the leading R "rows" of an [R, M] block with row stride ld: out[j] = fin(acc over r
// of p[r*ld + j]).
template <typename Op, typename T, typename Out, typename Fin>
void reduce_columns(const T* p, int64_t R, int64_t M, int64_t ld, Out* out, Fin fin) {
  // unique_ptr, not std::vector: vector<bool> (amax of bool) has no data().
  std::unique_ptr<typename Op::Acc[]> acc(new typename Op::Acc[size_t(M)]);
  typename Op::Acc* __restrict a = acc.get();
  for (int64_t j = 0; j < M; ++j) a[j] = Op::init();
  if constexpr (std::is_same_v<Op, SumOp<float>> && std::is_same_v<T, float>) {
    add_columns_f32(p, R, M, ld, a);
  } else {
    for (int64_t r = 0; r < R; ++r) {
      const T* __restrict row = p + r * ld;
      for (int64_t j = 0; j < M; ++j) Op::step(a[j], kernel::load(row[j]));
    }
  }
  for (int64_t j = 0; j < M; ++j) out[j] = fin(a[j]);
}

// The dims to reduce and the resulting shape.
struct ReducePlan {
  std::vector<int64_t> kept, reduced;  // ascending
  Shape out_shape;
  int64_t M = 1, R = 1;  // number of outputs, elements per output
  bool empty_reduced_dim = false;
};

ReducePlan plan_reduction(const char* op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const int64_t rank = x.dim();
  ReducePlan p;
  std::vector<bool> reduce(size_t(rank), dims.empty());
  for (int64_t d : dims) {
    // A 0-d tensor accepts dim 0 / -1 like torch.
    const int64_t nd = normalize_dim(d, std::max<int64_t>(rank, 1));
    if (rank == 0) continue;
    if (reduce[size_t(nd)])
      DT_THROW(DimError) << op << ": dim " << nd << " appears multiple times in the list of dims";
    reduce[size_t(nd)] = true;
  }
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t s = x.shape()[size_t(d)];
    if (reduce[size_t(d)]) {
      p.reduced.push_back(d);
      p.R *= s;
      if (s == 0) p.empty_reduced_dim = true;
      if (keepdim) p.out_shape.push_back(1);
    } else {
      p.kept.push_back(d);
      p.M *= s;
      p.out_shape.push_back(s);
    }
  }
  return p;
}

// Runs the reduction Op<compute type> over x into a fresh tensor of x's dtype, or i64 for integer
// and bool inputs when IntToI64 (torch.sum). `fin(acc, R)` turns an accumulator into the value.
template <template <typename> class Op, unsigned Allowed, bool IntToI64, typename Fin>
Tensor reduce(const char* op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, Fin fin) {
  ReducePlan plan = plan_reduction(op, x, dims, keepdim);
  Tensor out;
  kernel::dispatch<Allowed>(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using O = Op<compute_t<T>>;
    using Out = std::conditional_t<IntToI64 && !std::is_floating_point_v<compute_t<T>>, int64_t, T>;
    out = Tensor::uninitialized(plan.out_shape, dtype_of<Out>());
    Out* o = static_cast<Out*>(out.raw_data());
    const int64_t R = plan.R;
    auto finish = [&](typename O::Acc acc) { return kernel::store<Out>(fin(acc, R)); };
    if (plan.M == 0) return;
    if (R == 0) {  // sum of nothing
      for (int64_t m = 0; m < plan.M; ++m) o[m] = finish(O::init());
      return;
    }
    const int64_t nr = int64_t(plan.reduced.size()), rank = x.dim();
    const bool trailing =
        plan.reduced.empty() || (plan.reduced.front() == rank - nr && plan.reduced.back() == rank - 1);
    const bool leading = !plan.reduced.empty() && plan.reduced.front() == 0 && plan.reduced.back() == nr - 1;
    // Outputs are split over the rank's threads; each output's accumulation order is unchanged.
    const int64_t M = plan.M, grain = std::max<int64_t>(1, kReduceGrainElements / R);
    auto rows = [&](const T* p) {
      parallel_for(M, grain, [&](int64_t m0, int64_t m1) { reduce_rows<O>(p + m0 * R, m1 - m0, R, o + m0, finish); });
    };
    if (x.is_contiguous() && trailing) {
      rows(static_cast<const T*>(x.raw_data()));
    } else if (x.is_contiguous() && leading) {
      const T* p = static_cast<const T*>(x.raw_data());
      // Column ranges of at least 64 outputs keep the inner loop vectorised.
      parallel_for(M, std::max<int64_t>(64, grain),
                   [&](int64_t j0, int64_t j1) { reduce_columns<O>(p + j0, R, j1 - j0, M, o + j0, finish); });
    } else {
      std::vector<int64_t> perm = plan.kept;
      perm.insert(perm.end(), plan.reduced.begin(), plan.reduced.end());
      Tensor xp = x.permute(perm).contiguous();
      rows(static_cast<const T*>(xp.raw_data()));
    }
  });
  return out;
}

template <typename C>
using MaxOp = ExtremumOp<C, true>;
template <typename C>
using MinOp = ExtremumOp<C, false>;

void check_nonempty(const char* op, const Tensor& x, const std::vector<int64_t>& dims) {
  ReducePlan plan = plan_reduction(op, x, dims, false);
  if (plan.empty_reduced_dim)
    DT_THROW(ValueError) << op << ": cannot reduce over a dim of size 0 (input shape " << shape_str(x.shape())
                         << "); the result has no identity";
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce<SumOp, kAll, true>("sum", x, dims, keepdim, [](auto acc, int64_t) { return acc; });
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce<SumOp, kFloat, false>("mean", x, dims, keepdim,
                               [](auto acc, int64_t R) { return double(acc) / double(R); });
}

Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_nonempty("amax", x, dims);
  return reduce<MaxOp, kAll, false>("amax", x, dims, keepdim, [](auto acc, int64_t) { return acc; });
}

Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_nonempty("amin", x, dims);
  return reduce<MinOp, kAll, false>("amin", x, dims, keepdim, [](auto acc, int64_t) { return acc; });
}

}  // namespace dt
