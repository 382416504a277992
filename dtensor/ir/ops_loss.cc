// Losses, both reduced to a scalar mean as PyTorch's default reduction="mean":
//   mse_loss(input, target)        = mean((input - target)^2)
//   cross_entropy(logits [N, C], target [N] int) = -mean_i log_softmax(logits)[i, target[i]]
#include "dtensor/core/ops.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {
namespace {

void infer_mse(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::require_same_dtype(node);
  infer_util::require_floating(node, 0);
  if (node.operands[0]->type.shape != node.operands[1]->type.shape)
    DT_THROW(ShapeError) << "mse_loss input " << type_str(node.operands[0]->type) << " and target "
                         << type_str(node.operands[1]->type) << " differ";
  out.push_back({node.operands[0]->type.dtype, {}});
}

void run_mse(const KernelArgs& a) {
  Tensor d = dt::sub(a.in[0], a.in[1]);
  a.out[0] = dt::mean(dt::mul(d, d));
}

void infer_cross_entropy(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::require_floating(node, 0);
  infer_util::require_rank(node, 0, 2);
  infer_util::require_rank(node, 1, 1);
  const TensorType& logits = node.operands[0]->type;
  const TensorType& target = node.operands[1]->type;
  if (target.dtype != DType::i64 && target.dtype != DType::i32)
    DT_THROW(DTypeError) << "cross_entropy expects integer targets, got " << type_str(target);
  if (target.shape[0] != logits.shape[0])
    DT_THROW(ShapeError) << "cross_entropy target " << type_str(target) << " does not match logits "
                         << type_str(logits);
  out.push_back({logits.dtype, {}});
}

// Picks log_softmax(logits)[i, target[i]] with a one-hot mask (no gather kernel needed).
void run_cross_entropy(const KernelArgs& a) {
  const Tensor& logits = a.in[0];
  const int64_t n = logits.size(0), c = logits.size(1);
  Tensor target = a.in[1].to(DType::i64);
  for (int64_t i = 0; i < n; ++i) {
    int64_t t = int64_t(target.at({i}));
    if (t < 0 || t >= c) DT_THROW(ValueError) << "cross_entropy target " << t << " out of range for " << c << " classes";
  }
  Tensor logp = dt::log_softmax(logits, 1);
  Tensor classes = Tensor::arange(c).view({1, c});
  Tensor onehot = dt::eq(classes, target.reshape({n, 1}));
  Tensor picked = dt::where(onehot, logp, Tensor::zeros({}, logp.dtype()));
  a.out[0] = dt::neg(dt::mean(dt::sum(picked, {1})));
}

}  // namespace

void register_loss_ops(OpTable& t) {
  t.add({.kind = OpKind::mse_loss, .operands = {{"input"}, {"target"}}, .attrs = {},
         .infer = infer_mse, .kernel = run_mse});
  t.add({.kind = OpKind::cross_entropy, .operands = {{"logits"}, {"target"}}, .attrs = {},
         .infer = infer_cross_entropy, .kernel = run_cross_entropy});
}

}  // namespace dt::ir
