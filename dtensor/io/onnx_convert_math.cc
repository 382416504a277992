// Converters of the elementwise, reduction, normalisation and linear-algebra ONNX ops, and of the
// ops that make constants (Constant, ConstantOfShape, Range); the shared helpers rec / unary /
// binary the other families use too.
#include <algorithm>
#include <cmath>

#include "dtensor/core/error.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/io/onnx_importer.h"

namespace dt::io::onnx_internal {

DType to_dtype(Importer& im, int64_t onnx_type) { return onnx_dtype(int32_t(onnx_type), im.where()); }

double scalar_in(Importer& im, int i) {
  const Tensor& t = im.const_in(i);
  if (t.numel() != 1) DT_THROW(ValueError) << im.where() << ": input " << i << " must be a scalar, it has " << t.numel() << " elements";
  return t.to_doubles()[0];
}

Value* rec(Importer& im, OpKind op, std::vector<Value*> xs, const ir::NamedAttrs& attrs) {
  return im.b().record(op, std::move(xs), attrs)[0];
}

void unary(Importer& im, OpKind op) { im.set_out(0, rec(im, op, {im.in(0)})); }

// Binary ops broadcast as numpy; ONNX requires equal dtypes too.
void binary(Importer& im, OpKind op) { im.set_out(0, rec(im, op, {im.in(0), im.in(1)})); }

void conv_identity(Importer& im, const onnx::NodeProto&) { im.set_out_slot(0, im.slot(0)); }

// Dropout at inference: the identity (its optional mask output is all true).
void conv_dropout(Importer& im, const onnx::NodeProto& n) {
  if (im.has_input(2) && scalar_in(im, 2) != 0)
    DT_THROW(ValueError) << im.where() << ": training-mode dropout is not supported (import for inference)";
  im.set_out_slot(0, im.slot(0));
  if (n.output_size() > 1 && !n.output(1).empty()) {
    const ir::TensorType t = im.type_of(0);
    im.set_out(1, rec(im, OpKind::full, {}, {{"shape", std::vector<int64_t>(t.shape.begin(), t.shape.end())}, {"value", 1.0}, {"dtype", DType::boolean}}));
  }
}

// Integer Div of ONNX truncates; dtensor's div is floating: compute in f64 and truncate via cast
// (exact for the index arithmetic of shape code).
void conv_div(Importer& im, const onnx::NodeProto&) {
  const DType t = im.type_of(0).dtype;
  if (is_floating(t)) return binary(im, OpKind::div);
  Builder& b = im.b();
  Value* q = b.div(b.cast(im.in(0), DType::f64), b.cast(im.in(1), DType::f64));
  im.set_out(0, b.cast(q, t));
}

void conv_pow(Importer& im, const onnx::NodeProto&) {
  const Tensor& e = im.const_in(1);
  if (e.numel() != 1) DT_THROW(ValueError) << im.where() << ": only a scalar exponent is supported";
  im.set_out(0, rec(im, OpKind::pow, {im.in(0)}, {{"exponent", e.to_doubles()[0]}}));
}

void conv_reciprocal(Importer& im, const onnx::NodeProto&) {
  Value* x = im.in(0);
  Value* one = rec(im, OpKind::full, {}, {{"shape", std::vector<int64_t>{}}, {"value", 1.0}, {"dtype", x->type.dtype}});
  im.set_out(0, im.b().div(one, x));
}

void conv_not(Importer& im, const onnx::NodeProto&) {
  Value* f = rec(im, OpKind::full, {}, {{"shape", std::vector<int64_t>{}}, {"value", 0.0}, {"dtype", DType::boolean}});
  im.set_out(0, rec(im, OpKind::eq, {im.in(0), f}));
}

// A cast to the input's own dtype is the identity (Hugging Face's softmax(..., dtype=f32).to(q.dtype)
// exports two), so that it does not stand between the ops a fusion matches.
void conv_cast(Importer& im, const onnx::NodeProto&) {
  const DType to = to_dtype(im, im.attr_int("to", 1));
  if (im.type_of(0).dtype == to) return im.set_out_slot(0, im.slot(0));
  im.set_out(0, im.b().cast(im.in(0), to));
}

// Clip(x, min, max) = min(max(x, min), max): constant bounds are one clamp; a bound computed from
// the data is maximum / minimum with it.
void conv_clip(Importer& im, const onnx::NodeProto&) {
  double lo = -HUGE_VAL, hi = HUGE_VAL;
  Value* lo_v = nullptr;
  Value* hi_v = nullptr;
  if (im.opset() < 11) {
    lo = im.attr_float("min", lo);
    hi = im.attr_float("max", hi);
  } else {
    if (im.has_input(1) && im.is_const(1)) lo = scalar_in(im, 1);
    else if (im.has_input(1)) lo_v = im.in(1);
    if (im.has_input(2) && im.is_const(2)) hi = scalar_in(im, 2);
    else if (im.has_input(2)) hi_v = im.in(2);
  }
  Value* y = im.in(0);
  if (lo != -HUGE_VAL || hi != HUGE_VAL || (!lo_v && !hi_v)) y = rec(im, OpKind::clamp, {y}, {{"min", lo}, {"max", hi}});
  if (lo_v) y = rec(im, OpKind::maximum, {y, lo_v});
  if (hi_v) y = rec(im, OpKind::minimum, {y, hi_v});
  im.set_out(0, y);
}

// Max / Min of any number of inputs, folded pairwise.
void extremum(Importer& im, OpKind op) {
  Value* acc = im.in(0);
  for (int i = 1; i < im.num_inputs(); ++i) acc = rec(im, op, {acc, im.in(i)});
  im.set_out(0, acc);
}

// ---- linear algebra ----

// MatMul(x, B): `linear` when B is Transpose(W) of an initializer W [out, in] or an initializer
// [in, out] itself (stored transposed), with a following Add of a 1-d initializer bias absorbed.
void conv_matmul(Importer& im, const onnx::NodeProto& n) {
  Slot& bs = im.slot(1);
  const std::string w_name = bs.transpose_of.empty() ? bs.initializer : bs.transpose_of;
  if (im.slot(0).is_const || !bs.is_const || bs.constant.dim() != 2 || w_name.empty() || im.type_of(0).rank() < 1)
    return binary(im, OpKind::matmul);
  // The slot holds B = Wᵀ [in, out] in both cases: W is its transpose.
  Value* weight = im.param(w_name, bs.constant.transpose(0, 1).contiguous());
  Value* bias = nullptr;
  const onnx::NodeProto* add = nullptr;
  const auto users = im.consumers(0);
  if (users.size() == 1 && users[0]->op_type() == "Add" && users[0]->input_size() == 2) {
    add = users[0];
    const std::string& other = add->input(0) == n.output(0) ? add->input(1) : add->input(0);
    const Slot* os = im.find_slot(other);
    if (os && os->is_const && !os->initializer.empty() && os->constant.shape() == Shape{weight->type.shape[0]} &&
        os->constant.dtype() == weight->type.dtype)
      bias = im.param(os->initializer, os->constant);
    else
      add = nullptr;
  }
  Value* y = im.b().linear(im.in(0), weight, bias);
  im.set_out(0, y);
  if (add) im.absorb(add, y);
}

void conv_gemm(Importer& im, const onnx::NodeProto&) {
  const bool ta = im.attr_int("transA", 0), tb = im.attr_int("transB", 0);
  const double alpha = im.attr_float("alpha", 1.0), beta = im.attr_float("beta", 1.0);
  Slot& bs = im.slot(1);
  Builder& b = im.b();
  const bool c_ok = !im.has_input(2) || (im.is_const(2) && !im.slot(2).initializer.empty() && im.type_of(2).rank() == 1);
  if (!ta && alpha == 1.0 && beta == 1.0 && bs.is_const && !bs.initializer.empty() && c_ok && !im.slot(0).is_const) {
    Tensor w = tb ? bs.constant : bs.constant.transpose(0, 1).contiguous();
    Value* weight = im.param(bs.initializer, w);
    Value* bias = im.has_input(2) ? im.in(2) : nullptr;
    if (bias && bias->type.shape != Shape{weight->type.shape[0]}) bias = nullptr;
    Value* y = b.linear(im.in(0), weight, bias);
    if (im.has_input(2) && !bias) y = b.add(y, im.in(2));
    return im.set_out(0, y);
  }
  Value* a = im.in(0);
  Value* bv = im.in(1);
  if (ta) a = b.transpose(a, 0, 1);
  if (tb) bv = b.transpose(bv, 0, 1);
  Value* y = b.matmul(a, bv);
  auto scalar = [&](double v) { return rec(im, OpKind::full, {}, {{"shape", std::vector<int64_t>{}}, {"value", v}, {"dtype", y->type.dtype}}); };
  if (alpha != 1.0) y = b.mul(y, scalar(alpha));
  if (im.has_input(2)) {
    Value* c = im.in(2);
    if (beta != 1.0) c = b.mul(c, scalar(beta));
    y = b.add(y, c);
  }
  im.set_out(0, y);
}

// Conv(X, W, B?) {auto_pad, dilations, group, kernel_shape, pads, strides} over 1 or 2 spatial
// dims: the IR's conv, its padding ONNX's pads (begins, then ends). auto_pad SAME_UPPER / SAME_LOWER
// pad so that out = ceil(in / stride), the odd pad at the end (UPPER) or the beginning (LOWER).
void conv_conv(Importer& im, const onnx::NodeProto&) {
  const ir::TensorType x = im.type_of(0), w = im.type_of(1);
  const int64_t sp = x.rank() - 2;
  if (sp != 1 && sp != 2)
    DT_THROW(ValueError) << im.where() << ": Conv over " << sp << " spatial dims (input " << ir::type_str(x)
                         << ") is not supported: 1-d and 2-d are";
  if (w.rank() != x.rank())
    DT_THROW(ShapeError) << im.where() << ": weight " << ir::type_str(w) << " does not have the rank of X " << ir::type_str(x);
  auto or_ones = [&](const char* name) {
    std::vector<int64_t> v = im.attr_ints(name);
    if (v.empty()) v.assign(size_t(sp), 1);
    if (int64_t(v.size()) != sp)
      DT_THROW(ValueError) << im.where() << ": " << name << " has " << v.size() << " values for " << sp << " spatial dims";
    return v;
  };
  const std::vector<int64_t> strides = or_ones("strides"), dilations = or_ones("dilations");
  const std::vector<int64_t> kernel = im.attr_ints("kernel_shape");
  if (!kernel.empty() && kernel != std::vector<int64_t>(w.shape.begin() + 2, w.shape.end()))
    DT_THROW(ShapeError) << im.where() << ": kernel_shape does not match weight " << ir::type_str(w);
  std::vector<int64_t> pads = im.attr_ints("pads");
  const std::string auto_pad = im.attr_str("auto_pad", "NOTSET");
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    pads.assign(size_t(2 * sp), 0);
    for (int64_t i = 0; i < sp; ++i) {
      const int64_t in = x.shape[size_t(2 + i)], s = strides[size_t(i)];
      const int64_t span = dilations[size_t(i)] * (w.shape[size_t(2 + i)] - 1) + 1;
      const int64_t total = std::max<int64_t>(0, ((in + s - 1) / s - 1) * s + span - in);
      const int64_t small = total / 2, large = total - small;
      pads[size_t(i)] = auto_pad == "SAME_UPPER" ? small : large;
      pads[size_t(sp + i)] = auto_pad == "SAME_UPPER" ? large : small;
    }
  } else if (auto_pad == "VALID" || pads.empty()) {
    if (auto_pad != "VALID" && auto_pad != "NOTSET")
      DT_THROW(ValueError) << im.where() << ": auto_pad '" << auto_pad << "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID";
    pads.assign(size_t(2 * sp), 0);
  }
  if (int64_t(pads.size()) != 2 * sp)
    DT_THROW(ValueError) << im.where() << ": pads has " << pads.size() << " values for " << sp << " spatial dims";
  std::vector<Value*> operands = {im.in(0), im.in(1)};
  if (im.has_input(2)) operands.push_back(im.in(2));
  im.set_out(0, rec(im, OpKind::conv, operands,
                    {{"stride", strides}, {"padding", pads}, {"dilation", dilations}, {"groups", im.attr_int("group", 1)}}));
}

void conv_constant(Importer& im, const onnx::NodeProto& n) {
  for (const auto& a : n.attribute()) {
    if (a.name() == "value") return im.set_out_const(0, tensor_from_proto(a.t(), im.where()));
    if (a.name() == "value_float") return im.set_out_const(0, Tensor::full({}, a.f(), DType::f32));
    if (a.name() == "value_int") return im.set_out_const(0, Tensor::full({}, double(a.i()), DType::i64));
    if (a.name() == "value_floats")
      return im.set_out_const(0, Tensor::from_vector<float>({a.floats().begin(), a.floats().end()}, {a.floats_size()}));
    if (a.name() == "value_ints")
      return im.set_out_const(0, Tensor::from_vector<int64_t>({a.ints().begin(), a.ints().end()}, {a.ints_size()}));
  }
  DT_THROW(ValueError) << im.where() << ": only tensor, float(s) and int(s) constants are supported";
}

void conv_constant_of_shape(Importer& im, const onnx::NodeProto&) {
  const std::vector<int64_t> s = im.const_ints(0);
  double value = 0;
  DType dtype = DType::f32;
  if (const auto* a = im.attr("value")) {
    Tensor v = tensor_from_proto(a->t(), im.where());
    if (v.numel() != 1) DT_THROW(ValueError) << im.where() << ": value must hold one element, it has " << v.numel();
    dtype = v.dtype();
    value = v.to_doubles()[0];
  }
  // A node, not a tensor made here: a huge shape then stays in the graph (kMaxFoldElements).
  checked_numel(Shape(s.begin(), s.end()), im.where());
  im.set_out(0, rec(im, OpKind::full, {}, {{"shape", s}, {"value", value}, {"dtype", dtype}}));
}

void conv_range(Importer& im, const onnx::NodeProto&) {
  const Tensor& st = im.const_in(0);
  const double start = scalar_in(im, 0), limit = scalar_in(im, 1), delta = scalar_in(im, 2);
  if (delta == 0 || !std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta))
    DT_THROW(ValueError) << im.where() << ": start " << start << ", limit " << limit << ", delta " << delta << " is not a range";
  const double count = std::ceil((limit - start) / delta);
  if (count > double(kMaxFoldElements))
    DT_THROW(ValueError) << im.where() << ": a range of " << count << " elements is more than the importer folds (" << kMaxFoldElements << ")";
  im.set_out_const(0, Tensor::arange(start, limit, delta, st.dtype()));
}

void conv_where(Importer& im, const onnx::NodeProto&) {
  im.set_out(0, rec(im, OpKind::where, {im.in(0), im.in(1), im.in(2)}));
}

void conv_softmax(Importer& im, OpKind op) {
  const int64_t r = im.type_of(0).rank();
  const int64_t axis = im.attr_int("axis", im.opset() >= 13 ? -1 : 1);
  if (im.opset() < 13 && normalize_dim(axis, r) != r - 1)
    DT_THROW(ValueError) << im.where() << ": softmax before opset 13 flattens from axis " << axis
                         << "; only the last axis is supported";
  im.set_out(0, rec(im, op, {im.in(0)}, {{"dim", axis}}));
}

void conv_reduce(Importer& im, OpKind op) {
  std::vector<int64_t> axes = im.node().op_type() == "ReduceSum" ? axes_input_or_attr(im, 1, "axes") : im.attr_ints("axes");
  const bool keep = im.attr_int("keepdims", 1);
  if (axes.empty() && im.attr_int("noop_with_empty_axes", 0)) return im.set_out_slot(0, im.slot(0));
  im.set_out(0, rec(im, op, {im.in(0)}, {{"dims", axes}, {"keepdim", keep}}));
}

// LayerNormalization; its optional Mean and InvStdDev outputs (over the dims from `axis`, kept as
// 1s) are computed apart, in the stash type (f32 unless stash_type says otherwise).
void conv_layer_norm(Importer& im, const onnx::NodeProto& n) {
  const Shape x = im.type_of(0).shape;
  const int64_t axis = normalize_dim(im.attr_int("axis", -1), int64_t(x.size()));
  const Shape ns(x.begin() + axis, x.end());
  const double eps = im.attr_float("epsilon", 1e-5);
  Value* w = im.has_input(1) ? im.in(1) : nullptr;
  Value* bias = im.has_input(2) ? im.in(2) : nullptr;
  im.set_out(0, im.b().layer_norm(im.in(0), ns, w, bias, eps));
  const bool stats = (n.output_size() > 1 && !n.output(1).empty()) || (n.output_size() > 2 && !n.output(2).empty());
  if (!stats) return;
  Builder& b = im.b();
  const DType stash = to_dtype(im, im.attr_int("stash_type", 1));
  Value* xs = im.in(0);
  if (xs->type.dtype != stash) xs = b.cast(xs, stash);
  std::vector<int64_t> dims;
  for (int64_t d = axis; d < int64_t(x.size()); ++d) dims.push_back(d);
  Value* mean = b.mean(xs, dims, true);
  Value* centred = b.sub(xs, mean);
  Value* var = b.mean(b.mul(centred, centred), dims, true);
  Value* e = rec(im, OpKind::full, {}, {{"shape", std::vector<int64_t>{}}, {"value", eps}, {"dtype", stash}});
  if (n.output_size() > 1 && !n.output(1).empty()) im.set_out(1, mean);
  if (n.output_size() > 2 && !n.output(2).empty()) im.set_out(2, rec(im, OpKind::rsqrt, {b.add(var, e)}));
}

// SimplifiedLayerNormalization (onnxruntime's RMSNorm, in the default domain): rms_norm over the
// dims from `axis` with the scale as weight.
void conv_simplified_layer_norm(Importer& im, const onnx::NodeProto& n) {
  for (int k = 1; k < n.output_size(); ++k)
    if (!n.output(k).empty() && !im.consumers(k).empty())
      DT_THROW(ValueError) << im.where() << ": the inv_std_var output is not supported";
  const Shape x = im.type_of(0).shape;
  const int64_t axis = normalize_dim(im.attr_int("axis", -1), int64_t(x.size()));
  const Shape ns(x.begin() + axis, x.end());
  Value* w = im.has_input(1) ? im.in(1) : nullptr;
  im.set_out(0, im.b().rms_norm(im.in(0), ns, w, im.attr_float("epsilon", 1e-5)));
}

void add_math_converters(ConverterTable& t) {
  t.emplace("Abs", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::abs); });
  t.emplace("Add", [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::add); });
  t.emplace("Cast", conv_cast);
  t.emplace("Clip", conv_clip);
  t.emplace("Constant", conv_constant);
  t.emplace("ConstantOfShape", conv_constant_of_shape);
  t.emplace("Cos", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::cos); });
  t.emplace("Div", conv_div);
  t.emplace("Dropout", conv_dropout);
  t.emplace("Equal", [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::eq); });
  t.emplace("Erf", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::erf); });
  t.emplace("Exp", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::exp); });
  t.emplace("Gemm", conv_gemm);
  t.emplace("Greater", [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::gt); });
  t.emplace("GreaterOrEqual", [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::ge); });
  t.emplace("Identity", conv_identity);
  t.emplace("LayerNormalization", conv_layer_norm);
  t.emplace("Less", [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::lt); });
  t.emplace("LessOrEqual", [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::le); });
  t.emplace("Log", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::log); });
  t.emplace("LogSoftmax", [](Importer& im, const onnx::NodeProto&) { conv_softmax(im, OpKind::log_softmax); });
  t.emplace("MatMul", conv_matmul);
  t.emplace("Max", [](Importer& im, const onnx::NodeProto&) { extremum(im, OpKind::maximum); });
  t.emplace("Min", [](Importer& im, const onnx::NodeProto&) { extremum(im, OpKind::minimum); });
  t.emplace("Mul", [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::mul); });
  t.emplace("Neg", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::neg); });
  t.emplace("Not", conv_not);
  t.emplace("Pow", conv_pow);
  t.emplace("Range", conv_range);
  t.emplace("Reciprocal", conv_reciprocal);
  t.emplace("ReduceMax", [](Importer& im, const onnx::NodeProto&) { conv_reduce(im, OpKind::amax); });
  t.emplace("ReduceMean", [](Importer& im, const onnx::NodeProto&) { conv_reduce(im, OpKind::mean); });
  t.emplace("ReduceMin", [](Importer& im, const onnx::NodeProto&) { conv_reduce(im, OpKind::amin); });
  t.emplace("Conv", conv_conv);
  t.emplace("ReduceSum", [](Importer& im, const onnx::NodeProto&) { conv_reduce(im, OpKind::sum); });
  t.emplace("Relu", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::relu); });
  t.emplace("Sigmoid", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::sigmoid); });
  t.emplace("Sin", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::sin); });
  t.emplace("SimplifiedLayerNormalization", conv_simplified_layer_norm);
  t.emplace("Softmax", [](Importer& im, const onnx::NodeProto&) { conv_softmax(im, OpKind::softmax); });
  t.emplace("Sqrt", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::sqrt); });
  t.emplace("Sub", [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::sub); });
  t.emplace("Tanh", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::tanh); });
  t.emplace("Where", conv_where);
}

}  // namespace dt::io::onnx_internal
