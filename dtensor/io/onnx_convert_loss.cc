// Converters of the ONNX loss ops and of the activations that are compositions of IR ops:
// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss (what F.cross_entropy and F.nll_loss
// export), LeakyRelu, Softplus.
#include <cmath>

#include "dtensor/core/error.h"
#include "dtensor/io/onnx_importer.h"

namespace dt::io::onnx_internal {
namespace {

Value* scalar(Importer& im, double v, DType dtype) {
  return rec(im, OpKind::full, {}, {{"shape", std::vector<int64_t>{}}, {"value", v}, {"dtype", dtype}});
}

// The cases the IR's losses cover: no per-class weights, no ignore_index, mean or sum reduction.
// Scores [N, C, d1...] with labels [N, d1...] are read as N·d1·... rows of C classes.
struct LossInputs {
  Value* scores;  // [rows, C]
  Value* labels;  // [rows]
  int64_t rows;
  bool sum;
};

LossInputs loss_inputs(Importer& im) {
  if (im.has_input(2)) DT_THROW(ValueError) << im.where() << ": per-class weights are not supported";
  if (im.attr("ignore_index")) DT_THROW(ValueError) << im.where() << ": ignore_index is not supported";
  const std::string reduction = im.attr_str("reduction", "mean");
  if (reduction != "mean" && reduction != "sum")
    DT_THROW(ValueError) << im.where() << ": reduction '" << reduction << "' is not supported (mean or sum)";
  const Shape x = im.type_of(0).shape, t = im.type_of(1).shape;
  if (x.size() < 2 || t.size() != x.size() - 1 || t[0] != x[0])
    DT_THROW(ShapeError) << im.where() << ": scores " << shape_str(x) << " and labels " << shape_str(t)
                         << " are not [N, C, d...] and [N, d...]";
  for (size_t i = 1; i < t.size(); ++i)
    if (t[i] != x[i + 1]) DT_THROW(ShapeError) << im.where() << ": labels " << shape_str(t) << " do not match scores " << shape_str(x);
  Builder& b = im.b();
  Value* scores = im.in(0);
  const int64_t c = x[1], rows = numel(t);
  if (x.size() > 2) {  // [N, C, d...] -> [N, d..., C] -> [rows, C]
    std::vector<int64_t> perm = {0};
    for (int64_t d = 2; d < int64_t(x.size()); ++d) perm.push_back(d);
    perm.push_back(1);
    scores = b.permute(scores, perm);
  }
  scores = b.reshape(scores, {rows, c});
  Value* labels = b.reshape(im.in(1), {rows});
  return {scores, labels, rows, reduction == "sum"};
}

// SoftmaxCrossEntropyLoss(scores, labels) -> loss (, log_prob): cross_entropy over the rows.
void conv_softmax_cross_entropy(Importer& im, const onnx::NodeProto& n) {
  const LossInputs l = loss_inputs(im);
  Value* loss = rec(im, OpKind::cross_entropy, {l.scores, l.labels});
  if (l.sum) loss = im.b().mul(loss, scalar(im, double(l.rows), loss->type.dtype));
  im.set_out(0, loss);
  if (n.output_size() > 1 && !n.output(1).empty())
    im.set_out(1, rec(im, OpKind::log_softmax, {im.in(0)}, {{"dim", int64_t(1)}}));
}

// NegativeLogLikelihoodLoss(input, target): -mean (or -sum) of input[i, target[i]].
void conv_nll_loss(Importer& im, const onnx::NodeProto&) {
  const LossInputs l = loss_inputs(im);
  Value* idx = rec(im, OpKind::unsqueeze, {l.labels}, {{"dims", std::vector<int64_t>{1}}});
  Value* picked = rec(im, OpKind::gather_elements, {l.scores, idx}, {{"dim", int64_t(1)}});
  Value* total = rec(im, l.sum ? OpKind::sum : OpKind::mean, {picked}, {{"dims", std::vector<int64_t>{}}, {"keepdim", false}});
  im.set_out(0, rec(im, OpKind::neg, {total}));
}

// LeakyRelu(x) {alpha = 0.01} = where(x > 0, x, alpha·x).
void conv_leaky_relu(Importer& im, const onnx::NodeProto&) {
  Value* x = im.in(0);
  const DType t = x->type.dtype;
  Value* pos = rec(im, OpKind::gt, {x, scalar(im, 0, t)});
  im.set_out(0, rec(im, OpKind::where, {pos, x, im.b().mul(x, scalar(im, im.attr_float("alpha", 0.01), t))}));
}

// Softplus(x) = log(1 + exp(x)), as relu(x) + log(1 + exp(-|x|)) so that exp never overflows.
void conv_softplus(Importer& im, const onnx::NodeProto&) {
  Builder& b = im.b();
  Value* x = im.in(0);
  Value* e = rec(im, OpKind::exp, {rec(im, OpKind::neg, {rec(im, OpKind::abs, {x})})});
  Value* l = rec(im, OpKind::log, {b.add(e, scalar(im, 1, x->type.dtype))});
  im.set_out(0, b.add(rec(im, OpKind::relu, {x}), l));
}

}  // namespace

void add_loss_converters(ConverterTable& t) {
  t.emplace("SoftmaxCrossEntropyLoss", conv_softmax_cross_entropy);
  t.emplace("NegativeLogLikelihoodLoss", conv_nll_loss);
  t.emplace("LeakyRelu", conv_leaky_relu);
  t.emplace("Softplus", conv_softplus);
}

}  // namespace dt::io::onnx_internal
