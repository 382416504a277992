// scaled_dot_product_attention's backward kernel (ops_grad.h), beside the forward
// (ops_attention.cc).
#include <cmath>

#include "dtensor/core/error.h"
#include "dtensor/core/ops.h"
#include "dtensor/core/ops_grad.h"

namespace dt {
namespace {

// f64 computes in f64; f32, bf16 and f16 in f32 (as every backward kernel, ops_grad.cc).
DType compute_dtype(const char* op, DType d) {
  if (d == DType::f64) return DType::f64;
  if (d == DType::f32 || d == DType::bf16 || d == DType::f16) return DType::f32;
  DT_THROW(DTypeError) << op << " expects a floating dtype, got " << dtype_name(d);
}

}  // namespace

AttentionGrads scaled_dot_product_attention_backward(const Tensor& grad, const Tensor& q, const Tensor& k,
                                                     const Tensor& v, const AttentionOptions& opts) {
  const char* op = "scaled_dot_product_attention_backward";
  const Tensor& mask = opts.mask;
  const int64_t group =
      attention_kv_group(op, q.shape(), k.shape(), v.shape(), mask.defined() ? &mask.shape() : nullptr);
  const int64_t S = q.size(-2), D = q.size(-1), Sk = k.size(-2);
  Shape out_shape = q.shape();
  out_shape.back() = v.size(-1);
  if (grad.shape() != out_shape)
    DT_THROW(ShapeError) << op << ": grad " << shape_str(grad.shape()) << " does not match the output "
                         << shape_str(out_shape);
  // Batched GEMMs over every (batch, head), in the compute dtype:
  //   P = softmax(q·kᵀ·scale + mask, causal mask);  dv = Pᵀ·g;  dP = g·vᵀ;  dS = P·(dP − Σ_j dP·P)
  //   dq = dS·k·scale;  dk = dSᵀ·q·scale;  dmask = dS
  // Masked scores are −inf, so their probabilities and dS are exactly 0. Memory: one [S, Sk]
  // block per (batch, head) for P and dP. Grouped k/v are repeated to q's heads here (the
  // backward holds [S, Sk] per head anyway) and their gradients summed back over each group.
  const DType ct = compute_dtype(op, q.dtype());
  const Tensor qc = q.to(ct), gc = grad.to(ct);
  auto repeat_heads = [&](const Tensor& t) {
    if (group == 1) return t.to(ct);
    Shape grouped = t.shape(), repeated = t.shape();
    grouped.insert(grouped.end() - 2, group);
    repeated[repeated.size() - 3] *= group;
    return t.to(ct).unsqueeze(t.dim() - 2).expand(grouped).reshape(repeated);
  };
  auto sum_groups = [&](const Tensor& t, const Tensor& like) {
    if (group == 1) return t.to(like.dtype());
    Shape grouped = like.shape();
    grouped.insert(grouped.end() - 2, group);
    return sum(t.reshape(grouped), {int64_t(grouped.size()) - 3}).to(like.dtype());
  };
  const Tensor kc = repeat_heads(k), vc = repeat_heads(v);
  const double scale = opts.scale != 0 ? opts.scale : D > 0 ? 1.0 / std::sqrt(double(D)) : 1.0;
  Tensor scores = mul(matmul(qc, kc.transpose(-2, -1)), scale);
  const Tensor neg_inf = Tensor::full({}, -INFINITY, ct);
  if (mask.defined()) scores = mask.dtype() == DType::boolean ? where(mask, scores, neg_inf) : add(scores, mask.to(ct));
  if (opts.causal) {
    const Tensor rows = Tensor::arange(S).view({S, 1}), cols = Tensor::arange(Sk).view({1, Sk});
    scores = where(le(cols, rows), scores, neg_inf);
  }
  const Tensor p = softmax(scores, -1);
  const Tensor dp = matmul(gc, vc.transpose(-2, -1));
  const Tensor ds = mul(p, sub(dp, sum(mul(dp, p), {-1}, /*keepdim=*/true)));
  AttentionGrads r;
  r.dv = sum_groups(matmul(p.transpose(-2, -1), gc), v);
  r.dq = mul(matmul(ds, kc), scale).to(q.dtype());
  r.dk = sum_groups(mul(matmul(ds.transpose(-2, -1), qc), scale), k);
  if (mask.defined() && mask.dtype() != DType::boolean) r.dscores = ds.to(q.dtype());
  return r;
}

AttentionGrads scaled_dot_product_attention_backward(const Tensor& grad, const Tensor& q, const Tensor& k,
                                                     const Tensor& v, bool causal) {
  AttentionOptions opts;
  opts.causal = causal;
  return scaled_dot_product_attention_backward(grad, q, k, v, opts);
}

}  // namespace dt
