// The ONNX importer (onnx_import.h). One pass over the nodes in file order (ONNX requires
// topological order). Each ONNX value is a Slot: either an IR value of the graph being built, or a
// constant known at import. A node whose inputs are all constant is converted into a scratch graph
// and run at once with the op kernels (so folding computes exactly what the runtime would); other
// nodes are converted into the real graph, their constant inputs materialised on first use.
#include "dtensor/io/onnx_import.h"
#include "dtensor/io/onnx_importer.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <unordered_map>

#include "dtensor/core/error.h"
#include "dtensor/core/input_file.h"
#include "dtensor/core/ops.h"
#include "dtensor/io/onnx_fusion.h"
#include "dtensor/ir/builder.h"
#include "dtensor/ir/verifier.h"

namespace dt::io {
namespace onnx_internal {

// ---- tensors ----

DType onnx_dtype(int32_t t, const std::string& what) {
  switch (t) {
    case onnx::TensorProto::FLOAT: return DType::f32;
    case onnx::TensorProto::DOUBLE: return DType::f64;
    case onnx::TensorProto::FLOAT16: return DType::f16;
    case onnx::TensorProto::BFLOAT16: return DType::bf16;
    case onnx::TensorProto::INT64: return DType::i64;
    case onnx::TensorProto::INT32: return DType::i32;
    case onnx::TensorProto::BOOL: return DType::boolean;
    default: break;
  }
  const std::string name = onnx::TensorProto::DataType_IsValid(t)
                               ? onnx::TensorProto::DataType_Name(onnx::TensorProto::DataType(t))
                               : std::to_string(t);
  DT_THROW(DTypeError) << what << " has ONNX element type " << name
                       << ", which dtensor does not support (f32, f64, f16, bf16, i64, i32, bool)";
}

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& what) {
  const DType dtype = onnx_dtype(p.data_type(), what);
  Shape shape(p.dims().begin(), p.dims().end());
  for (int64_t d : shape)
    if (d < 0 || d > (int64_t(1) << 40)) DT_THROW(ValueError) << what << " has a bad dim " << d;
  if (p.data_location() == onnx::TensorProto::EXTERNAL)
    DT_THROW(ValueError) << what << " stores its data in an external file, which the importer does not read";
  const int64_t n = numel(shape);
  Tensor t = Tensor::zeros(shape, dtype);
  const size_t bytes = size_t(n) * itemsize(dtype);
  if (p.has_raw_data()) {
    if (p.raw_data().size() != bytes)
      DT_THROW(ValueError) << what << " has " << p.raw_data().size() << " bytes of data for " << bytes;
    if (bytes) std::memcpy(t.raw_data(), p.raw_data().data(), bytes);
    return t;
  }
  auto check = [&](int64_t have) {
    if (have != n) DT_THROW(ValueError) << what << " has " << have << " values for shape " << shape_str(shape);
  };
  switch (dtype) {
    case DType::f32: check(p.float_data_size()); if (n) std::memcpy(t.raw_data(), p.float_data().data(), bytes); break;
    case DType::f64: check(p.double_data_size()); if (n) std::memcpy(t.raw_data(), p.double_data().data(), bytes); break;
    case DType::i64: check(p.int64_data_size()); if (n) std::memcpy(t.raw_data(), p.int64_data().data(), bytes); break;
    case DType::i32: check(p.int32_data_size()); if (n) std::memcpy(t.raw_data(), p.int32_data().data(), bytes); break;
    case DType::boolean: {
      check(p.int32_data_size());
      auto* out = static_cast<bool*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) out[i] = p.int32_data(int(i)) != 0;
      break;
    }
    case DType::f16:
    case DType::bf16: {  // 16-bit payloads sit in int32_data, one per element
      check(p.int32_data_size());
      auto* out = static_cast<uint16_t*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) out[i] = uint16_t(p.int32_data(int(i)));
      break;
    }
  }
  return t;
}

// ---- names ----

// IR names are [A-Za-z_][A-Za-z0-9_.]*: every other character becomes '_' ("onnx::Mul_3" ->
// "onnx__Mul_3", "/h.0/Add_output_0" -> "_h.0_Add_output_0").
std::string ir_name(const std::string& onnx_name) {
  std::string s = onnx_name.empty() ? std::string("_") : onnx_name;
  for (char& c : s)
    if (!(std::isalnum(uint8_t(c)) || c == '_' || c == '.')) c = '_';
  if (!(std::isalpha(uint8_t(s[0])) || s[0] == '_')) s.insert(s.begin(), '_');
  return s;
}

// ---- the importer ----

std::string Importer::where() const {
  // Unnamed nodes (exporters may leave names empty) by their index; the first output given (an
  // op's leading outputs may be omitted).
  std::string s = node_->name().empty() ? "node #" + std::to_string(node_index_) : "node '" + node_->name() + "'";
  s += " (" + node_->op_type();
  for (const auto& o : node_->output())
    if (!o.empty()) return s + ", output '" + o + "')";
  return s + ")";
}

void Importer::check_versions() {
  const int64_t irv = model_.ir_version();
  if (irv < kOnnxMinIrVersion || irv > kOnnxMaxIrVersion)
    DT_THROW(ValueError) << "ONNX IR version " << irv << " is not supported (supported: " << kOnnxMinIrVersion
                         << " to " << kOnnxMaxIrVersion << ")";
  for (const auto& o : model_.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset_ = o.version();
  // Below the supported range, a model is still read exactly when each of its ops is defined the
  // same at its opset as at ours (the operator's newest version up to opset 17 is older than that
  // opset): And, Or, Xor, Sin and Cos have not changed since opset 7, ConstantOfShape since 9 and
  // Not since 1, and their conformance data uses those opsets.
  static const std::map<std::string, int64_t> unchanged_since = {
      {"And", 7}, {"Or", 7}, {"Xor", 7}, {"Sin", 7}, {"Cos", 7}, {"ConstantOfShape", 9}, {"Not", 1}};
  const auto& nodes = model_.graph().node();
  const bool old_but_unchanged =
      opset_ < kOnnxMinOpset && nodes.size() > 0 && std::all_of(nodes.begin(), nodes.end(), [&](const onnx::NodeProto& n) {
        auto it = unchanged_since.find(n.op_type());
        return it != unchanged_since.end() && it->second <= opset_;
      });
  if ((opset_ < kOnnxMinOpset && !old_but_unchanged) || opset_ > kOnnxMaxOpset)
    DT_THROW(ValueError) << "ONNX opset " << opset_ << " of the default domain is not supported (supported: "
                         << kOnnxMinOpset << " to " << kOnnxMaxOpset << ")";
}

void Importer::declare_inputs() {
  const auto& g = model_.graph();
  std::set<std::string> init_names;
  for (const auto& t : g.initializer()) {
    Slot s;
    s.is_const = true;
    s.constant = tensor_from_proto(t, "initializer '" + t.name() + "'");
    s.initializer = t.name();
    slots_[t.name()] = std::move(s);
    init_names.insert(t.name());
  }
  // Options naming no graph input are refused first (a typo would otherwise read as a dynamic dim).
  std::set<std::string> seen;
  for (const auto& vi : g.input())
    if (!init_names.count(vi.name())) seen.insert(vi.name());
  for (const auto& [name, shape] : opt_.input_shapes)
    if (!seen.count(name)) {
      std::string names;
      for (const auto& n : seen) names += (names.empty() ? "" : ", ") + n;
      DT_THROW(ValueError) << "--input-shape names '" << name << "', which is not a graph input (inputs: " << names << ")";
    }
  for (const auto& [name, dtype] : opt_.input_dtypes)
    if (!seen.count(name)) DT_THROW(ValueError) << "--input-dtype names '" << name << "', which is not a graph input";
  for (const auto& vi : g.input()) {
    if (init_names.count(vi.name())) continue;  // an initializer listed as an input (old exporters)
    if (auto it = opt_.constant_inputs.find(vi.name()); it != opt_.constant_inputs.end()) {
      Slot s;
      s.is_const = true;
      s.constant = it->second;
      slots_[vi.name()] = std::move(s);
      continue;
    }
    const auto& tt = vi.type().tensor_type();
    if (!vi.type().has_tensor_type())
      DT_THROW(ValueError) << "graph input '" << vi.name() << "' is not a tensor";
    DType dtype = onnx_dtype(tt.elem_type(), "graph input '" + vi.name() + "'");
    if (auto it = opt_.input_dtypes.find(vi.name()); it != opt_.input_dtypes.end()) dtype = it->second;
    Shape shape;
    if (auto it = opt_.input_shapes.find(vi.name()); it != opt_.input_shapes.end()) {
      shape = it->second;
      if (tt.has_shape() && tt.shape().dim_size() != int(shape.size()))
        DT_THROW(ValueError) << "--input-shape " << vi.name() << "=" << shape_str(shape) << " has " << shape.size()
                             << " dims, the model's input has " << tt.shape().dim_size();
      for (int d = 0; tt.has_shape() && d < tt.shape().dim_size(); ++d) {
        const auto& dim = tt.shape().dim(d);
        if (dim.has_dim_value() && dim.dim_value() != shape[size_t(d)])
          DT_THROW(ValueError) << "--input-shape " << vi.name() << "=" << shape_str(shape) << ": dim " << d
                               << " is fixed to " << dim.dim_value() << " in the model";
      }
    } else {
      if (!tt.has_shape())
        DT_THROW(ValueError) << "graph input '" << vi.name()
                             << "' has no shape in the model: give it with --input-shape " << vi.name() << "=AxB...";
      for (int d = 0; d < tt.shape().dim_size(); ++d) {
        const auto& dim = tt.shape().dim(d);
        if (!dim.has_dim_value())
          DT_THROW(ValueError) << "graph input '" << vi.name() << "' dim " << d << " is dynamic ('"
                               << dim.dim_param() << "'): give its shape with --input-shape " << vi.name()
                               << "=AxB...";
        shape.push_back(dim.dim_value());
      }
    }
    Slot s;
    s.value = main_.add_input(ir_name(vi.name()), {dtype, shape});
    slots_[vi.name()] = std::move(s);
  }
}

Value* Importer::param(const std::string& name, const Tensor& t) {
  const std::string n = ir_name(name);
  if (auto it = params_.find(n); it != params_.end()) {
    if (it->second->type.shape != t.shape() || it->second->type.dtype != t.dtype())
      DT_THROW(ValueError) << "initializer '" << name << "' is used both as it is and transposed, at " << where();
    return it->second;
  }
  Value* v = main_.add_param(n, {t.dtype(), t.shape()});
  params_[n] = v;
  result_.weights[n] = t.contiguous();
  return v;
}

// Returns a constant of the graph being built: a scratch input while folding; else a parameter
// (initializers, large constants), full or constant.
Value* Importer::materialise(const std::string& onnx_name, Slot& s) {
  if (folding_) {
    // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on `"c" + string`.
    std::string name = "c";
    name += std::to_string(scratch_bound_.size());
    Value* v = builder_->input(name, s.constant.dtype(), s.constant.shape());
    scratch_bound_[v] = s.constant;
    return v;
  }
  if (s.value) return s.value;
  const Tensor& t = s.constant;
  if (!s.initializer.empty()) return s.value = param(s.initializer, t);
  const std::vector<double> values = t.to_doubles();
  const bool uniform = !values.empty() && std::all_of(values.begin(), values.end(), [&](double v) {
    return std::memcmp(&v, &values[0], sizeof v) == 0;
  });
  const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  if (uniform || values.empty())
    s.value = builder_->record(OpKind::full, {}, {{"shape", shape}, {"value", values.empty() ? 0.0 : values[0]}, {"dtype", t.dtype()}})[0];
  else if (values.size() <= 4096)
    s.value = builder_->record(OpKind::constant, {}, {{"shape", shape}, {"values", values}, {"dtype", t.dtype()}})[0];
  else
    s.value = param(onnx_name, t);
  return s.value;
}

Value* Importer::in(int i) {
  if (!has_input(i)) DT_THROW(ValueError) << where() << " needs input " << i;
  Slot& s = slot(i);
  return s.is_const ? materialise(node_->input(i), s) : s.value;
}

const Tensor& Importer::const_in(int i) {
  if (!has_input(i)) DT_THROW(ValueError) << where() << " needs input " << i;
  Slot& s = slot(i);
  if (!s.is_const)
    DT_THROW(ValueError) << where() << ": input " << i << " ('" << node_->input(i)
                         << "') must be known at import (a shape or a constant), but it is computed from the data";
  return s.constant;
}

std::vector<int64_t> Importer::const_ints(int i) {
  const Tensor& t = const_in(i);
  if (t.dtype() != DType::i64 && t.dtype() != DType::i32)
    DT_THROW(DTypeError) << where() << ": input " << i << " must be integers, got " << dtype_name(t.dtype());
  std::vector<int64_t> v;
  for (double d : t.to_doubles()) v.push_back(int64_t(d));
  if (t.dtype() == DType::i64) {  // exact beyond 2^53 (INT64_MAX ends of Slice)
    const Tensor c = t.contiguous();
    v.assign(static_cast<const int64_t*>(c.raw_data()), static_cast<const int64_t*>(c.raw_data()) + c.numel());
  }
  return v;
}

ir::TensorType Importer::type_of(int i) {
  const Slot& s = slot(i);
  return s.is_const ? ir::TensorType{s.constant.dtype(), s.constant.shape()} : s.value->type;
}

std::vector<const onnx::NodeProto*> Importer::consumers(int k) const {
  auto it = users_.find(node_->output(k));
  return it == users_.end() ? std::vector<const onnx::NodeProto*>{} : it->second;
}

// Runs the kernels of a scratch graph whose inputs are bound to constants (the runtime's
// interpreter sits above io in the dependency order, and folding needs nothing else of it).
std::vector<Tensor> evaluate(const ir::Graph& g, const std::map<Value*, Tensor>& bound, const std::vector<Value*>& want) {
  std::unordered_map<const Value*, Tensor> env;
  for (const auto& [v, t] : bound) env[v] = t;
  for (const ir::Node* n : g.nodes()) {
    std::vector<Tensor> in;
    for (const Value* v : n->operands) in.push_back(env.at(v));
    std::vector<Tensor> out(n->results.size());
    ir::op_def(n->op).kernel(ir::KernelArgs{*n, in, out});
    for (size_t k = 0; k < out.size(); ++k) env[n->results[k]] = out[k];
  }
  std::vector<Tensor> r;
  for (Value* v : want) r.push_back(env.at(v).contiguous());
  return r;
}

void Importer::convert(const onnx::NodeProto& n) {
  node_ = &n;
  if (absorbed_.count(&n)) return;  // folded into an earlier node (a linear's bias Add)
  if (!n.domain().empty() && n.domain() != "ai.onnx")
    DT_THROW(ValueError) << where() << ": ops of domain '" << n.domain() << "' are not supported";
  const auto& table = converters();
  auto it = table.find(n.op_type());
  if (it == table.end()) DT_THROW(ValueError) << where() << ": op " << n.op_type() << " is not supported by the importer";
  for (int i = 0; i < n.input_size(); ++i)
    if (!n.input(i).empty() && !slots_.count(n.input(i)))
      DT_THROW(ValueError) << where() << ": input '" << n.input(i) << "' is not defined before the node";
  out_values_.assign(size_t(n.output_size()), nullptr);
  out_slots_.assign(size_t(n.output_size()), Slot{});
  bool all_const = true;
  for (int i = 0; i < n.input_size(); ++i)
    if (!n.input(i).empty() && !slots_.at(n.input(i)).is_const) all_const = false;
  // Shape-only ops answer from the input's type and never fold through a scratch graph.
  const bool from_type = n.op_type() == "Shape" || n.op_type() == "Size";
  if (all_const && n.input_size() > 0 && !from_type) {
    ir::Graph scratch("fold");
    Builder sb(scratch);
    builder_ = &sb;
    folding_ = true;
    scratch_bound_.clear();
    try {
      it->second(*this, n);
    } catch (...) {
      folding_ = false;
      builder_ = nullptr;
      throw;
    }
    folding_ = false;
    std::vector<Value*> want;
    for (int k = 0; k < n.output_size(); ++k)
      if (out_values_[size_t(k)]) want.push_back(out_values_[size_t(k)]);
    std::vector<Tensor> got = evaluate(scratch, scratch_bound_, want);
    size_t j = 0;
    for (int k = 0; k < n.output_size(); ++k) {
      if (out_values_[size_t(k)]) set_out_const(k, got[j++]);
      else if (!out_slots_[size_t(k)].is_const && !out_slots_[size_t(k)].value && !n.output(k).empty())
        DT_THROW(InternalError) << where() << " gave no output " << k;
    }
    builder_ = nullptr;
  } else {
    Builder mb(main_);
    builder_ = &mb;
    it->second(*this, n);
    builder_ = nullptr;
  }
  for (int k = 0; k < n.output_size(); ++k) {
    if (n.output(k).empty()) continue;
    Slot s = std::move(out_slots_[size_t(k)]);
    if (!s.is_const && !s.value) s.value = out_values_[size_t(k)];
    if (!s.is_const && !s.value) DT_THROW(ValueError) << where() << ": output " << k << " is not supported";
    slots_[n.output(k)] = std::move(s);
  }
}

OnnxImportResult Importer::run() {
  check_versions();
  const auto& g = model_.graph();
  for (const auto& n : g.node())
    for (const auto& i : n.input()) users_[i].push_back(&n);
  declare_inputs();
  for (const auto& n : g.node()) {
    convert(n);
    ++node_index_;
  }
  std::vector<Value*> outs;
  Builder mb(main_);
  builder_ = &mb;
  for (const auto& o : g.output()) {
    auto it = slots_.find(o.name());
    if (it == slots_.end()) DT_THROW(ValueError) << "graph output '" << o.name() << "' is not computed by any node";
    Slot& s = it->second;
    Value* v = s.is_const ? materialise(o.name(), s) : s.value;
    if (v->kind == ir::ValueKind::input || v->kind == ir::ValueKind::param || std::count(outs.begin(), outs.end(), v))
      v = mb.record(OpKind::clone, {v})[0];
    if (!main_.find(ir_name(o.name()))) main_.rename(v, ir_name(o.name()));
    outs.push_back(v);
  }
  builder_ = nullptr;
  main_.set_outputs(outs);
  if (opt_.fuse) fuse_onnx_patterns(main_, result_.weights);
  ir::verify(main_);
  return std::move(result_);
}

// ---- converters ----

DType to_dtype(Importer& im, int64_t onnx_type) { return onnx_dtype(int32_t(onnx_type), im.where()); }

Value* rec(Importer& im, OpKind op, std::vector<Value*> xs, const ir::NamedAttrs& attrs) {
  return im.b().record(op, std::move(xs), attrs)[0];
}

void unary(Importer& im, OpKind op) { im.set_out(0, rec(im, op, {im.in(0)})); }

// Binary ops broadcast as numpy; ONNX requires equal dtypes too.
void binary(Importer& im, OpKind op) { im.set_out(0, rec(im, op, {im.in(0), im.in(1)})); }

void conv_identity(Importer& im, const onnx::NodeProto&) { im.set_out_slot(0, im.slot(0)); }

// Dropout at inference: the identity (its optional mask output is all true).
void conv_dropout(Importer& im, const onnx::NodeProto& n) {
  if (im.has_input(2) && im.const_in(2).to_doubles().at(0) != 0)
    DT_THROW(ValueError) << im.where() << ": training-mode dropout is not supported (import for inference)";
  im.set_out_slot(0, im.slot(0));
  if (n.output_size() > 1 && !n.output(1).empty()) {
    const ir::TensorType t = im.type_of(0);
    im.set_out_const(1, Tensor::full(t.shape, 1, DType::boolean));
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

void conv_cast(Importer& im, const onnx::NodeProto&) {
  im.set_out(0, im.b().cast(im.in(0), to_dtype(im, im.attr_int("to", 1))));
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
    if (im.has_input(1) && im.is_const(1)) lo = im.const_in(1).to_doubles().at(0);
    else if (im.has_input(1)) lo_v = im.in(1);
    if (im.has_input(2) && im.is_const(2)) hi = im.const_in(2).to_doubles().at(0);
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
    dtype = v.dtype();
    value = v.to_doubles().at(0);
  }
  im.set_out_const(0, Tensor::full(Shape(s.begin(), s.end()), value, dtype));
}

void conv_range(Importer& im, const onnx::NodeProto&) {
  const Tensor& st = im.const_in(0);
  const double start = st.to_doubles().at(0), limit = im.const_in(1).to_doubles().at(0),
               delta = im.const_in(2).to_doubles().at(0);
  if (delta == 0) DT_THROW(ValueError) << im.where() << ": delta is 0";
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

const ConverterTable& converters() {
  static const ConverterTable table = [] {
    ConverterTable t = {
      {"Abs", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::abs); }},
      {"Add", [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::add); }},
      {"Cast", conv_cast},
      {"Clip", conv_clip},
      {"Concat", conv_concat},
      {"Constant", conv_constant},
      {"ConstantOfShape", conv_constant_of_shape},
      {"Cos", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::cos); }},
      {"Div", conv_div},
      {"Dropout", conv_dropout},
      {"Equal", [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::eq); }},
      {"Erf", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::erf); }},
      {"Exp", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::exp); }},
      {"Expand", conv_expand},
      {"Flatten", conv_flatten},
      {"Gemm", conv_gemm},
      {"Greater", [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::gt); }},
      {"GreaterOrEqual", [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::ge); }},
      {"Identity", conv_identity},
      {"LayerNormalization", conv_layer_norm},
      {"Less", [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::lt); }},
      {"LessOrEqual", [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::le); }},
      {"Log", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::log); }},
      {"LogSoftmax", [](Importer& im, const onnx::NodeProto&) { conv_softmax(im, OpKind::log_softmax); }},
      {"MatMul", conv_matmul},
      {"Max", [](Importer& im, const onnx::NodeProto&) { extremum(im, OpKind::maximum); }},
      {"Min", [](Importer& im, const onnx::NodeProto&) { extremum(im, OpKind::minimum); }},
      {"Mul", [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::mul); }},
      {"Neg", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::neg); }},
      {"Not", conv_not},
      {"Pow", conv_pow},
      {"Range", conv_range},
      {"Reciprocal", conv_reciprocal},
      {"ReduceMax", [](Importer& im, const onnx::NodeProto&) { conv_reduce(im, OpKind::amax); }},
      {"ReduceMean", [](Importer& im, const onnx::NodeProto&) { conv_reduce(im, OpKind::mean); }},
      {"ReduceMin", [](Importer& im, const onnx::NodeProto&) { conv_reduce(im, OpKind::amin); }},
      {"ReduceSum", [](Importer& im, const onnx::NodeProto&) { conv_reduce(im, OpKind::sum); }},
      {"Relu", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::relu); }},
      {"Reshape", conv_reshape},
      {"Shape", conv_shape},
      {"Sigmoid", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::sigmoid); }},
      {"Sin", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::sin); }},
      {"Size", conv_size},
      {"SimplifiedLayerNormalization", conv_simplified_layer_norm},
      {"Slice", conv_slice},
      {"Softmax", [](Importer& im, const onnx::NodeProto&) { conv_softmax(im, OpKind::softmax); }},
      {"Split", conv_split},
      {"Sqrt", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::sqrt); }},
      {"Squeeze", conv_squeeze},
      {"Sub", [](Importer& im, const onnx::NodeProto&) { binary(im, OpKind::sub); }},
      {"Tanh", [](Importer& im, const onnx::NodeProto&) { unary(im, OpKind::tanh); }},
      {"Transpose", conv_transpose},
      {"Unsqueeze", conv_unsqueeze},
      {"Where", conv_where},
  };
    add_index_converters(t);
    return t;
  }();
  return table;
}

onnx::ModelProto parse_model(const std::string& bytes, const std::string& name) {
  onnx::ModelProto m;
  if (bytes.size() > size_t(INT32_MAX) || !m.ParseFromArray(bytes.data(), int(bytes.size())))
    DT_THROW(IoError) << name << ": not a valid ONNX model (the protobuf does not parse: truncated or another format)";
  if (!m.has_graph()) DT_THROW(IoError) << name << ": the ONNX model has no graph";
  return m;
}

Shape parse_dims(const std::string& text, const std::string& what) {
  Shape s;
  if (text.empty()) return s;
  size_t at = 0;
  while (true) {
    size_t x = text.find('x', at);
    const std::string piece = text.substr(at, x == std::string::npos ? std::string::npos : x - at);
    if (piece.empty() || piece.size() > 12 || !std::all_of(piece.begin(), piece.end(), ::isdigit))
      DT_THROW(ValueError) << what << ": '" << text << "' is not a shape like 2x32 (positive sizes joined by 'x')";
    s.push_back(std::stoll(piece));
    if (x == std::string::npos) break;
    at = x + 1;
  }
  return s;
}

}  // namespace onnx_internal

using namespace onnx_internal;

std::pair<std::string, Shape> parse_input_shape(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    DT_THROW(ValueError) << "--input-shape '" << text << "' must be NAME=SHAPE, e.g. input_ids=2x32";
  return {text.substr(0, eq), parse_dims(text.substr(eq + 1), "--input-shape " + text.substr(0, eq))};
}

std::pair<std::string, DType> parse_input_dtype(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    DT_THROW(ValueError) << "--input-dtype '" << text << "' must be NAME=DTYPE, e.g. input_ids=i64";
  return {text.substr(0, eq), parse_dtype(text.substr(eq + 1))};
}

OnnxImportResult import_onnx_bytes(const std::string& bytes, const std::string& name, const OnnxImportOptions& options) {
  const onnx::ModelProto m = parse_model(bytes, name);
  std::string gname = name;
  if (size_t slash = gname.find_last_of('/'); slash != std::string::npos) gname = gname.substr(slash + 1);
  if (size_t dot = gname.find('.'); dot != std::string::npos) gname = gname.substr(0, dot);
  return Importer(m, gname, options).run();
}

OnnxImportResult import_onnx(const std::string& path, const OnnxImportOptions& options) {
  return import_onnx_bytes(read_input_file(path, "ONNX model"), path, options);
}

Tensor read_onnx_tensor(const std::string& path, std::string* name) {
  const std::string bytes = read_input_file(path, "ONNX tensor");
  onnx::TensorProto p;
  if (!p.ParseFromArray(bytes.data(), int(bytes.size()))) DT_THROW(IoError) << path << ": not an ONNX TensorProto";
  if (name) *name = p.name();
  return tensor_from_proto(p, path);
}

std::string onnx_ir_name(const std::string& onnx_name) { return ir_name(onnx_name); }

std::vector<std::string> onnx_supported_ops() {
  std::vector<std::string> v;
  for (const auto& [k, f] : converters()) v.push_back(k);
  return v;
}

}  // namespace dt::io
