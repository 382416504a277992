// The rotary position embedding as one pass: x·cos + rotate_half(x)·sin.
//
// Hugging Face's Llama exports it as seven ops per q and k (mul, two slices, neg, cat, mul, add),
// each a pass over a [batch, heads, seq, head_dim] tensor; on the 4-layer Llama at hidden 512 those
// passes cost as much as the attention itself and do not scale with threads (memory-bound, short
// strided rows). Here each row of head_dim values is read once and written once. Every element is
// computed with the same IEEE operations as the op chain (the product of the negated half, then the
// sum; -ffp-contract=off keeps them apart), so the result is bitwise the chain's.
#include "dtensor/core/strided_loop.h"
#include "dtensor/kernels/elementwise.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/kernels/simd_clones.h"

namespace dt {
namespace {

// One row of 2·half values (simd_clones.h: the same bits in every clone).
DT_SIMD_CLONES void rotary_row_f32(const float* __restrict x, const float* __restrict c, const float* __restrict s,
                                   float* __restrict o, int64_t half) {
  for (int64_t j = 0; j < half; ++j) o[j] = x[j] * c[j] + (-x[j + half]) * s[j];
  for (int64_t j = half; j < 2 * half; ++j) o[j] = x[j] * c[j] + x[j - half] * s[j];
}

// t expanded to `shape` with unit stride along the last dim (a copy only when it has none).
Tensor rows_of(const Tensor& t, const Shape& shape) {
  Tensor e = t.expand(shape);
  return e.strides().back() == 1 ? e : e.contiguous();
}

// The shape or strides without the last dim.
Shape leading(const SmallVector<int64_t, kInlineDims>& v) { return Shape(v.begin(), v.end() - 1); }

}  // namespace

Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  for (const Tensor* t : {&x, &cos, &sin})
    if (t->dtype() != DType::f32)
      DT_THROW(DTypeError) << "rotary_embedding does not support dtype " << dtype_name(t->dtype());
  const Shape& shape = x.shape();
  if (shape.empty() || shape.back() % 2 != 0)
    DT_THROW(ShapeError) << "rotary_embedding: x " << shape_str(shape) << " needs an even last dim";
  for (const Tensor* t : {&cos, &sin})
    if (kernel::broadcast_for("rotary_embedding", shape, t->shape()) != shape)
      DT_THROW(ShapeError) << "rotary_embedding: " << shape_str(t->shape()) << " does not broadcast to x "
                           << shape_str(shape);
  const Tensor xe = rows_of(x, shape), ce = rows_of(cos, shape), se = rows_of(sin, shape);
  Tensor out = Tensor::uninitialized(shape, DType::f32);
  const int64_t d = shape.back();
  const Shape rows = leading(shape);
  const Strides so = leading(out.strides()), sx = leading(xe.strides()), sc = leading(ce.strides()),
                ss = leading(se.strides());
  const auto loop = strided_detail::collapse<4>(rows, {&so, &sx, &sc, &ss});
  const float *xp = xe.data<float>(), *cp = ce.data<float>(), *sp = se.data<float>();
  float* op = out.data<float>();
  auto row_piece = [&](const std::array<int64_t, 4>& off, int64_t n, const std::array<int64_t, 4>& inner) {
    for (int64_t i = 0; i < n; ++i)
      rotary_row_f32(xp + off[1] + i * inner[1], cp + off[2] + i * inner[2], sp + off[3] + i * inner[3],
                     op + off[0] + i * inner[0], d / 2);
  };
  parallel_for(loop.numel, std::max<int64_t>(1, kElementwiseGrain / d),
               [&](int64_t begin, int64_t end) { strided_detail::run_range<4>(loop, begin, end, row_piece); });
  return out;
}

}  // namespace dt
