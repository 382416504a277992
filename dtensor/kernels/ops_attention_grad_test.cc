// The block-wise attention backward (ops_attention_grad.cc) against the unfused backward it
// replaced (test::naive_attention_backward, ops_attention_reference.h): sequence lengths around the
// query block (1, 7, 64, 257 > 8 blocks of 32), S != Sk both ways, causal and not, uneven head
// dims, grouped-query k/v, an explicit scale, bool and float masks of full and broadcast shapes,
// fully masked rows (NaN where the reference has NaN), strided views, every float dtype and empty
// sizes. Inputs are seeded uniform values; the largest cases are 2 x 3 heads at S = 257 and 1 x 8 q
// heads on 2 kv heads at S = 257.
#include <cmath>
#include <string>

#include "tests/support/ops_attention_reference.h"
#include "tests/support/ops_test_util.h"

namespace dt {
namespace {

using test::expect_error;
using test::naive_attention_backward;
using test::attention_test_masks;
using test::rel_diff;
using test::uniform;

// Expects got and want to agree in dtype, shape and NaN positions, and elsewhere within `rel`
// (rel_diff, NaNs left out).
void expect_close(const Tensor& got, const Tensor& want, double rel, const std::string& what) {
  ASSERT_EQ(got.defined(), want.defined()) << what;
  if (!want.defined()) return;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  std::vector<double> g = got.to_doubles(), w = want.to_doubles();
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_EQ(std::isnan(g[i]), std::isnan(w[i])) << what << " at " << i;
    if (std::isnan(w[i])) g[i] = w[i] = 0;
  }
  const Shape flat{int64_t(g.size())};
  EXPECT_LE(rel_diff(Tensor::from_doubles(g, flat), Tensor::from_doubles(w, flat)), rel) << what;
}

void expect_grads_close(const AttentionGrads& got, const AttentionGrads& want, double rel, const std::string& what) {
  expect_close(got.dq, want.dq, rel, what + " dq");
  expect_close(got.dk, want.dk, rel, what + " dk");
  expect_close(got.dv, want.dv, rel, what + " dv");
  expect_close(got.dscores, want.dscores, rel, what + " dscores");
}

// Runs both backwards on the same inputs (grad: seeded, of the output's shape).
void check(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o, uint64_t seed, double rel,
           const std::string& what) {
  Shape out = q.shape();
  out.back() = v.size(-1);
  const Tensor g = uniform(out, q.dtype(), seed);
  expect_grads_close(scaled_dot_product_attention_backward(g, q, k, v, o), naive_attention_backward(g, q, k, v, o), rel,
                     what);
}

using Dims = test::AttentionDims;

TEST(OpsAttentionGrad, MatchesTheUnfusedBackward) {
  const std::vector<Dims> dims = test::attention_test_dims();
  uint64_t seed = 1;
  for (const Dims& d : dims)
    for (bool causal : {false, true}) {
      const Tensor q = uniform({2, 3, d.S, d.D}, DType::f32, seed++), k = uniform({2, 3, d.Sk, d.D}, DType::f32, seed++);
      const Tensor v = uniform({2, 3, d.Sk, d.Dv}, DType::f32, seed++);
      AttentionOptions o;
      o.causal = causal;
      check(q, k, v, o, seed++, 1e-6,
            "S " + std::to_string(d.S) + " Sk " + std::to_string(d.Sk) + " D " + std::to_string(d.D) + " Dv " +
                std::to_string(d.Dv) + (causal ? " causal" : ""));
    }
}

TEST(OpsAttentionGrad, GroupedQueryScaleAndMasks) {
  uint64_t seed = 100;
  // Hq / Hkv = 4 and 1; masks of full and broadcast shapes (the bool one hides some whole rows at
  // S = 7: NaN in both, as torch). S = 257 (several blocks) only in the grouped case, at batch 1
  // and one scale per causal flag, to keep the test cheap under the sanitizers.
  for (int64_t hkv : {2, 8})
    for (int64_t s : {1, 7, 257}) {
      if (s == 257 && hkv == 8) continue;
      const int64_t batch = s == 257 ? 1 : 2;
      const Tensor q = uniform({batch, 8, s, 16}, DType::f32, seed++),
                   k = uniform({batch, hkv, s, 16}, DType::f32, seed++), v = uniform({batch, hkv, s, 8}, DType::f32, seed++);
      const std::vector<std::pair<std::string, Tensor>> masks = attention_test_masks(batch, s, seed);
      for (const auto& [name, mask] : masks)
        for (bool causal : {false, true})
          for (double scale : {0.0, 0.3}) {
            if (s == 257 && (scale != 0) != causal) continue;
            AttentionOptions o;
            o.causal = causal;
            o.scale = scale;
            o.mask = mask;
            check(q, k, v, o, seed++, 1e-6,
                  "Hkv " + std::to_string(hkv) + " S " + std::to_string(s) + " mask " + name +
                      (causal ? " causal" : "") + " scale " + std::to_string(scale));
          }
    }
}

TEST(OpsAttentionGrad, FullyMaskedRowsAreNaNAsTheUnfusedBackward) {
  // Query row 1 of 70 sees no key: its dq and dscores rows are NaN, and so is its head's whole dk
  // and dv, also at causal keys past row 1's block of 32, which are never computed.
  const Tensor q = uniform({1, 2, 70, 4}, DType::f32, 1), k = uniform({1, 2, 70, 4}, DType::f32, 2),
               v = uniform({1, 2, 70, 3}, DType::f32, 3);
  std::vector<double> keep(70, 1.0);
  keep[1] = 0;
  for (bool causal : {false, true}) {
    AttentionOptions o;
    o.causal = causal;
    o.mask = Tensor::from_doubles(keep, {70, 1}).to(DType::boolean);
    check(q, k, v, o, 4, 1e-6, causal ? "bool causal" : "bool");
    o.mask = where(o.mask, Tensor::full({}, 0.5), Tensor::full({}, -INFINITY));  // float -inf row
    check(q, k, v, o, 5, 1e-6, causal ? "float causal" : "float");
    const AttentionGrads g = scaled_dot_product_attention_backward(uniform({1, 2, 70, 3}, DType::f32, 6), q, k, v, o);
    EXPECT_TRUE(std::isnan(g.dk.to_doubles().back()) && std::isnan(g.dv.to_doubles().back()));
    EXPECT_FALSE(std::isnan(g.dq.to_doubles()[0]));
  }
}

TEST(OpsAttentionGrad, ReadsStridedViewsInPlace) {
  // The gpt layout: [B, S, H, hd] projections viewed as [B, H, S, hd], and a sliced key view.
  const Tensor q = uniform({2, 33, 4, 8}, DType::f32, 7).transpose(1, 2);
  const Tensor k = uniform({2, 33, 4, 16}, DType::f32, 8).transpose(1, 2).slice(3, 0, 16, 2);
  const Tensor v = uniform({2, 33, 4, 5}, DType::f32, 9).transpose(1, 2);
  for (bool causal : {false, true}) {
    AttentionOptions o;
    o.causal = causal;
    check(q, k, v, o, 10, 1e-6, causal ? "causal" : "full");
  }
}

TEST(OpsAttentionGrad, WritesGradientsWithHeadsInner) {
  // dq, dk and dv are [B, H, S, D] views of [B, S, H, D] memory, so the model's merge of the heads
  // (transpose(1, 2), then reshape to [B, S, H·D]) is a view; values as the unfused backward's.
  // Grouped k/v keep dk and dv contiguous (they are sums over each group's heads).
  const Tensor q = uniform({2, 4, 37, 8}, DType::f32, 40), k = uniform({2, 4, 37, 8}, DType::f32, 41);
  const Tensor v = uniform({2, 4, 37, 6}, DType::f32, 42), g = uniform({2, 4, 37, 6}, DType::f32, 43);
  AttentionOptions o;
  o.causal = true;
  const AttentionGrads got = scaled_dot_product_attention_backward(g, q, k, v, o);
  for (const Tensor* t : {&got.dq, &got.dk, &got.dv}) {
    EXPECT_FALSE(t->is_contiguous());
    EXPECT_TRUE(t->transpose(1, 2).is_contiguous());
  }
  expect_grads_close(got, naive_attention_backward(g, q, k, v, o), 1e-6, "heads inner");
  const Tensor kg = uniform({2, 2, 37, 8}, DType::f32, 44), vg = uniform({2, 2, 37, 6}, DType::f32, 45);
  const AttentionGrads grouped = scaled_dot_product_attention_backward(g, q, kg, vg, o);
  EXPECT_TRUE(grouped.dq.transpose(1, 2).is_contiguous());
  EXPECT_TRUE(grouped.dk.is_contiguous());
  EXPECT_TRUE(grouped.dv.is_contiguous());
  expect_grads_close(grouped, naive_attention_backward(g, q, kg, vg, o), 1e-6, "grouped");
}

TEST(OpsAttentionGrad, OtherFloatDtypes) {
  for (DType dtype : {DType::f64, DType::bf16, DType::f16}) {
    const Tensor q = uniform({3, 70, 12}, dtype, 21), k = uniform({3, 70, 12}, dtype, 22),
                 v = uniform({3, 70, 9}, dtype, 23), g = uniform({3, 70, 9}, dtype, 24);
    // bf16/f16 compute in f32 and round once: compare with the f64 reference.
    const double rel = dtype == DType::f64 ? 1e-12 : dtype == DType::bf16 ? 1e-2 : 2e-3;
    for (bool causal : {false, true}) {
      AttentionOptions o;
      o.causal = causal;
      const AttentionGrads got = scaled_dot_product_attention_backward(g, q, k, v, o);
      EXPECT_EQ(got.dq.dtype(), dtype);
      const AttentionGrads want = naive_attention_backward(g.to(DType::f64), q.to(DType::f64), k.to(DType::f64),
                                                           v.to(DType::f64), o);
      const std::string what = std::string(dtype_name(dtype)) + (causal ? " causal" : "");
      expect_close(got.dq.to(DType::f64), want.dq, rel, what + " dq");
      expect_close(got.dk.to(DType::f64), want.dk, rel, what + " dk");
      expect_close(got.dv.to(DType::f64), want.dv, rel, what + " dv");
    }
  }
}

TEST(OpsAttentionGrad, EmptySizes) {
  // No queries, no keys, an empty head dim (softmax of the mask alone) and an empty value dim.
  const std::vector<Dims> dims = {{0, 5, 4, 3}, {3, 0, 4, 3}, {3, 5, 0, 3}, {3, 5, 4, 0}};
  for (const Dims& d : dims)
    for (bool causal : {false, true}) {
      AttentionOptions o;
      o.causal = causal;
      o.mask = uniform({d.S, d.Sk}, DType::f32, 30);
      check(uniform({2, d.S, d.D}, DType::f32, 31), uniform({2, d.Sk, d.D}, DType::f32, 32),
            uniform({2, d.Sk, d.Dv}, DType::f32, 33), o, 34, 1e-6,
            "S " + std::to_string(d.S) + " Sk " + std::to_string(d.Sk) + " D " + std::to_string(d.D) + " Dv " +
                std::to_string(d.Dv) + (causal ? " causal" : ""));
    }
}

TEST(OpsAttentionGrad, RejectsBadShapesAndDtypes) {
  const Tensor q = Tensor::zeros({1, 4, 5, 3}), k = Tensor::zeros({1, 2, 5, 3});
  expect_error<ShapeError>([&] { scaled_dot_product_attention_backward(Tensor::zeros({1, 4, 5, 2}), q, k, k, false); },
                           {"scaled_dot_product_attention_backward: grad [1, 4, 5, 2] does not match the output "
                            "[1, 4, 5, 3]"});
  expect_error<ShapeError>(
      [&] { scaled_dot_product_attention_backward(q, q, Tensor::zeros({1, 3, 5, 3}), Tensor::zeros({1, 3, 5, 3}), false); },
      {"scaled_dot_product_attention_backward: k/v heads 3 do not divide q heads 4"});
  const Tensor i = Tensor::zeros({2, 3, 4}, DType::i64);
  expect_error<DTypeError>([&] { scaled_dot_product_attention_backward(i, i, i, i, false); },
                           {"scaled_dot_product_attention_backward", "i64"});
}

}  // namespace
}  // namespace dt
