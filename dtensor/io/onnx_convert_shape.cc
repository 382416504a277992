// Converters of the ONNX ops that move or reshape data without computing on it (Reshape, Transpose,
// Concat, Split, Slice, ...) and of the shape queries Shape and Size, answered at import.
#include <algorithm>
#include <cmath>

#include "dtensor/core/error.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/io/onnx_importer.h"

namespace dt::io::onnx_internal {

// ---- shapes ----

void conv_shape(Importer& im, const onnx::NodeProto&) {
  const Shape s = im.type_of(0).shape;
  const int64_t r = int64_t(s.size());
  auto clampd = [&](int64_t d) { return std::clamp<int64_t>(d < 0 ? d + r : d, 0, r); };
  const int64_t start = clampd(im.attr_int("start", 0)), end = clampd(im.attr_int("end", r));
  std::vector<int64_t> v;
  for (int64_t d = start; d < end; ++d) v.push_back(s[size_t(d)]);
  im.set_out_const(0, Tensor::from_vector<int64_t>(v, {int64_t(v.size())}));
}

void conv_size(Importer& im, const onnx::NodeProto&) {
  im.set_out_const(0, Tensor::full({}, double(numel(im.type_of(0).shape)), DType::i64));
}

void conv_reshape(Importer& im, const onnx::NodeProto&) {
  std::vector<int64_t> shape = im.const_ints(1);
  const Shape x = im.type_of(0).shape;
  if (!im.attr_int("allowzero", 0))
    for (size_t d = 0; d < shape.size(); ++d)
      if (shape[d] == 0) {
        if (d >= x.size()) DT_THROW(ShapeError) << im.where() << ": shape " << shape_str(shape) << " copies dim " << d << " of " << shape_str(x);
        shape[d] = x[d];
      }
  im.set_out(0, im.b().reshape(im.in(0), Shape(shape.begin(), shape.end())));
}

std::vector<int64_t> axes_input_or_attr(Importer& im, int input, const char* attr) {
  if (im.opset() >= 13 && im.has_input(input)) return im.const_ints(input);
  return im.attr_ints(attr);
}

void conv_unsqueeze(Importer& im, const onnx::NodeProto&) {
  im.set_out(0, rec(im, OpKind::unsqueeze, {im.in(0)}, {{"dims", axes_input_or_attr(im, 1, "axes")}}));
}

void conv_squeeze(Importer& im, const onnx::NodeProto&) {
  im.set_out(0, rec(im, OpKind::squeeze, {im.in(0)}, {{"dims", axes_input_or_attr(im, 1, "axes")}}));
}

// ONNX Flatten makes 2-d: [prod(dims < axis), prod(dims >= axis)].
void conv_flatten(Importer& im, const onnx::NodeProto&) {
  const Shape x = im.type_of(0).shape;
  const int64_t axis = im.attr_int("axis", 1);
  const int64_t a = axis < 0 ? axis + int64_t(x.size()) : axis;
  if (a < 0 || a > int64_t(x.size())) DT_THROW(ValueError) << im.where() << ": axis " << axis << " out of range";
  int64_t lead = 1, rest = 1;
  for (int64_t d = 0; d < int64_t(x.size()); ++d) (d < a ? lead : rest) *= x[size_t(d)];
  im.set_out(0, im.b().reshape(im.in(0), {lead, rest}));
}

void conv_transpose(Importer& im, const onnx::NodeProto&) {
  std::vector<int64_t> perm = im.attr_ints("perm");
  const int64_t r = im.type_of(0).rank();
  if (perm.empty())
    for (int64_t d = r - 1; d >= 0; --d) perm.push_back(d);
  Slot& s = im.slot(0);
  if (s.is_const && !s.initializer.empty() && perm == std::vector<int64_t>{1, 0}) {
    // Keep the initializer's name: MatMul may turn Transpose(W) into linear(x, W).
    Slot out;
    out.is_const = true;
    out.constant = s.constant.transpose(0, 1).contiguous();
    out.transpose_of = s.initializer;
    out.trainable = s.trainable;
    return im.set_out_slot(0, std::move(out));
  }
  im.set_out(0, im.b().permute(im.in(0), perm));
}

void conv_concat(Importer& im, const onnx::NodeProto&) {
  std::vector<Value*> xs;
  for (int i = 0; i < im.num_inputs(); ++i) {
    Value* v = im.in(i);
    if (v->type.numel() == 0 && v->type.rank() == 1) continue;  // exporters concat empty shape pieces
    xs.push_back(v);
  }
  if (xs.empty()) xs.push_back(im.in(0));
  im.set_out(0, xs.size() == 1 ? rec(im, OpKind::clone, {xs[0]}) : im.b().cat(xs, im.attr_int("axis", 0)));
}

void conv_split(Importer& im, const onnx::NodeProto& n) {
  const int64_t axis = im.attr_int("axis", 0);
  const Shape x = im.type_of(0).shape;
  const int64_t d = normalize_dim(axis, int64_t(x.size()));
  std::vector<int64_t> sizes = im.opset() >= 13 ? (im.has_input(1) ? im.const_ints(1) : std::vector<int64_t>{})
                                                : im.attr_ints("split");
  if (sizes.empty()) {
    const int64_t k = n.output_size(), len = x[size_t(d)];
    const int64_t piece = (len + k - 1) / k;
    for (int64_t at = 0; at < len; at += piece) sizes.push_back(std::min(piece, len - at));
  }
  std::vector<Value*> parts = im.b().split_sizes(im.in(0), sizes, d);
  if (int(parts.size()) != n.output_size())
    DT_THROW(ValueError) << im.where() << ": " << parts.size() << " pieces for " << n.output_size() << " outputs";
  for (int k = 0; k < n.output_size(); ++k) im.set_out(k, parts[size_t(k)]);
}

void conv_slice(Importer& im, const onnx::NodeProto&) {
  const Shape x = im.type_of(0).shape;
  std::vector<int64_t> starts, ends, axes, steps;
  if (im.opset() >= 10) {
    starts = im.const_ints(1);
    ends = im.const_ints(2);
    if (im.has_input(3)) axes = im.const_ints(3);
    if (im.has_input(4)) steps = im.const_ints(4);
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (starts.size() != ends.size() || axes.size() != starts.size() || steps.size() != starts.size())
    DT_THROW(ValueError) << im.where() << ": starts, ends, axes and steps differ in length";
  Value* v = im.in(0);
  for (size_t i = 0; i < starts.size(); ++i) {
    if (steps[i] < 1) DT_THROW(ValueError) << im.where() << ": step " << steps[i] << " is not supported (only positive steps)";
    const int64_t d = normalize_dim(axes[i], int64_t(x.size()));
    const int64_t len = x[size_t(d)];
    auto clampi = [&](int64_t e) { return std::clamp<int64_t>(e < 0 ? e + len : e, 0, len); };
    const int64_t s = clampi(starts[i]), e = clampi(ends[i]);
    v = im.b().slice(v, d, s, std::max(s, e), steps[i]);
  }
  if (v == im.in(0)) v = rec(im, OpKind::clone, {v});
  im.set_out(0, v);
}

// Expand broadcasts both ways (numpy): the result is broadcast(x.shape, shape).
void conv_expand(Importer& im, const onnx::NodeProto&) {
  const std::vector<int64_t> s = im.const_ints(1);
  const Shape target = broadcast_shapes(im.type_of(0).shape, Shape(s.begin(), s.end()));
  im.set_out(0, rec(im, OpKind::expand, {im.in(0)}, {{"shape", std::vector<int64_t>(target.begin(), target.end())}}));
}

void add_shape_converters(ConverterTable& t) {
  t.emplace("Concat", conv_concat);
  t.emplace("Expand", conv_expand);
  t.emplace("Flatten", conv_flatten);
  t.emplace("Reshape", conv_reshape);
  t.emplace("Shape", conv_shape);
  t.emplace("Size", conv_size);
  t.emplace("Slice", conv_slice);
  t.emplace("Split", conv_split);
  t.emplace("Squeeze", conv_squeeze);
  t.emplace("Transpose", conv_transpose);
  t.emplace("Unsqueeze", conv_unsqueeze);
}

}  // namespace dt::io::onnx_internal
