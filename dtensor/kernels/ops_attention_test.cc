// The tiled scaled_dot_product_attention against the unfused kernel it replaced (kept here as the
// naive reference: q·kᵀ, scale, mask with where, softmax, ·v), on sequence lengths around the
// block sizes (1, 7, 64, 257 > kKeyBlock = 256), causal and not, uneven head dims, strided views;
// grouped-query k/v, an explicit scale and bool/float masks against the same reference with k/v
// repeated (repeat_interleave) and the mask applied with where/add.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "dtensor/kernels/gemm_f32_packed.h"
#include "tests/support/ops_attention_reference.h"
#include "tests/support/ops_test_util.h"

namespace dt {
namespace {

using test::expect_error;
using test::attention_test_masks;
using test::rel_diff;
using test::uniform;

// Returns softmax(q·kᵀ/√D + mask)·v with a full [S, Sk] score matrix per head.
Tensor naive_sdpa(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const int64_t head_dim = q.size(-1);
  Tensor scores = mul(matmul(q, k.transpose(-2, -1)), 1.0 / std::sqrt(double(head_dim)));
  if (causal) {
    const int64_t s = q.size(-2), sk = k.size(-2);
    Tensor rows = Tensor::arange(s).view({s, 1});
    Tensor cols = Tensor::arange(sk).view({1, sk});
    Tensor visible = le(cols, rows);
    Tensor neg_inf = Tensor::full({}, -std::numeric_limits<double>::infinity(), scores.dtype());
    scores = where(visible, scores, neg_inf);
  }
  return matmul(softmax(scores, -1), v);
}

// Returns k [B, Hkv, S, D] with each head repeated `group` times in place (torch's
// repeat_interleave(group, dim=1)).
Tensor repeat_heads(const Tensor& k, int64_t group) {
  Shape grouped = k.shape(), repeated = k.shape();
  grouped.insert(grouped.begin() + 2, group);
  repeated[1] *= group;
  return k.unsqueeze(2).expand(grouped).reshape(repeated);
}

// The reference for the options: k/v repeated to q's heads, the mask applied as torch 2.x's
// reference does (bool: where, float: added after the scale), then the causal mask.
Tensor naive_sdpa(const Tensor& q, const Tensor& k0, const Tensor& v0, const AttentionOptions& o) {
  const int64_t group = q.size(1) / k0.size(1);
  const Tensor k = repeat_heads(k0, group), v = repeat_heads(v0, group);
  const double scale = o.scale != 0 ? o.scale : 1.0 / std::sqrt(double(q.size(-1)));
  Tensor scores = mul(matmul(q, k.transpose(-2, -1)), scale);
  const Tensor neg_inf = Tensor::full({}, -std::numeric_limits<double>::infinity(), scores.dtype());
  if (o.mask.defined())
    scores = o.mask.dtype() == DType::boolean ? where(o.mask, scores, neg_inf) : add(scores, o.mask.to(scores.dtype()));
  if (o.causal) {
    const int64_t s = q.size(-2), sk = k.size(-2);
    scores = where(le(Tensor::arange(sk).view({1, sk}), Tensor::arange(s).view({s, 1})), scores, neg_inf);
  }
  return matmul(softmax(scores, -1), v);
}

void expect_rel_close(const Tensor& got, const Tensor& want, double rel, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_LE(rel_diff(got, want), rel) << what;
}

using Dims = test::AttentionDims;

TEST(OpsAttention, MatchesTheUnfusedKernel) {
  std::vector<Dims> dims = test::attention_test_dims();
  dims.push_back({300, 600, 32, 32});  // several key blocks per query block: rescaling
  uint64_t seed = 1;
  for (const Dims& d : dims) {
    for (bool causal : {false, true}) {
      // Scores of std ~1 and ~9 (amp 3): the second makes later key blocks raise the running max
      // often. There a score's f32 rounding, amplified |score| times by exp, leaves both kernels
      // ~1.5e-6 from the f64 result (differently): the new one must be about as close to it (within
      // 2x: on the packed GEMM path the tiles' sums round differently from sgemm's, and one shape's
      // worst element moved from 4.3e-7 to 7.9e-7).
      for (double amp : {1.0, 3.0}) {
        Tensor q = uniform({2, 3, d.S, d.D}, DType::f32, seed++, -amp, amp);
        Tensor k = uniform({2, 3, d.Sk, d.D}, DType::f32, seed++, -amp, amp);
        Tensor v = uniform({2, 3, d.Sk, d.Dv}, DType::f32, seed++);
        const std::string what = "S " + std::to_string(d.S) + " Sk " + std::to_string(d.Sk) + " D " +
                                 std::to_string(d.D) + " Dv " + std::to_string(d.Dv) + (causal ? " causal" : "") +
                                 " amp " + std::to_string(amp);
        const Tensor got = scaled_dot_product_attention(q, k, v, causal), old = naive_sdpa(q, k, v, causal);
        if (amp == 1.0) {
          expect_rel_close(got, old, 1e-6, what);
        } else {
          const Tensor exact = naive_sdpa(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64), causal);
          EXPECT_LE(rel_diff(got.to(DType::f64), exact), 2 * rel_diff(old.to(DType::f64), exact) + 1e-7) << what;
        }
      }
    }
  }
}

TEST(OpsAttention, ReadsStridedViewsInPlace) {
  // The gpt layout: [B, S, H, hd] projections viewed as [B, H, S, hd], and a sliced key view.
  Tensor q = uniform({2, 33, 4, 8}, DType::f32, 7).transpose(1, 2);
  Tensor k = uniform({2, 33, 4, 16}, DType::f32, 8).transpose(1, 2).slice(3, 0, 16, 2);
  Tensor v = uniform({2, 33, 4, 5}, DType::f32, 9).transpose(1, 2);
  for (bool causal : {false, true})
    expect_rel_close(scaled_dot_product_attention(q, k, v, causal), naive_sdpa(q, k, v, causal), 1e-6,
                 causal ? "causal" : "full");
}

TEST(OpsAttention, OtherFloatDtypes) {
  for (DType dtype : {DType::f64, DType::bf16, DType::f16}) {
    Tensor q = uniform({3, 70, 12}, dtype, 21), k = uniform({3, 70, 12}, dtype, 22), v = uniform({3, 70, 9}, dtype, 23);
    // bf16/f16 now round once at the end instead of after every step: compare in f64.
    const double rel = dtype == DType::f64 ? 1e-12 : dtype == DType::bf16 ? 1e-2 : 2e-3;
    for (bool causal : {false, true}) {
      Tensor want = naive_sdpa(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64), causal);
      expect_rel_close(scaled_dot_product_attention(q, k, v, causal).to(DType::f64), want, rel,
                   std::string(dtype_name(dtype)) + (causal ? " causal" : ""));
    }
  }
}

TEST(OpsAttention, EmptySizes) {
  EXPECT_EQ(scaled_dot_product_attention(Tensor::zeros({2, 0, 4}), Tensor::zeros({2, 5, 4}), Tensor::zeros({2, 5, 3}))
                .shape(),
            (Shape{2, 0, 3}));
  // No keys: softmax over nothing times v is 0, as the unfused kernel gives.
  Tensor out = scaled_dot_product_attention(uniform({2, 3, 4}, DType::f32, 1), Tensor::zeros({2, 0, 4}),
                                            Tensor::zeros({2, 0, 3}), /*causal=*/true);
  EXPECT_EQ(out.to_doubles(), std::vector<double>(18, 0.0));
}

TEST(OpsAttention, IsDeterministic) {
  Tensor q = uniform({2, 300, 16}, DType::f32, 31), k = uniform({2, 300, 16}, DType::f32, 32),
         v = uniform({2, 300, 16}, DType::f32, 33);
  Tensor a = scaled_dot_product_attention(q, k, v, true), b = scaled_dot_product_attention(q, k, v, true);
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0);
}

TEST(OpsAttention, RejectsBadShapesAndDtypes) {
  Tensor q = Tensor::zeros({2, 3, 4});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q, Tensor::zeros({2, 3, 5}), Tensor::zeros({2, 3, 4})); },
                           {"scaled_dot_product_attention", "[2, 3, 5]"});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q, Tensor::zeros({3, 3, 4}), Tensor::zeros({3, 3, 4})); },
                           {"scaled_dot_product_attention"});
  Tensor i = Tensor::zeros({2, 3, 4}, DType::i64);
  expect_error<DTypeError>([&] { scaled_dot_product_attention(i, i, i); }, {"scaled_dot_product_attention", "i64"});
}

TEST(OpsAttention, GroupedQueryScaleAndMasks) {
  uint64_t seed = 100;
  // Hq / Hkv = 4 and 1; S around the block sizes; masks of full and broadcast shapes.
  for (int64_t hkv : {2, 8}) {
    for (int64_t s : {1, 7, 257}) {
      const Tensor q = uniform({2, 8, s, 16}, DType::f32, seed++), k = uniform({2, hkv, s, 16}, DType::f32, seed++),
                   v = uniform({2, hkv, s, 8}, DType::f32, seed++);
      const std::vector<std::pair<std::string, Tensor>> masks = attention_test_masks(2, s, seed);
      for (const auto& [name, mask] : masks)
        for (bool causal : {false, true})
          for (double scale : {0.0, 0.3}) {
            AttentionOptions o;
            o.causal = causal;
            o.scale = scale;
            o.mask = mask;
            const std::string what = "Hkv " + std::to_string(hkv) + " S " + std::to_string(s) + " mask " + name +
                                     (causal ? " causal" : "") + " scale " + std::to_string(scale);
            // A bool mask can hide a whole row: NaN in both (torch gives NaN too).
            const Tensor got = scaled_dot_product_attention(q, k, v, o), want = naive_sdpa(q, k, v, o);
            std::vector<double> g = got.to_doubles(), w = want.to_doubles();
            ASSERT_EQ(g.size(), w.size()) << what;
            size_t nans = 0;
            for (size_t i = 0; i < g.size(); ++i) {
              EXPECT_EQ(std::isnan(g[i]), std::isnan(w[i])) << what << " at " << i;
              if (std::isnan(w[i])) {
                ++nans;
                g[i] = w[i] = 0;
              }
            }
            if (nans == 0) expect_rel_close(got, want, 2e-6, what);
          }
    }
  }
}

TEST(OpsAttention, Bf16AndF16AreTheF32KernelOnWidenedInputsRoundedOnce) {
  // bf16/f16 heads are widened head by head inside the kernel: the bits are those of widening the
  // whole inputs, attending in f32 and rounding the output once. gpt-layout strided views, grouped
  // query heads, S around the query block, every mask kind (a hidden row: NaN in both).
  uint64_t seed = 400;
  for (DType dtype : {DType::bf16, DType::f16})
    for (int64_t hkv : {2, 8})
      for (int64_t s : {1, 37, 257}) {
        const Tensor q = uniform({2, s, 8, 16}, dtype, seed++).transpose(1, 2);
        const Tensor k = uniform({2, s, hkv, 16}, dtype, seed++).transpose(1, 2);
        const Tensor v = uniform({2, s, hkv, 8}, dtype, seed++).transpose(1, 2);
        for (const auto& [name, mask] : attention_test_masks(2, s, seed))
          for (bool causal : {false, true}) {
            AttentionOptions o, o32;
            o.causal = o32.causal = causal;
            o.scale = o32.scale = 0.3;
            o.mask = mask.defined() && mask.dtype() != DType::boolean ? mask.to(dtype) : mask;
            o32.mask = o.mask.defined() && o.mask.dtype() != DType::boolean ? o.mask.to(DType::f32) : o.mask;
            const Tensor got = scaled_dot_product_attention(q, k, v, o);
            const Tensor want =
                scaled_dot_product_attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), o32).to(dtype);
            ASSERT_EQ(got.dtype(), dtype);
            ASSERT_EQ(got.shape(), want.shape());
            EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), got.nbytes()), 0)
                << dtype_name(dtype) << " Hkv " << hkv << " S " << s << " mask " << name << (causal ? " causal" : "");
          }
      }
}

// On the packed f32 GEMM path k and v are packed once per kv head and the tiles multiply through
// gemm_f32_packed_block: the same results as the sgemm path within f32 rounding, and no further
// from the f64 result. Sequence lengths off the query block (31, 33, 100) and past the key block
// (300: rescaling), an odd head count, grouped query heads (Hq 6 / Hkv 2 = 3), gpt-layout strided
// views, causal and not, every mask kind.
TEST(OpsAttention, PackedPathMatchesTheSgemmPath) {
  if (!f32_packed_supported()) GTEST_SKIP() << "this CPU has no AVX2 and FMA, which the packed f32 GEMM needs";
  uint64_t seed = 700;
  for (const auto& [hq, hkv] : std::vector<std::pair<int64_t, int64_t>>{{3, 3}, {6, 2}})
    for (int64_t s : {31, 33, 100, 300}) {
      const Tensor q = uniform({2, s, hq, 24}, DType::f32, seed++, -2, 2).transpose(1, 2);
      const Tensor k = uniform({2, s, hkv, 24}, DType::f32, seed++, -2, 2).transpose(1, 2);
      const Tensor v = uniform({2, s, hkv, 40}, DType::f32, seed++).transpose(1, 2);
      for (const auto& [name, mask] : attention_test_masks(2, s, seed)) {
        if (mask.defined() && mask.dim() >= 3 && mask.size(-3) != 1 && mask.size(-3) != hq) continue;  // 8 heads only
        for (bool causal : {false, true}) {
          AttentionOptions o;
          o.causal = causal;
          o.mask = mask;
          const std::string what = "Hq " + std::to_string(hq) + " Hkv " + std::to_string(hkv) + " S " +
                                   std::to_string(s) + " mask " + name + (causal ? " causal" : "");
          Tensor packed, blas;
          {
            ScopedF32GemmPath path(F32GemmPath::packed);
            packed = scaled_dot_product_attention(q, k, v, o);
          }
          {
            ScopedF32GemmPath path(F32GemmPath::blas);
            blas = scaled_dot_product_attention(q, k, v, o);
          }
          AttentionOptions o64 = o;
          o64.mask = mask.defined() && mask.dtype() != DType::boolean ? mask.to(DType::f64) : mask;
          const Tensor exact = scaled_dot_product_attention(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64), o64);
          // A bool mask can hide a whole row: NaN in all three, compared as 0.
          std::vector<double> p = packed.to_doubles(), b = blas.to_doubles(), e = exact.to_doubles();
          ASSERT_EQ(p.size(), e.size()) << what;
          double err_packed = 0, err_blas = 0, diff = 0;
          for (size_t i = 0; i < p.size(); ++i) {
            ASSERT_EQ(std::isnan(p[i]), std::isnan(e[i])) << what << " at " << i;
            ASSERT_EQ(std::isnan(b[i]), std::isnan(e[i])) << what << " at " << i;
            if (std::isnan(e[i])) continue;
            err_packed = std::max(err_packed, std::abs(p[i] - e[i]));
            err_blas = std::max(err_blas, std::abs(b[i] - e[i]));
            diff = std::max(diff, std::abs(p[i] - b[i]));
          }
          EXPECT_LE(diff, 2e-6) << what;
          EXPECT_LE(err_packed, 1.5 * err_blas + 1e-7) << what;
        }
      }
    }
}

TEST(OpsAttention, PackedQueryBlockEdges) {
  // Every S from 1 to 100 (the packed path from S = 30: blocks of 30 rows in 6-row groups, each over
  // its own causal keys, the last group and block short), and S around the 256-key block, where a
  // causal group spans two key blocks and some of its rows see none of the second's keys.
  if (!f32_packed_supported()) GTEST_SKIP() << "this CPU has no AVX2 and FMA, which the packed f32 GEMM needs";
  ScopedF32GemmPath path(F32GemmPath::packed);
  std::vector<int64_t> sizes;
  for (int64_t s = 1; s <= 100; ++s) sizes.push_back(s);
  for (int64_t s = 250; s <= 262; ++s) sizes.push_back(s);
  uint64_t seed = 900;
  for (int64_t s : sizes)
    for (bool causal : {false, true}) {
      if (s > 100 && !causal) continue;
      const Tensor q = uniform({1, 2, s, 16}, DType::f32, seed++, -2, 2);
      const Tensor k = uniform({1, 2, s, 16}, DType::f32, seed++, -2, 2);
      const Tensor v = uniform({1, 2, s, 20}, DType::f32, seed++);
      expect_rel_close(scaled_dot_product_attention(q, k, v, causal), naive_sdpa(q, k, v, causal), 1e-6,
                   "S " + std::to_string(s) + (causal ? " causal" : ""));
    }
}

TEST(OpsAttention, FullyMaskedRowIsNaNAsTorch) {
  const Tensor q = uniform({1, 1, 3, 4}, DType::f32, 1), k = uniform({1, 1, 3, 4}, DType::f32, 2),
               v = uniform({1, 1, 3, 2}, DType::f32, 3);
  AttentionOptions o;
  o.mask = Tensor::from_doubles({1, 0, 1}, {3, 1}).to(DType::boolean);  // query row 1 sees nothing
  const std::vector<double> out = scaled_dot_product_attention(q, k, v, o).to_doubles();
  EXPECT_FALSE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[2]) && std::isnan(out[3]));
  EXPECT_FALSE(std::isnan(out[4]));
}

TEST(OpsAttention, NaNScoresPropagateAsTorch) {
  // A NaN score makes its softmax row NaN in torch. The online softmax skips a key block whose
  // scores are all -inf (masked so far), and a row max ignoring NaN took an all-NaN (or, on the
  // FMA row, a NaN in the last 16-key step) first block for a masked one: with Sk = 300 the
  // second block's 44 keys then gave finite outputs. NaN positions must match the reference on
  // both GEMM paths; the finite values too.
  const int64_t s = 40, sk = 300;
  const Tensor q = uniform({1, 2, s, 16}, DType::f32, 31, -2, 2), v = uniform({1, 2, sk, 8}, DType::f32, 33);
  const auto with_nan = [](const Tensor& t, int64_t row_begin, int64_t row_end) {
    std::vector<double> d = t.to_doubles();
    const int64_t rows = t.size(-2), cols = t.size(-1);
    for (size_t i = 0; i < d.size(); ++i) {
      const int64_t r = int64_t(i) / cols % rows;
      if (r >= row_begin && r < row_end) d[i] = std::nan("");
    }
    return Tensor::from_doubles(d, t.shape()).to(t.dtype());
  };
  const Tensor k = uniform({1, 2, sk, 16}, DType::f32, 32, -2, 2);
  struct Case {
    std::string name;
    Tensor q, k, mask;
  };
  std::vector<double> mask_values(size_t(s * sk), 0.25);
  mask_values[size_t(5 * sk + 255)] = std::nan("");  // query row 5, the last key of the first block
  const std::vector<Case> cases = {
      {"keys 0..255 NaN", q, with_nan(k, 0, 256), {}},
      {"key 255 NaN", q, with_nan(k, 255, 256), {}},
      {"key 3 NaN", q, with_nan(k, 3, 4), {}},
      {"query 7 NaN", with_nan(q, 7, 8), k, {}},
      {"float mask NaN at (5, 255)", q, k, Tensor::from_doubles(mask_values, {s, sk}).to(DType::f32)},
  };
  for (const Case& c : cases)
    for (F32GemmPath gemm_path : {F32GemmPath::blas, F32GemmPath::packed}) {
      if (gemm_path == F32GemmPath::packed && !f32_packed_supported()) continue;
      ScopedF32GemmPath path(gemm_path);
      AttentionOptions o;
      o.mask = c.mask;
      const std::string what = c.name + (gemm_path == F32GemmPath::packed ? " packed" : " sgemm");
      const std::vector<double> want = naive_sdpa(c.q, c.k, v, o).to_doubles();
      EXPECT_GT(std::count_if(want.begin(), want.end(), [](double x) { return std::isnan(x); }), 0) << what;
      // NaN where the reference is NaN, elsewhere within 1e-6.
      test::expect_values(scaled_dot_product_attention(c.q, c.k, v, o), want, 0, 1e-6, what);
    }
}

TEST(OpsAttention, RejectsBadGroupsAndMasks) {
  const Tensor q = Tensor::zeros({1, 8, 5, 4}), k = Tensor::zeros({1, 3, 5, 4});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q, k, k); },
                           {"k/v heads 3 do not divide q heads 8", "[1, 3, 5, 4]"});
  AttentionOptions o;
  o.mask = Tensor::zeros({2, 5, 5});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q, q, q, o); },
                           {"mask [2, 5, 5] does not broadcast to the scores [1, 8, 5, 5]"});
  o.mask = Tensor::zeros({5, 5}, DType::i64);
  expect_error<DTypeError>([&] { scaled_dot_product_attention(q, q, q, o); }, {"mask must be bool or q's dtype f32", "i64"});
}

}  // namespace
}  // namespace dt
