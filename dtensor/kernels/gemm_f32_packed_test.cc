// The packed-weight f32 GEMM against float64 sums of the same products, at shapes on and off every
// tile and block edge; its bits under any split of rows or weight rows; and linear through it.
#include "dtensor/kernels/gemm_f32_packed.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "dtensor/kernels/ops.h"
#include "tests/support/ops_test_util.h"
#include "tests/support/packed_isas.h"

namespace dt {
namespace {

using test::uniform;

#define DT_SKIP_WITHOUT_PACKED() \
  if (!f32_packed_supported()) GTEST_SKIP() << "this CPU has no AVX2 and FMA, which the packed f32 GEMM needs"

using test::cpu_packed_isas;

struct PackedCase {
  int64_t m, n, k;
  bool w_transposed;  // W [n, k] is read through a transposed view of a row-major [k, n]
  float alpha, beta;
};

// Runs gemm_f32_packed on seeded operands and checks it against the f64 sums of the same products.
void expect_packed_matches_f64(const PackedCase& t) {
  SCOPED_TRACE(testing::Message() << "m " << t.m << " n " << t.n << " k " << t.k << " transposed " << t.w_transposed
                                  << " alpha " << t.alpha << " beta " << t.beta);
  const Tensor a = uniform({t.m, t.k}, DType::f32, 41, -2, 2);
  const Tensor w_stored = t.w_transposed ? uniform({t.k, t.n}, DType::f32, 42, -1, 1) : uniform({t.n, t.k}, DType::f32, 42, -1, 1);
  const Tensor w = t.w_transposed ? w_stored.transpose(0, 1) : w_stored;
  const Tensor c0 = uniform({t.m, t.n}, DType::f32, 43, -4, 4);
  Tensor c = c0.clone();
  const PackedWeight packed(w_stored.data<float>(), t.n, t.k, w.strides()[0], w.strides()[1]);
  gemm_f32_packed(t.m, t.alpha, a.data<float>(), t.k, packed, t.beta, c.data<float>(), t.n);
  test::expect_gemm_matches_f64(c, a, w.transpose(0, 1), c0, t.alpha, t.beta);
}

TEST(GemmF32Packed, MatchesF64Sums) {
  DT_SKIP_WITHOUT_PACKED();
  // Tiles are 6 rows x 64 columns, blocks 256 k x 256 columns: sizes on, below and past each.
  const std::vector<PackedCase> cases = {
      {1, 1, 1, false, 1, 0},     {1, 1, 1, true, 1, 0},       {6, 64, 2, false, 1, 0},
      {7, 65, 3, true, 1, 0},     {5, 63, 7, false, 1, 0},     {13, 17, 1, true, 1, 0},
      {37, 130, 511, false, 1, 0}, {12, 256, 512, false, 1, 0}, {13, 257, 513, true, 1, 0},
      {3, 300, 1025, false, 1, 0}, {70, 45, 131, true, 1, 1},   {70, 45, 131, false, 0.5f, 2},
      {8, 70, 255, false, 1, 1},  {9, 70, 256, true, 1, 0},    {10, 70, 257, false, 2, 0.5f},
      {19, 40, 600, true, -1.5f, 0.25f}, {1, 300, 77, false, 1, 1}, {100, 1, 50, false, 1, 1},
  };
  for (PackedIsa isa : cpu_packed_isas()) {
    SCOPED_TRACE(test::packed_isa_name(isa));
    ScopedPackedIsa scoped(isa);
    for (const PackedCase& t : cases) expect_packed_matches_f64(t);
  }
}

// gemm_f32_packing (W packed block by block during the call, for weights without a packed copy)
// gives gemm_f32_packed's bits against PackedWeight of the same W, at every shape of the f64 test,
// for a row-major W, a transposed view and rows with padding between them (w_rs > k), at each
// kernel width; beta == 0 ignores NaN in c, and an empty k gives beta * c.
TEST(GemmF32Packed, PackingDuringTheCallIsBitwiseThePackedWeight) {
  DT_SKIP_WITHOUT_PACKED();
  const std::vector<PackedCase> cases = {
      {1, 1, 1, false, 1, 0},     {7, 65, 3, true, 1, 0},      {5, 63, 7, false, 1, 0},  {13, 17, 1, true, 1, 0},
      {37, 130, 511, false, 1, 0}, {13, 257, 513, true, 1, 0}, {3, 300, 1025, false, 1, 0}, {70, 45, 131, true, 1, 1},
      {10, 70, 257, false, 2, 0.5f}, {19, 40, 600, true, -1.5f, 0.25f}, {100, 1, 50, false, 1, 1}, {64, 512, 17, false, 1, 0},
  };
  for (PackedIsa isa : cpu_packed_isas()) {
    SCOPED_TRACE(test::packed_isa_name(isa));
    ScopedPackedIsa scoped(isa);
    for (const PackedCase& t : cases)
      for (int64_t pad : {0, 5}) {
        SCOPED_TRACE(testing::Message() << "m " << t.m << " n " << t.n << " k " << t.k << " transposed "
                                        << t.w_transposed << " pad " << pad);
        // W [n, k] at w[j * w_rs + p * w_cs]: rows pad floats apart beyond their k (or columns beyond n).
        const int64_t w_rs = t.w_transposed ? 1 : t.k + pad, w_cs = t.w_transposed ? t.n + pad : 1;
        const Tensor storage = uniform({t.w_transposed ? t.k * (t.n + pad) : t.n * (t.k + pad)}, DType::f32, 52, -1, 1);
        const float* w = storage.data<float>();
        const Tensor a = uniform({t.m, t.k}, DType::f32, 51, -2, 2), c0 = uniform({t.m, t.n}, DType::f32, 53, -4, 4);
        Tensor once = c0.clone(), during = c0.clone();
        gemm_f32_packed(t.m, t.alpha, a.data<float>(), t.k, PackedWeight(w, t.n, t.k, w_rs, w_cs), t.beta,
                        once.data<float>(), t.n);
        gemm_f32_packing(t.m, t.alpha, a.data<float>(), t.k, w, t.n, t.k, w_rs, w_cs, t.beta, during.data<float>(), t.n);
        ASSERT_EQ(std::memcmp(once.raw_data(), during.raw_data(), once.nbytes()), 0);
      }
  }
  const Tensor a = Tensor::ones({3, 4}), w = Tensor::ones({5, 4});
  Tensor c = Tensor::full({3, 5}, std::nan(""));
  gemm_f32_packing(3, 1, a.data<float>(), 4, w.data<float>(), 5, 4, 4, 1, 0, c.data<float>(), 5);
  EXPECT_EQ(c.to_doubles(), std::vector<double>(15, 4.0));
  c.fill_(3);
  gemm_f32_packing(3, 1, a.data<float>(), 4, w.data<float>(), 5, 0, 4, 1, 0.5f, c.data<float>(), 5);
  EXPECT_EQ(c.to_doubles(), std::vector<double>(15, 1.5));
}

// The AVX2 6 x 16 kernels compute each element with the AVX-512 kernels' FMAs in the same order:
// the two give the same bits, on ragged tiles, masked panels, blocks (the attention's tiles),
// alpha and beta. Needs an AVX-512 CPU to run both.
TEST(GemmF32Packed, Avx2AndAvx512AreBitwiseEqual) {
  DT_SKIP_WITHOUT_PACKED();
  if (cpu_packed_isas().size() < 2) {
    EXPECT_THROW(set_packed_isa(PackedIsa::avx512), ValueError);
    GTEST_SKIP() << "this CPU has no AVX-512: only the AVX2 kernels run here (checked against f64 sums)";
  }
  struct Case {
    int64_t m, n, k, j0, j1, k0, k1;
    float alpha, beta;
  };
  for (const Case& t : std::vector<Case>{{41, 150, 700, 0, 150, 0, 700, 1, 0}, {7, 65, 3, 0, 65, 0, 3, -1.5f, 0.25f},
                                         {37, 300, 600, 64, 129, 256, 511, 1, 1}, {13, 257, 513, 256, 257, 512, 513, 2, 0}}) {
    SCOPED_TRACE(testing::Message() << "m " << t.m << " n " << t.n << " k " << t.k);
    const Tensor a = uniform({t.m, t.k}, DType::f32, 21, -1, 1), w = uniform({t.n, t.k}, DType::f32, 22, -1, 1);
    const Tensor c0 = uniform({t.m, t.j1 - t.j0}, DType::f32, 23, -2, 2);
    const PackedWeight packed(w.data<float>(), t.n, t.k, t.k, 1);
    std::vector<std::vector<float>> out;
    for (PackedIsa isa : {PackedIsa::avx2, PackedIsa::avx512}) {
      ScopedPackedIsa scoped(isa);
      Tensor c = c0.clone();
      gemm_f32_packed_block(t.m, t.alpha, a.data<float>() + t.k0, t.k, packed, t.j0, t.j1, t.k0, t.k1, t.beta,
                            c.data<float>(), t.j1 - t.j0);
      out.emplace_back(c.data<float>(), c.data<float>() + c.numel());
    }
    EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)), 0);
  }
}

// beta == 0 ignores c's contents, NaN included (outputs are uninitialized).
TEST(GemmF32Packed, BetaZeroIgnoresTheOutputsContents) {
  DT_SKIP_WITHOUT_PACKED();
  const Tensor a = Tensor::ones({3, 4}), w = Tensor::ones({5, 4});
  Tensor c = Tensor::full({3, 5}, std::nan(""));
  gemm_f32_packed(3, 1, a.data<float>(), 4, PackedWeight(w.data<float>(), 5, 4, 4, 1), 0, c.data<float>(), 5);
  EXPECT_EQ(c.to_doubles(), std::vector<double>(15, 4.0));
}

// Any cut of the rows of A (the threads' row panels) or of W (a column-sharded weight) gives the
// bits of the whole product: ragged tiles and masked panels run the full tile's instructions.
TEST(GemmF32Packed, SplitsOfRowsAndColumnsAreBitwiseTheWhole) {
  DT_SKIP_WITHOUT_PACKED();
  for (PackedIsa isa : cpu_packed_isas()) {
    SCOPED_TRACE(test::packed_isa_name(isa));
    ScopedPackedIsa scoped(isa);
    const int64_t m = 41, n = 150, k = 700;
    const Tensor a = uniform({m, k}, DType::f32, 7, -1, 1), w = uniform({n, k}, DType::f32, 8, -1, 1);
    std::vector<float> whole(size_t(m * n)), parts(size_t(m * n));
    const PackedWeight packed(w.data<float>(), n, k, k, 1);
    gemm_f32_packed(m, 1, a.data<float>(), k, packed, 0, whole.data(), n);
    for (int64_t r0 = 0, r1 = 0; r0 < m; r0 = r1) {  // rows cut at 5, 12, 19, ... (off the 6-row tiles)
      r1 = std::min(m, r0 + 7 - (r0 == 0 ? 2 : 0));
      gemm_f32_packed(r1 - r0, 1, a.data<float>() + r0 * k, k, packed, 0, parts.data() + r0 * n, n);
    }
    EXPECT_EQ(std::memcmp(whole.data(), parts.data(), whole.size() * sizeof(float)), 0);
    for (int64_t j0 : {0, 37, 100}) {  // W's rows [j0, j0 + 50): columns [j0, j0 + 50) of C
      const PackedWeight slice(w.data<float>() + j0 * k, 50, k, k, 1);
      std::vector<float> c(size_t(m * 50));
      gemm_f32_packed(m, 1, a.data<float>(), k, slice, 0, c.data(), 50);
      for (int64_t i = 0; i < m; ++i)
        EXPECT_EQ(std::memcmp(c.data() + i * 50, whole.data() + i * n + j0, 50 * sizeof(float)), 0) << "row " << i;
  }
  }
}

// A block of the product (the attention kernel's score and value tiles) against the f64 sums of
// its products, and bitwise against the same elements of the whole product when k is whole; k
// ranges that start at a k block and end anywhere (a causal diagonal key block), columns that
// start at a panel and end anywhere, beta 0 and 1; a column-major W (vᵀ) packs to the same bits
// as its row-major copy.
TEST(GemmF32Packed, BlocksMatchF64SumsAndTheWholeProduct) {
  DT_SKIP_WITHOUT_PACKED();
  const int64_t m = 37, n = 300, k = 600;
  for (PackedIsa isa : cpu_packed_isas()) {
    SCOPED_TRACE(test::packed_isa_name(isa));
    ScopedPackedIsa scoped(isa);
    const Tensor a = uniform({m, k}, DType::f32, 11, -1, 1), w = uniform({n, k}, DType::f32, 12, -1, 1);
    const Tensor c0 = uniform({m, n}, DType::f32, 13, -2, 2);
    const PackedWeight packed(w.data<float>(), n, k, k, 1);
    std::vector<float> whole(size_t(m * n));
    gemm_f32_packed(m, 1, a.data<float>(), k, packed, 0, whole.data(), n);
    struct Block {
      int64_t j0, j1, k0, k1;
    };
    for (const Block& b : std::vector<Block>{{0, 300, 0, 600}, {64, 129, 0, 600}, {256, 300, 256, 257},
                                             {0, 1, 512, 600}, {128, 256, 256, 511}, {192, 300, 0, 5}}) {
      for (float beta : {0.f, 1.f}) {
        SCOPED_TRACE(testing::Message() << "columns [" << b.j0 << ", " << b.j1 << ") k [" << b.k0 << ", " << b.k1
                                        << ") beta " << beta);
        const int64_t cols = b.j1 - b.j0;
        const Tensor a_blk = a.narrow(1, b.k0, b.k1 - b.k0).contiguous();
        const Tensor w_blk = w.narrow(0, b.j0, cols).narrow(1, b.k0, b.k1 - b.k0);
        const Tensor c_blk0 = c0.narrow(1, b.j0, cols).contiguous();
        Tensor c = c_blk0.clone();
        gemm_f32_packed_block(m, 1, a.data<float>() + b.k0, k, packed, b.j0, b.j1, b.k0, b.k1, beta, c.data<float>(),
                              cols);
        test::expect_gemm_matches_f64(c, a_blk, w_blk.transpose(0, 1), c_blk0, 1, beta);
        if (b.k0 == 0 && b.k1 == k && beta == 0) {
          for (int64_t i = 0; i < m; ++i) {
            const float* want = whole.data() + i * n + b.j0;
            EXPECT_EQ(std::memcmp(c.data<float>() + i * cols, want, size_t(cols) * sizeof(float)), 0) << "row " << i;
          }
        }
      }
    }
  }
  // W = vᵀ read through v [k, n] (W's column stride is v's row stride, plus padding: 70).
  const Tensor v = uniform({k, n + 70}, DType::f32, 14, -1, 1).narrow(1, 0, n);
  const PackedWeight from_columns(v.data<float>(), n, k, 1, n + 70);
  const Tensor vt = v.transpose(0, 1).contiguous();
  const PackedWeight from_rows(vt.data<float>(), n, k, k, 1);
  const int64_t padded = (n + kPackedPanelCols - 1) / kPackedPanelCols * kPackedPanelCols;
  EXPECT_EQ(std::memcmp(from_columns.data(), from_rows.data(), size_t(padded * k) * sizeof(float)), 0);
}

// Returns the largest |a - b| over two tensors of one shape.
double max_abs_difference(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const std::vector<double> av = a.to_doubles(), bv = b.to_doubles();
  double worst = 0;
  for (size_t i = 0; i < av.size(); ++i) worst = std::max(worst, std::abs(av[i] - bv[i]));
  return worst;
}

// linear and linear_binary with a packed weight (bias, activation, batch dims) agree with the sgemm
// path within f32 accumulation error; a non-f32 linear ignores the packed weight. Where linears
// take the packed path (f32_packed_linears), the same linears without the packed copy (their weight
// packed during the call) give its bits, linear_into included.
TEST(GemmF32Packed, LinearThroughThePackedWeightMatchesSgemm) {
  DT_SKIP_WITHOUT_PACKED();
  const int64_t k = 96, n = 70;
  const Tensor x = uniform({3, 50, k}, DType::f32, 1, -1, 1), w = uniform({n, k}, DType::f32, 2, -1, 1);
  const Tensor bias = uniform({n}, DType::f32, 3, -1, 1), times = uniform({3, 50, n}, DType::f32, 4, -1, 1);
  const PackedWeight packed(w.data<float>(), n, k, k, 1);
  const double tol = double(k + 2) * std::ldexp(1.0, -24) * double(k) * 2;  // |terms| <= 1, bias <= 1
  const Tensor with = linear_act(x, w, bias, Activation::silu, &packed);
  {
    ScopedF32GemmPath blas(F32GemmPath::blas);
    EXPECT_LE(max_abs_difference(with, linear_act(x, w, bias, Activation::silu)), tol);
    for (EpilogueOp op : {EpilogueOp::mul, EpilogueOp::add})
      EXPECT_LE(max_abs_difference(linear_binary(x, w, bias, op, times, &packed), linear_binary(x, w, bias, op, times)),
                tol + 2 * std::ldexp(1.0, -24));  // the sum rounds once more, at |value| <= k + 2
  }
  EXPECT_GT(max_abs_difference(with, linear_act(x, w, Tensor(), Activation::silu, &packed)), 0.01);  // bias applied
  const Tensor x64 = x.to(DType::f64), w64 = w.to(DType::f64);
  const Tensor plain64 = linear_act(x64, w64, Tensor(), Activation::none);
  EXPECT_EQ(linear_act(x64, w64, Tensor(), Activation::none, &packed).to_doubles(), plain64.to_doubles());

  ScopedF32GemmPath packed_path(F32GemmPath::packed);
  if (!f32_packed_linears()) return;  // AVX2: linears stay on sgemm (PathNeedsAvx2)
  const auto same = [](const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && std::memcmp(a.contiguous().raw_data(), b.contiguous().raw_data(), a.nbytes()) == 0;
  };
  EXPECT_TRUE(same(linear_act(x, w, bias, Activation::silu), with));
  for (EpilogueOp op : {EpilogueOp::mul, EpilogueOp::add})
    EXPECT_TRUE(same(linear_binary(x, w, bias, op, times), linear_binary(x, w, bias, op, times, &packed)));
  // A transposed view of a row-major [k, n] as the weight, and into a block of a wider output.
  const Tensor wt = w.transpose(0, 1).contiguous().transpose(0, 1);
  EXPECT_TRUE(same(linear_act(x, wt, bias, Activation::none), linear_act(x, w, bias, Activation::none, &packed)));
  const Tensor wide = Tensor::zeros({3, 50, n + 9});
  linear_into(x, w, bias, wide.narrow(2, 4, n));
  EXPECT_TRUE(same(wide.narrow(2, 4, n), linear_act(x, w, bias, Activation::none, &packed)));
}

// The path is chosen by CPU unless set; packed needs AVX2 and FMA, and packs linears' weights only
// on AVX-512 (f32_packed_linears).
TEST(GemmF32Packed, PathNeedsAvx2) {
  if (f32_packed_supported()) {
    ScopedF32GemmPath scoped(F32GemmPath::packed);
    EXPECT_EQ(f32_gemm_path(), F32GemmPath::packed);
    EXPECT_EQ(f32_packed_linears(), packed_isa() == PackedIsa::avx512);
    {
      ScopedPackedIsa narrow(PackedIsa::avx2);
      EXPECT_FALSE(f32_packed_linears());
    }
  } else {
    EXPECT_EQ(f32_gemm_path(), F32GemmPath::blas);
    EXPECT_THROW(set_f32_gemm_path(F32GemmPath::packed), ValueError);
  }
  ScopedF32GemmPath scoped(F32GemmPath::blas);
  EXPECT_EQ(f32_gemm_path(), F32GemmPath::blas);
}

}  // namespace
}  // namespace dt
