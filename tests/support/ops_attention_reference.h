// Test and benchmark helpers of the attention kernels, outside the library: the unfused attention
// backward that ops_attention_grad.cc replaced (the whole [S, Sk] probability matrix per head,
// built from plain ops), which its tests compare with and kernels_bench times the new kernel
// against, the relative difference the attention tests measure, and the shapes both the forward
// and the backward tests run.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/kernels/ops.h"
#include "dtensor/kernels/ops_grad.h"
#include "tests/support/ops_test_util.h"

namespace dt::test {

// scaled_dot_product_attention_backward as batched GEMMs over every (batch, head):
//   P = softmax(q·kᵀ·scale + mask, causal mask);  dv = Pᵀ·g;  dP = g·vᵀ;  dS = P·(dP − Σ_j dP·P)
//   dq = dS·k·scale;  dk = dSᵀ·q·scale;  dscores = dS (float mask only)
// Grouped k/v are repeated to q's heads and their gradients summed back over each group. Inputs
// of one floating dtype; computes in f32 (f64 for f64).
inline AttentionGrads naive_attention_backward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                                               const AttentionOptions& opts) {
  const Tensor& mask = opts.mask;
  const int64_t group = attention_kv_group("naive_attention_backward", q.shape(), k.shape(), v.shape(),
                                           mask.defined() ? &mask.shape() : nullptr);
  const int64_t S = q.size(-2), D = q.size(-1), Sk = k.size(-2);
  const DType ct = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
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

// Returns max |got - want| / (max |want| + |want|) elementwise (0 for empty tensors): relative to
// the tensor's scale, since single gradient entries can cancel to near 0. Shapes must agree.
inline double rel_diff(const Tensor& got, const Tensor& want) {
  const std::vector<double> a = got.to_doubles(), b = want.to_doubles();
  double scale = 0, worst = 0;
  for (double x : b) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, std::fabs(a[i] - b[i]) / (scale + std::fabs(b[i])));
  return worst;
}

// Query length, key length, head dim of q/k, head dim of v.
struct AttentionDims {
  int64_t S, Sk, D, Dv;
};

// The shapes the forward and backward tests share: sequence lengths across block sizes (1, 7, 64,
// 257 > the 256-key block), uneven head dims and the gpt's, and S != Sk both ways (causal rows past
// Sk see every key; causal keys past S get no gradient).
inline std::vector<AttentionDims> attention_test_dims() {
  std::vector<AttentionDims> dims;
  for (int64_t s : {1, 7, 64, 257}) {
    dims.push_back({s, s, 13, 7});   // uneven head dims
    dims.push_back({s, s, 64, 64});  // the gpt shape
  }
  dims.push_back({7, 257, 16, 5});  // more keys than queries
  dims.push_back({257, 7, 16, 5});  // more queries than keys
  return dims;
}

// The masks the grouped-query tests try at sequence length s and batch `batch`, by name: none, a
// bool keep-mask of the full [B, 1, S, S], and float masks broadcast from [S, S] and [8, 1, S]
// (seeded from `seed`, which advances).
inline std::vector<std::pair<std::string, Tensor>> attention_test_masks(int64_t batch, int64_t s, uint64_t& seed) {
  const Tensor keep = gt(uniform({batch, 1, s, s}, DType::f32, seed++, 0, 1), Tensor::full({}, 0.3));
  std::vector<std::pair<std::string, Tensor>> masks = {{"none", Tensor()}, {"bool [B,1,S,S]", keep}};
  masks.emplace_back("float [S,S]", uniform({s, s}, DType::f32, seed++, -2, 2));
  masks.emplace_back("float [8,1,S]", uniform({8, 1, s}, DType::f32, seed++, -2, 2));
  return masks;
}

}  // namespace dt::test
