// gelu with its derivative in one pass (ops_grad.h), for a training step that runs gelu forward
// and gelu_backward on the same pre-activation x.
//
// The value and derivative kernels share their expensive parts (fast_math_grad.h): exp(-x²/2),
// erfc's factor and erf's polynomial (exact), or t, exp(-|t|) and 1/(1 + e^-|t|) (tanh). On the
// fma path (activation_fma.h) the tanh form's value and derivative come from its FMA kernels in
// one pass instead: the anchor gpt's four gelu nodes of a training step (Intel Xeon, one thread)
// took 21.3 ms with the scalar derivative, 9.3 ms this way.
// Measured on a [4, 256, 2048] pre-activation (the anchor gpt's; one thread, Zen 4, AVX-512
// clones, min of 5), apart vs here plus the backward's product grad · gelu'(x):
//   tanh:  gelu 1.75 + gelu_backward 2.80 = 4.55 ms;  both 2.78 + product 1.28 = 4.06 ms
//   exact: gelu 3.30 + gelu_backward 3.68 = 6.98 ms;  both 4.28 + product 1.45 = 5.73 ms
// The derivative is compute-bound, which is also why applying it in the input-gradient GEMM's
// epilogue saves nothing at one thread: sgemm on row panels of 48-288 rows of [1024, 512] x
// [512, 2048], each followed by gelu_backward (tanh) while in cache, took 22.9-25.8 ms against
// 19.9 + 3.1 ms for the whole GEMM and the separate op (smaller panels repack B more often).
#include <cstdint>
#include <string>

#include "dtensor/core/error.h"
#include "dtensor/core/parallel.h"
#include "dtensor/core/strided_loop.h"
#include "dtensor/kernels/activation_fma.h"
#include "dtensor/kernels/fast_math_grad.h"
#include "dtensor/kernels/ops_grad.h"
#include "dtensor/kernels/simd_clones.h"

namespace dt {
namespace {

// value = gelu(x) and, over x itself, x = gelu'(x) for n contiguous f32 values (tanh: its tanh
// form), for each CPU's vector width. One array read and written in place: two pointers that may
// alias would make the vectoriser check them at run time and take the scalar loop when they do.
DT_SIMD_CLONES void gelu_and_grad_loop(bool tanh, float* x_then_grad, float* value, int64_t n) {
  if (tanh) {
    for (int64_t i = 0; i < n; ++i) {
      const kernel::ValueAndGrad r = kernel::gelu_tanh_and_grad_f32(x_then_grad[i]);
      value[i] = r.value;
      x_then_grad[i] = r.grad;
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const kernel::ValueAndGrad r = kernel::gelu_and_grad_f32(x_then_grad[i]);
    value[i] = r.value;
    x_then_grad[i] = r.grad;
  }
}

}  // namespace

ActivationAndGrad gelu_and_grad(const Tensor& x, const std::string& approximate, bool overwrite_x) {
  if (approximate != "none" && approximate != "tanh")
    DT_THROW(ValueError) << "gelu approximate must be 'none' or 'tanh', got '" << approximate << "'";
  const bool tanh = approximate == "tanh";
  if (x.dtype() != DType::f32)
    DT_THROW(DTypeError) << "gelu with its derivative supports f32 only, got " << dtype_name(x.dtype());
  ActivationAndGrad r{Tensor::uninitialized(x.shape(), DType::f32),
                      overwrite_x && x.is_contiguous() ? x : x.clone()};
  float* gp = static_cast<float*>(r.derivative.raw_data());
  float* vp = static_cast<float*>(r.value.raw_data());
  // The value must be the gelu op's bits and the derivative gelu_backward's: on the fma path both
  // come from activation_fma.h's kernels, in one pass.
  const bool fma = tanh && uses_activation_fma(Activation::gelu_tanh);
  parallel_for(x.numel(), kElementwiseGrain, [&](int64_t i0, int64_t i1) {
    if (fma) activation_and_grad_fma(Activation::gelu_tanh, gp + i0, vp + i0, gp + i0, i1 - i0);
    else gelu_and_grad_loop(tanh, gp + i0, vp + i0, i1 - i0);
  });
  return r;
}

}  // namespace dt
