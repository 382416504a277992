// The per-rank thread pool (parallel.h) and every kernel family it splits: results are bitwise
// identical for 1, 2 and 3 threads (3 divides none of the work evenly), at uneven sizes large
// enough that each loop really splits (each size is noted against its grain). Inputs are seeded.
#include "dtensor/core/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <set>
#include <stdexcept>

#include "dtensor/kernels/ops.h"
#include "dtensor/kernels/ops_grad.h"
#include "tests/support/ops_test_util.h"

namespace dt {
namespace {

using test::uniform;

// Restores one thread per rank when a test ends (other tests in the binary expect the default).
struct ThreadsGuard {
  ~ThreadsGuard() { set_threads_per_rank(1); }
};

// Returns true when a and b have the same dtype, shape and bytes.
bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  return std::memcmp(ac.raw_data(), bc.raw_data(), size_t(ac.numel()) * itemsize(ac.dtype())) == 0;
}

// Runs f under 1, 2 and 3 threads per rank and expects bitwise equal results.
void expect_same_for_thread_counts(const std::string& what, const std::function<Tensor()>& f) {
  ThreadsGuard guard;
  set_threads_per_rank(1);
  const Tensor ref = f();
  for (int n : {2, 3}) {
    set_threads_per_rank(n);
    EXPECT_TRUE(bitwise_equal(f(), ref)) << what << " differs with " << n << " threads";
  }
}

TEST(ThreadPool, RunsEveryTaskOnceAndRethrows) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.threads(), 3);
  for (int64_t tasks : {0, 1, 2, 7, 100}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(tasks));
    pool.run(tasks, [&](int64_t i) { hits[size_t(i)]++; });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
  EXPECT_THROW(pool.run(5, [](int64_t i) { if (i == 3) throw std::runtime_error("task 3"); }), std::runtime_error);
  std::atomic<int> after{0};
  pool.run(4, [&](int64_t) { after++; });  // the pool still works after a failed job
  EXPECT_EQ(after.load(), 4);
}

TEST(ThreadPool, RejectsBadCounts) {
  EXPECT_THROW(ThreadPool(0), ValueError);
  EXPECT_THROW(set_threads_per_rank(0), ValueError);
  EXPECT_GE(default_threads_per_rank(1), 1);
  EXPECT_EQ(default_threads_per_rank(1 << 20), 1);
}

TEST(ParallelFor, CoversTheRangeInDisjointPiecesAndNestsSerially) {
  ThreadsGuard guard;
  set_threads_per_rank(3);
  for (int64_t n : {0, 1, 5, 1000, 1001}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::atomic<int> ranges{0}, nested_ranges{0};
    parallel_for(n, 10, [&](int64_t b, int64_t e) {
      EXPECT_LT(b, e);
      ranges++;
      for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
      parallel_for(100, 1, [&](int64_t, int64_t) { nested_ranges++; });  // inside a task: one call
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1) << "n = " << n;
    EXPECT_EQ(ranges.load(), n == 0 ? 0 : n <= 10 ? 1 : 3) << "n = " << n;
    // A single range is a plain call outside any task, so its nested loop may split (3 ranges).
    EXPECT_EQ(nested_ranges.load(), ranges.load() == 1 ? 3 : ranges.load()) << "n = " << n;
  }
}

// Elementwise loops split at 32 Ki elements: 100,003 elements make 3-4 ranges, starting inside rows
// of the strided views.
TEST(ParallelKernels, ElementwiseBitwiseAcrossThreadCounts) {
  const Tensor x = uniform({103, 971}, DType::f32, 1, -6, 6);
  const Tensor y = uniform({971}, DType::f32, 2);
  const Tensor xt = uniform({971, 103}, DType::f32, 3).transpose(0, 1);  // strided
  const Tensor xb = x.to(DType::bf16);
  expect_same_for_thread_counts("gelu tanh", [&] { return gelu(x, "tanh"); });
  expect_same_for_thread_counts("gelu of a transpose", [&] { return gelu(xt); });
  expect_same_for_thread_counts("exp bf16", [&] { return exp(xb); });
  expect_same_for_thread_counts("add broadcast", [&] { return add(x, y); });
  expect_same_for_thread_counts("mul strided", [&] { return mul(x, xt); });
  expect_same_for_thread_counts("where", [&] { return where(gt(x, xt), x, y); });
}

// Reductions split their outputs (32 Ki elements read per range): rows, columns and permuted.
TEST(ParallelKernels, ReductionsBitwiseAcrossThreadCounts) {
  const Tensor x = uniform({37, 301, 29}, DType::f32, 4);
  expect_same_for_thread_counts("sum last", [&] { return sum(x, {2}); });
  expect_same_for_thread_counts("sum first", [&] { return sum(x, {0}); });
  expect_same_for_thread_counts("mean middle", [&] { return mean(x, {1}); });
  expect_same_for_thread_counts("amax last two", [&] { return amax(x, {1, 2}); });
  expect_same_for_thread_counts("sum all", [&] { return sum(x); });
  expect_same_for_thread_counts("sum i64", [&] { return sum(uniform({1001, 67}, DType::i64, 5, -9, 9), {1}); });
}

// Row kernels split whole rows (16 Ki elements per range): 517 rows of 263.
TEST(ParallelKernels, RowKernelsBitwiseAcrossThreadCounts) {
  const Tensor x = uniform({11, 47, 263}, DType::f32, 6, -8, 8);
  const Tensor w = uniform({263}, DType::f32, 7), b = uniform({263}, DType::f32, 8);
  expect_same_for_thread_counts("softmax", [&] { return softmax(x, -1); });
  expect_same_for_thread_counts("softmax dim 1", [&] { return softmax(x, 1); });
  expect_same_for_thread_counts("log_softmax bf16", [&] { return log_softmax(x.to(DType::bf16), -1); });
  expect_same_for_thread_counts("layer_norm", [&] { return layer_norm(x, {263}, w, b, 1e-5); });
  expect_same_for_thread_counts("rms_norm f16", [&] { return rms_norm(x.to(DType::f16), {263}, Tensor(), 1e-6); });
}

// Backward kernels: activation derivatives split elements (32 Ki per range), layer_norm's dx
// splits rows and its dweight/dbias columns (each column summing its rows in order), and
// cross_entropy's rows: 517 rows of 263, 103 x 971 elements.
TEST(ParallelKernels, BackwardKernelsBitwiseAcrossThreadCounts) {
  const Tensor x = uniform({103, 971}, DType::f32, 21, -6, 6), g = uniform({103, 971}, DType::f32, 22);
  expect_same_for_thread_counts("gelu_backward", [&] { return gelu_backward(g, x, "none"); });
  expect_same_for_thread_counts("gelu_backward tanh", [&] { return gelu_backward(g, x, "tanh"); });
  expect_same_for_thread_counts("silu_backward bf16", [&] { return silu_backward(g.to(DType::bf16), x.to(DType::bf16)); });
  const Tensor xr = uniform({11, 47, 263}, DType::f32, 23, -8, 8), gr = uniform({11, 47, 263}, DType::f32, 24);
  const Tensor w = uniform({263}, DType::f32, 25);
  for (int part = 0; part < 3; ++part)
    expect_same_for_thread_counts("layer_norm_backward part " + std::to_string(part), [&] {
      const NormGrads r = layer_norm_backward(gr, xr, {263}, w, 1e-5);
      return part == 0 ? r.dx : part == 1 ? r.dweight : r.dbias;
    });
  expect_same_for_thread_counts("rms_norm_backward dweight", [&] {
    return rms_norm_backward(gr, xr, {263}, Tensor(), 1e-6).dweight;
  });
  const Tensor logits = xr.reshape({517, 263});
  const Tensor target = uniform({517}, DType::i64, 26, 0, 263);
  expect_same_for_thread_counts("cross_entropy_backward", [&] {
    return cross_entropy_backward(Tensor::full({}, 1.5, DType::f32), logits, target, 0);
  });
}

// Attention splits (head, query block) tasks: 2 x 3 heads x 9 blocks of 32 at S = 257.
TEST(ParallelKernels, AttentionBitwiseAcrossThreadCounts) {
  for (int64_t S : {7, 257}) {
    const Tensor q = uniform({2, 3, S, 64}, DType::f32, 9), k = uniform({2, 3, S, 64}, DType::f32, 10);
    const Tensor v = uniform({2, 3, S, 48}, DType::f32, 11);
    for (bool causal : {false, true})
      expect_same_for_thread_counts("attention S=" + std::to_string(S) + (causal ? " causal" : ""),
                                    [&] { return scaled_dot_product_attention(q, k, v, causal); });
  }
}

// The attention backward splits q heads (each head's query blocks run in order on one thread) and
// then kv heads for the grouped sum: 2 x 4 q heads on 2 kv heads, S = 257 (9 blocks of 32), a
// float mask; dq, dk, dv and dscores.
TEST(ParallelKernels, AttentionBackwardBitwiseAcrossThreadCounts) {
  const Tensor q = uniform({2, 4, 257, 32}, DType::f32, 40), k = uniform({2, 2, 257, 32}, DType::f32, 41);
  const Tensor v = uniform({2, 2, 257, 24}, DType::f32, 42), g = uniform({2, 4, 257, 24}, DType::f32, 43);
  AttentionOptions o;
  o.mask = uniform({257, 257}, DType::f32, 44);
  for (bool causal : {false, true}) {
    o.causal = causal;
    for (int part = 0; part < 4; ++part)
      expect_same_for_thread_counts(
          "attention backward part " + std::to_string(part) + (causal ? " causal" : ""), [&] {
            const AttentionGrads r = scaled_dot_product_attention_backward(g, q, k, v, o);
            return part == 0 ? r.dq : part == 1 ? r.dk : part == 2 ? r.dv : r.dscores;
          });
  }
}

// GEMMs split into row panels of 48-row multiples of at least 4 MFLOP, the last one taking the
// ragged rows: these shapes make 2-3 panels, transposed operands included. 1001 rows in 2 panels
// is the case that failed with 16-row panels (split at row 496); 128 x 512 x 1000 is the gpt
// test's logits GEMM, which failed with column panels; 100 x 1536 x 72 (48 + 52 rows) failed with
// the SkylakeX kernels when its 4 ragged rows were a panel of their own (a small-matrix kernel).
TEST(ParallelKernels, GemmBitwiseAcrossThreadCounts) {
  const Tensor a = uniform({1001, 301}, DType::f32, 12), b = uniform({301, 517}, DType::f32, 13);
  const Tensor w = uniform({517, 301}, DType::f32, 14), bias = uniform({517}, DType::f32, 15);
  expect_same_for_thread_counts("mm", [&] { return mm(a, b); });
  expect_same_for_thread_counts("mm f64", [&] { return mm(a.to(DType::f64), b.to(DType::f64)); });
  expect_same_for_thread_counts("linear (weight transposed)", [&] { return linear(a, w, bias); });
  expect_same_for_thread_counts("mm of a transpose", [&] { return mm(b.transpose(0, 1), a.transpose(0, 1)); });
  const Tensor h = uniform({128, 512}, DType::f32, 16), lm = uniform({1000, 512}, DType::f32, 17);
  expect_same_for_thread_counts("linear 128 rows", [&] { return linear(h, lm); });
  const Tensor tall = uniform({100, 1536}, DType::f32, 18), narrow = uniform({1536, 72}, DType::f32, 19);
  expect_same_for_thread_counts("mm 100 rows, narrow", [&] { return mm(tall, narrow); });
  expect_same_for_thread_counts("mm 100 rows, both transposed",
                                [&] { return mm(tall.transpose(0, 1).contiguous().transpose(0, 1), narrow.transpose(0, 1).contiguous().transpose(0, 1)); });
  // 1024 rows (21 units of 48, 64 ragged rows): panel edges at the unit nearest an even split
  // (528 + 496 rows on 2 threads), not whole units split evenly.
  const Tensor x1024 = uniform({1024, 64}, DType::f32, 20), w96 = uniform({96, 64}, DType::f32, 21);
  expect_same_for_thread_counts("linear 1024 rows", [&] { return linear_act(x1024, w96, bias.narrow(0, 0, 96), Activation::gelu_tanh); });
  // The fused epilogue: seeded, multiplied and activated per panel (1001 rows: 21 panels of 48).
  expect_same_for_thread_counts("linear + gelu", [&] { return linear_act(a, w, bias, Activation::gelu_tanh); });
  expect_same_for_thread_counts("linear + silu", [&] { return linear_act(a, w, Tensor(), Activation::silu); });
  // bf16: widened to f32, the same panels, each rounded to bf16 (and activated) in its panel.
  const Tensor ab = a.to(DType::bf16), wb = w.to(DType::bf16), bb = bias.to(DType::bf16);
  expect_same_for_thread_counts("linear bf16", [&] { return linear(ab, wb, bb); });
  expect_same_for_thread_counts("linear + gelu bf16", [&] { return linear_act(ab, wb, bb, Activation::gelu_tanh); });
}

TEST(ParallelKernels, ConvBitwiseAcrossThreadCounts) {
  // A patch embedding whose 200 output channels make 4 GEMM row units of 48 (the last with 56 rows)
  // per image, 3 units a panel (grain: 2^22 flops / (2 · 64 positions · 192 taps · 48)), so at
  // most one split; and a padded 3x3 conv in 2 groups of 100 rows through im2col and col2im.
  const Tensor x = uniform({2, 3, 64, 64}, DType::f32, 21), w = uniform({200, 3, 8, 8}, DType::f32, 22);
  const Tensor bias = uniform({200}, DType::f32, 23);
  const ConvParams patch{{8, 8}, {0, 0, 0, 0}, {1, 1}, 1};
  const Tensor dy = uniform(conv_output_shape(x.shape(), w.shape(), patch), DType::f32, 24);
  expect_same_for_thread_counts("conv", [&] { return conv(x, w, bias, patch); });
  expect_same_for_thread_counts("conv dx", [&] { return conv_backward_input(dy, w, x.shape(), patch); });
  expect_same_for_thread_counts("conv dw", [&] { return conv_backward_weight(dy, x, w.shape(), patch); });
  const Tensor x2 = uniform({1, 16, 24, 24}, DType::f32, 25), w2 = uniform({200, 8, 3, 3}, DType::f32, 26);
  const ConvParams same{{1, 1}, {1, 1, 1, 1}, {1, 1}, 2};
  const Tensor dy2 = uniform(conv_output_shape(x2.shape(), w2.shape(), same), DType::f32, 27);
  expect_same_for_thread_counts("grouped conv", [&] { return conv(x2, w2, Tensor(), same); });
  expect_same_for_thread_counts("grouped conv dx", [&] { return conv_backward_input(dy2, w2, x2.shape(), same); });
  expect_same_for_thread_counts("grouped conv dw", [&] { return conv_backward_weight(dy2, x2, w2.shape(), same); });
}

}  // namespace
}  // namespace dt
