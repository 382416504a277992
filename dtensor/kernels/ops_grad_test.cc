// Backward kernels (ops_grad.h) on f32 against their scalar definitions and the f64 path: the
// activation derivatives' vector loop computes bitwise what fast_math_grad.h's scalar kernels do
// (whatever clone the CPU picks) on the portable path, and activation_fma.h's on the fma path, layer_norm's restructured backward matches f64, and the fused
// cross_entropy backward matches its composed formula. Inputs are seeded; sizes are uneven and
// span the activation's branch switches and tails.
#include "dtensor/kernels/ops_grad.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "dtensor/core/blas_kernels.h"
#include "dtensor/kernels/activation_fma.h"
#include "dtensor/kernels/fast_math_grad.h"
#include "dtensor/kernels/ops.h"
#include "tests/support/ops_test_util.h"

namespace dt {
namespace {

using test::uniform;

// The activation paths a test runs: portable, and fma where the CPU has AVX2 and FMA.
std::vector<ActivationPath> activation_paths() {
  if (cpu_isa() < BlasIsa::avx2) return {ActivationPath::portable};
  return {ActivationPath::portable, ActivationPath::fma};
}

// act'(x) as the current path computes it: fast_math_grad.h's scalar kernel, or on the fma path
// (tanh gelu and silu) activation_grad_fma's.
float path_grad(Activation act, float (*scalar)(float), float x) {
  if (!uses_activation_fma(act)) return scalar(x);
  float d;
  activation_grad_fma(act, &x, &d, 1);
  return d;
}

TEST(OpsGrad, ActivationBackwardIsTheScalarKernelBitwise) {
  const Tensor x = uniform({37, 1001}, DType::f32, 1, -20, 20), g = uniform({37, 1001}, DType::f32, 2);
  struct Case {
    Activation act;
    Tensor (*backward)(const Tensor&, const Tensor&);
    float (*d)(float);
  };
  for (ActivationPath path : activation_paths()) {
    const ScopedActivationPath scoped(path);
    SCOPED_TRACE(path == ActivationPath::fma ? "fma" : "portable");
    for (const Case& c :
         {Case{Activation::gelu, [](const Tensor& g, const Tensor& x) { return gelu_backward(g, x, "none"); },
               kernel::gelu_grad_f32},
          Case{Activation::gelu_tanh, [](const Tensor& g, const Tensor& x) { return gelu_backward(g, x, "tanh"); },
               kernel::gelu_tanh_grad_f32},
          Case{Activation::silu, [](const Tensor& g, const Tensor& x) { return silu_backward(g, x); },
               kernel::silu_grad_f32}}) {
      const Tensor got = c.backward(g, x);
      const float* gp = static_cast<const float*>(g.raw_data());
      const float* xp = static_cast<const float*>(x.raw_data());
      const float* o = static_cast<const float*>(got.raw_data());
      int mismatches = 0;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const float want = gp[i] * path_grad(c.act, c.d, xp[i]);
        mismatches += std::memcmp(&want, &o[i], sizeof(float)) != 0;
      }
      EXPECT_EQ(mismatches, 0) << "activation " << int(c.act);
    }
  }
  // relu's derivative is exactly 0 or 1.
  const Tensor r = relu_backward(g, x);
  EXPECT_TRUE(allclose(r, where(gt(x, Tensor::full({}, 0.0, DType::f32)), g, Tensor::full({}, 0.0, DType::f32)), 0, 0));
}

// The activations' tails, subnormal x and special points (ops_test_util.h): the vector loop gives
// the path's kernels' bits there too.
TEST(OpsGrad, ActivationBackwardTailsAreTheScalarKernelBitwise) {
  const std::vector<float> xs = test::activation_tail_inputs();
  const Tensor x = Tensor::from_vector(xs, {int64_t(xs.size())});
  const Tensor g = uniform({int64_t(xs.size())}, DType::f32, 5, 0.5, 2);
  const std::vector<float> gv = g.to_vector<float>();
  for (ActivationPath path : activation_paths()) {
    const ScopedActivationPath scoped(path);
    SCOPED_TRACE(path == ActivationPath::fma ? "fma" : "portable");
    struct Case {
      const char* name;
      Activation act;
      Tensor got;
      float (*d)(float);
    };
    for (const Case& c : {Case{"gelu'", Activation::gelu, gelu_backward(g, x, "none"), kernel::gelu_grad_f32},
                          Case{"gelu_tanh'", Activation::gelu_tanh, gelu_backward(g, x, "tanh"), kernel::gelu_tanh_grad_f32},
                          Case{"silu'", Activation::silu, silu_backward(g, x), kernel::silu_grad_f32}}) {
      const std::vector<float> got = c.got.to_vector<float>();
      int mismatches = 0;
      for (size_t i = 0; i < xs.size(); ++i) {
        const float want = gv[i] * path_grad(c.act, c.d, xs[i]);
        if (std::memcmp(&want, &got[i], sizeof(float)) != 0 && mismatches++ < 3)
          ADD_FAILURE() << c.name << " at x = " << xs[i] << ": " << got[i] << " vs " << want;
      }
      EXPECT_EQ(mismatches, 0) << c.name;
    }
  }
}

// On ordinary inputs (|x| <= 8, gradients in [0.5, 2]: every result and every intermediate of the
// formulas is a normal number) the vector loops must compute no subnormal. They did for every
// element before: a compiler-made copy of the code after exp's clamp, specialised to the clamp
// constant, which if-conversion then ran for all elements (fast_exp.h, clamp_bits). That made
// gelu' 2.6x and tanh-gelu' 2.2x slower than under flush-to-zero.
TEST(OpsGrad, ActivationBackwardComputesNoSubnormalOnOrdinaryInputs) {
  const Tensor x = uniform({4099}, DType::f32, 6, -8, 8), g = uniform({4099}, DType::f32, 7, 0.5, 2);
  EXPECT_FALSE(test::computes_subnormals([&] { gelu_backward(g, x, "none"); })) << "gelu'";
  EXPECT_FALSE(test::computes_subnormals([&] { gelu_backward(g, x, "tanh"); })) << "gelu_tanh'";
  EXPECT_FALSE(test::computes_subnormals([&] { silu_backward(g, x); })) << "silu'";
}

TEST(OpsGrad, ActivationBackwardF32MatchesF64) {
  const Tensor x = uniform({3, 517}, DType::f32, 3, -8, 8), g = uniform({3, 517}, DType::f32, 4);
  const Tensor x64 = x.to(DType::f64), g64 = g.to(DType::f64);
  EXPECT_TRUE(allclose(gelu_backward(g, x, "none").to(DType::f64), gelu_backward(g64, x64, "none"), 1e-6, 1e-6));
  EXPECT_TRUE(allclose(gelu_backward(g, x, "tanh").to(DType::f64), gelu_backward(g64, x64, "tanh"), 1e-6, 1e-6));
  EXPECT_TRUE(allclose(silu_backward(g, x).to(DType::f64), silu_backward(g64, x64), 1e-6, 1e-6));
  // bf16 computes in f32 and rounds once.
  const Tensor xb = x.to(DType::bf16), gb = g.to(DType::bf16);
  EXPECT_TRUE(allclose(silu_backward(gb, xb).to(DType::f64), silu_backward(gb.to(DType::f64), xb.to(DType::f64)), 1e-2, 1e-2));
}

TEST(OpsGrad, LayerNormBackwardF32MatchesF64) {
  const Tensor x = uniform({5, 7, 263}, DType::f32, 5, -3, 3), g = uniform({5, 7, 263}, DType::f32, 6);
  const Tensor w = uniform({263}, DType::f32, 7);
  const NormGrads a = layer_norm_backward(g, x, {263}, w, 1e-5);
  const NormGrads b = layer_norm_backward(g.to(DType::f64), x.to(DType::f64), {263}, w.to(DType::f64), 1e-5);
  EXPECT_TRUE(allclose(a.dx.to(DType::f64), b.dx, 1e-5, 1e-5));
  EXPECT_TRUE(allclose(a.dweight.to(DType::f64), b.dweight, 1e-5, 1e-5));
  EXPECT_TRUE(allclose(a.dbias.to(DType::f64), b.dbias, 1e-5, 1e-5));
  // Without the parameters' gradients: the same dx, bitwise.
  const NormGrads c = layer_norm_backward(g, x, {263}, w, 1e-5, /*param_grads=*/false);
  EXPECT_TRUE(allclose(c.dx, a.dx, 0, 0));
  EXPECT_FALSE(c.dweight.defined() || c.dbias.defined());
}

TEST(OpsGrad, CrossEntropyBackwardIsTheComposedFormula) {
  const Tensor logits = uniform({129, 1003}, DType::f32, 8, -5, 5);
  const Tensor target = uniform({129}, DType::i64, 9, 0, 1003);
  const Tensor grad = Tensor::full({}, 0.75, DType::f32);
  const Tensor got = cross_entropy_backward(grad, logits, target, 0);
  const Tensor onehot = eq(Tensor::arange(1003).view({1, 1003}), target.reshape({129, 1})).to(DType::f32);
  const Tensor want = mul(sub(softmax(logits, 1), onehot), 0.75 / 129);
  EXPECT_TRUE(allclose(got, want, 0, 0));  // the same roundings, bitwise
  const Tensor bad = Tensor::full({129}, 1003, DType::i64);
  EXPECT_THROW(cross_entropy_backward(grad, logits, bad, 0), ValueError);
}

// The loss-parallel pieces on two uneven class shards (ir/ops/loss.cc): the statistics combined as
// the all_reduces would give cross_entropy's loss, and the shards' backward, side by side, its
// gradient. With one shard holding every class, the backward is bitwise the plain one.
TEST(OpsGrad, LossParallelPiecesAddUpToCrossEntropy) {
  const int64_t n = 67, c = 1003, split = 411;
  const Tensor logits = uniform({n, c}, DType::f32, 12, -6, 6);
  Tensor target = uniform({n}, DType::i64, 13, 0, c);
  target.data<int64_t>()[0] = 0, target.data<int64_t>()[1] = split - 1, target.data<int64_t>()[2] = split;  // edges
  const Tensor grad = Tensor::full({}, 0.5, DType::f32);
  const Tensor lo = logits.narrow(1, 0, split), hi = logits.narrow(1, split, c - split);  // strided views
  const Tensor m = maximum(cross_entropy_max(lo), cross_entropy_max(hi));
  EXPECT_TRUE(allclose(m, amax(logits, {1}), 0, 0));  // a max is exact
  const Tensor sum = add(cross_entropy_sum_exp(lo, m), cross_entropy_sum_exp(hi, m));
  const Tensor xt = add(cross_entropy_target_logit(lo, target, 0), cross_entropy_target_logit(hi, target, split));
  // Exactly one shard holds each row's target: the other gives 0.
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(xt.at({i}), logits.at({i, target.at({i})})) << "row " << i;
  const double loss = mean(add(sub(log(sum), xt), m)).item();
  EXPECT_NEAR(loss, -mean(log_softmax_at(logits, target)).item(), 2e-6);
  const Tensor dlogits = cat({cross_entropy_backward(grad, lo, target, n, m, sum, 0),
                              cross_entropy_backward(grad, hi, target, n, m, sum, split)}, 1);
  const Tensor want = cross_entropy_backward(grad, logits, target, 0);
  EXPECT_LT(test::max_abs_diff(dlogits, want), 1e-8);
  // One shard of every class, with its own row statistics: the plain backward's bits.
  const Tensor own_m = cross_entropy_max(logits), own_sum = cross_entropy_sum_exp(logits, own_m);
  EXPECT_TRUE(allclose(cross_entropy_backward(grad, logits, target, 0, own_m, own_sum, 0), want, 0, 0));
  // bf16 logits compute in f32 and round once.
  const Tensor lo16 = lo.to(DType::bf16);
  const Tensor got16 = cross_entropy_backward(grad, lo16, target, n, m, sum, 0);
  EXPECT_EQ(got16.dtype(), DType::bf16);
  EXPECT_TRUE(allclose(got16, cross_entropy_backward(grad, lo16.to(DType::f32), target, n, m, sum, 0).to(DType::bf16),
                       0, 0));
  EXPECT_EQ(cross_entropy_sum_exp(lo16, m).dtype(), DType::bf16);
  // Errors: a statistic without the other, or of the wrong length; logits not [N, C].
  EXPECT_THROW(cross_entropy_backward(grad, lo, target, n, m, Tensor(), 0), ShapeError);
  EXPECT_THROW(cross_entropy_backward(grad, lo, target, n, m.narrow(0, 0, n - 1), sum.narrow(0, 0, n - 1), 0),
               ShapeError);
  EXPECT_THROW(cross_entropy_sum_exp(lo, m.narrow(0, 0, 3)), ShapeError);
  EXPECT_THROW(cross_entropy_max(logits.flatten()), ShapeError);
  EXPECT_THROW(cross_entropy_target_logit(lo, target.to(DType::f32), 0), DTypeError);
}

}  // namespace
}  // namespace dt
