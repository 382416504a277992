// Backward kernels: the gradients of the ops that cannot be written as a few forward ops (the
// activations, the norms, softmax, attention, embedding and the losses) and the optimizer updates.
// The IR's backward ops (dtensor/ir/ops/grad.cc, ops_optim.cc) call them.
//
// Every kernel takes the gradient of the forward result (`grad`) and the forward operands it
// needs, and returns gradients with the operands' shapes and dtypes. f32 and f64 compute in their
// own type; bf16 and f16 compute in f32 and round on store. Sums over rows (the norms' mean terms,
// the affine parameters' gradients) accumulate in double in a fixed order, so results do not
// depend on how a caller splits its work.
#pragma once

#include <string>

#include "dtensor/kernels/ops.h"
#include "dtensor/core/tensor.h"

namespace dt {

// Elementwise: grad · f'(x).
Tensor relu_backward(const Tensor& grad, const Tensor& x);
Tensor gelu_backward(const Tensor& grad, const Tensor& x, const std::string& approximate = "none");
Tensor silu_backward(const Tensor& grad, const Tensor& x);

// gelu(x) (approximate 'none' or 'tanh') and its derivative gelu'(x) in one pass, for a caller that keeps
// the derivative from the forward for the backward (the interpreter's ActivationGradFusion):
// value is bitwise gelu(x, approximate), and mul(grad, derivative) is bitwise
// gelu_backward(grad, x, approximate) (a NaN may differ in payload). With overwrite_x and a
// contiguous x, the derivative is written over x's elements and returned as x (a caller that
// owns x and needs it no longer: no third buffer). f32 only (DTypeError otherwise).
// ops_activation_grad.cc.
struct ActivationAndGrad {
  Tensor value, derivative;
};
ActivationAndGrad gelu_and_grad(const Tensor& x, const std::string& approximate = "none", bool overwrite_x = false);

// Gradients of layer_norm / rms_norm with respect to x and the affine parameters (dweight and
// dbias have normalized_shape; they are computed even when the forward had no weight/bias).
// param_grads false: dx only (dweight and dbias undefined), for a caller that gets them elsewhere
// (the IR's backward ops: their second pass over the rows was a third of their time).
struct NormGrads {
  Tensor dx, dweight, dbias;
};
NormGrads layer_norm_backward(const Tensor& grad, const Tensor& x, const Shape& normalized_shape,
                              const Tensor& weight, double eps, bool param_grads = true);
NormGrads rms_norm_backward(const Tensor& grad, const Tensor& x, const Shape& normalized_shape,
                            const Tensor& weight, double eps, bool param_grads = true);

// softmax's gradient from its result y: y · (grad - sum(grad · y, dim)).
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim);

// Gradients of scaled_dot_product_attention(q, k, v, opts) (ops.h): dq, dk, dv (grouped k/v:
// summed over the q heads sharing a kv head) and, for a float mask, dscores, the gradient of the
// scaled scores the mask is added to, of attention_scores_shape (the caller sums it to the mask's
// shape). ops_attention_grad.cc: recomputes the probabilities one block of query rows at a time
// ([32, Sk] of scratch per thread, no [S, Sk] per head; causal blocks skip the masked keys).
struct AttentionGrads {
  Tensor dq, dk, dv, dscores;
};
AttentionGrads scaled_dot_product_attention_backward(const Tensor& grad, const Tensor& q, const Tensor& k,
                                                     const Tensor& v, const AttentionOptions& opts);
AttentionGrads scaled_dot_product_attention_backward(const Tensor& grad, const Tensor& q, const Tensor& k,
                                                     const Tensor& v, bool causal);

// embedding's weight gradient [num_weights, H]: the rows of grad added at their indices (in
// index order, as PyTorch's CPU kernel).
Tensor embedding_backward(const Tensor& grad, const Tensor& indices, int64_t num_weights);

// Gradients of the mean losses with respect to their first operand (grad is the loss's scalar
// gradient).
// `count` is what the mean divides by (elements for mse_loss, rows for cross_entropy); 0 means the
// operand's own count (a sharded operand passes its global count).
Tensor mse_loss_backward(const Tensor& grad, const Tensor& input, const Tensor& target, int64_t count = 0);
// cross_entropy_backward with `max` and `sum_exp` ([N], both or neither) is the loss-parallel form
// on a class shard whose column 0 is class class_start: softmax with the whole row's max and sum of
// exponentials (cross_entropy_max / cross_entropy_sum_exp, all-reduced), the target's one-hot only
// where it falls in the shard (ir/ops/grad.cc).
Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target, int64_t count = 0,
                              const Tensor& max = Tensor(), const Tensor& sum_exp = Tensor(), int64_t class_start = 0);

// Optimizer steps, as torch.optim (PyTorch 1.13 and later, foreach off; same formulas):
//   SGD:   g = grad + wd·p; buf = momentum·buf + g; p -= lr·buf (momentum 0: p -= lr·g). The
//          buffer starts at zero, which gives torch's buf = g on the first step (dampening 0).
//   AdamW: p -= lr·wd·p; m = b1·m + (1-b1)·g; v = b2·v + (1-b2)·g²;
//          p -= lr/(1-b1^t) · m / (sqrt(v)/sqrt(1-b2^t) + eps), where t = step + 1 is the
//          1-based number of this step (`step` counts the steps already taken, as torch's state).
// They update in place: param and the state tensors (momentum_buffer when momentum != 0; exp_avg,
// exp_avg_sq) are overwritten with their new values, grad is read. The fused loops round every
// intermediate to the storage dtype, as the composed tensor ops would: bitwise equal to them.
void sgd_update_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, double lr, double momentum,
                 double weight_decay);
void adamw_update_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                   double step, double lr, double beta1, double beta2, double eps, double weight_decay);

}  // namespace dt
