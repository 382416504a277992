// The ONNX importer (onnx_import.h). One pass over the nodes in file order (ONNX requires
// topological order). Each ONNX value is a Slot: either an IR value of the graph being built, or a
// constant known at import. A node whose inputs are all constant is converted into a scratch graph
// and run at once with the op kernels (so folding computes exactly what the runtime would); other
// nodes are converted into the real graph, their constant inputs materialised on first use.
#include "dtensor/io/onnx_import.h"
#include "dtensor/io/onnx_importer.h"

#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <unordered_map>

#include "dtensor/core/error.h"
#include "dtensor/core/input_file.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/ir/builder.h"
#include "dtensor/ir/verifier.h"

namespace dt::io {
namespace onnx_internal {

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
  // Not and Softplus since 1, and their conformance data uses those opsets.
  static const std::map<std::string, int64_t> unchanged_since = {
      {"And", 7}, {"Or", 7}, {"Xor", 7}, {"Sin", 7}, {"Cos", 7}, {"ConstantOfShape", 9}, {"Not", 1}, {"Softplus", 1}};
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
    if (init_names.count(t.name())) DT_THROW(ValueError) << "initializer '" << t.name() << "' is defined twice";
    Slot s;
    s.is_const = true;
    s.constant = tensor_from_proto(t, "initializer '" + t.name() + "'");
    s.initializer = t.name();
    s.trainable = is_trainable_initializer(t.name(), s.constant.dtype(), opt_.frozen);
    slots_[t.name()] = std::move(s);
    init_names.insert(t.name());
  }
  find_folded_transposes();
  // Options naming no graph input are refused first (a typo would otherwise read as a dynamic dim).
  std::set<std::string> seen;
  for (const auto& vi : g.input())
    if (!init_names.count(vi.name())) seen.insert(vi.name());
  // Worded for the CLI's --input-shape / --input-dtype and Python's input_shapes= alike.
  auto refuse_unknown = [&](const std::string& name, const char* what) {
    std::string names;
    for (const auto& n : seen) names += (names.empty() ? "" : ", ") + n;
    DT_THROW(ValueError) << "an input " << what << " is given for '" << name << "', which is not a graph input (inputs: "
                         << names << ")";
  };
  for (const auto& [name, shape] : opt_.input_shapes)
    if (!seen.count(name)) refuse_unknown(name, "shape");
  for (const auto& [name, dtype] : opt_.input_dtypes)
    if (!seen.count(name)) refuse_unknown(name, "dtype");
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
        if (!dim.has_dim_value() && opt_.dynamic_dim_default > 0) {
          shape.push_back(opt_.dynamic_dim_default);
          continue;
        }
        if (!dim.has_dim_value())
          DT_THROW(ValueError) << "graph input '" << vi.name() << "' dim " << d << " is dynamic ('"
                               << dim.dim_param() << "'): give its shape with --input-shape " << vi.name()
                               << "=AxB...";
        shape.push_back(dim.dim_value());
      }
    }
    checked_numel(shape, "graph input '" + vi.name() + "'");
    if (slots_.count(vi.name())) DT_THROW(ValueError) << "graph input '" << vi.name() << "' is declared twice";
    Slot s;
    s.value = main_.add_input(ir_name(vi.name()), {dtype, shape});
    slots_[vi.name()] = std::move(s);
    if (!shape.empty()) batch_sizes_.insert(shape[0]);
  }
}

Value* Importer::param(const std::string& name, const Tensor& t, bool frozen) {
  std::string n = ir_name(name);
  // A constant-folded export names a Linear's pre-transposed weight `onnx::MatMul_611`; the node
  // reading it is named after the module ("/layers.0/self_attn/q_proj/MatMul"), so the parameter
  // gets the module's name back ("layers.0.self_attn.q_proj.weight") and plans match it.
  if (auto it = renamed_.find(name); it != renamed_.end()) n = it->second;
  else if (name.rfind("onnx::", 0) == 0 && !frozen) {
    const std::string module = linear_module();
    const std::string m = module.empty() ? "" : ir_name(module + ".weight");
    if (!m.empty() && !slots_.count(module + ".weight") && !params_.count(m) && !main_.find(m)) {
      renamed_[name] = m;
      n = m;
    }
  }
  if (auto it = params_.find(n); it != params_.end()) {
    if (it->second->type.shape != t.shape() || it->second->type.dtype != t.dtype())
      DT_THROW(ValueError) << "initializer '" << name << "' is used both as it is and transposed, at " << where();
    return it->second;
  }
  if (main_.find(n)) DT_THROW(ValueError) << where() << ": initializer '" << name << "' has the IR name of another value";
  Value* v = main_.add_param(n, {t.dtype(), t.shape()});
  v->frozen = frozen;
  params_[n] = v;
  result_.weights[n] = t.contiguous();
  if (frozen) ++result_.summary.frozen;
  else ++result_.summary.parameters;
  return v;
}

// Returns a constant of the graph being built: a scratch input while folding; else a param for an
// initializer (a const unless trainable), Transpose(W) of one as a transpose of W's param, a
// uniform tensor as `full`, a small one as `constant`, a larger one as a const named after the
// ONNX value (stored with the weights, not inline).
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
  if (!s.initializer.empty()) return s.value = param(s.initializer, t, !s.trainable);
  if (!s.transpose_of.empty())
    return s.value = builder_->transpose(materialise(s.transpose_of, slots_.at(s.transpose_of)), 0, 1);
  return s.value = constant_value(onnx_name, t);
}

Value* Importer::constant_value(const std::string& onnx_name, const Tensor& t) {
  const std::vector<double> values = t.to_doubles();  // computed values are at most kMaxFoldElements
  const bool uniform = !values.empty() && std::all_of(values.begin(), values.end(), [&](double v) {
    return std::memcmp(&v, &values[0], sizeof v) == 0;
  });
  const std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  // A value computed from constants and broadcast to the batch (position ids expanded to [batch,
  // seq] and the RoPE tables gathered with them, a mask of ones made for the batch): its rows along
  // dim 0 are equal. Kept as one row and an expand, it stays a broadcast of the batch, not a tensor
  // of it: pipeline micro-batches (pipeline/stages.h, rebatch) shrink the expand with the batch,
  // and it is stored once.
  const int64_t rows = t.dim() >= 1 ? t.shape()[0] : 0;
  if (rows > 1 && t.numel() > 0 && batch_sizes_.count(rows)) {
    const size_t row = values.size() / size_t(rows);
    bool equal_rows = true;
    for (size_t i = row; i < values.size() && equal_rows; ++i)
      equal_rows = std::memcmp(&values[i], &values[i % row], sizeof(double)) == 0;
    if (equal_rows)
      return builder_->record(OpKind::expand, {constant_value(onnx_name, t.narrow(0, 0, 1).contiguous())},
                              {{"shape", shape}})[0];
  }
  if (uniform || t.numel() == 0)
    return builder_->record(OpKind::full, {}, {{"shape", shape}, {"value", values.empty() ? 0.0 : values[0]}, {"dtype", t.dtype()}})[0];
  if (t.numel() <= kMaxInlineElements)
    return builder_->record(OpKind::constant, {}, {{"shape", shape}, {"values", values}, {"dtype", t.dtype()}})[0];
  return param(onnx_name, t, true);
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
  // Read as integers, never through doubles: INT64_MAX (the open end of a Slice) is 2^63 as a
  // double, which no int64 holds.
  const Tensor c = t.contiguous();
  if (t.dtype() == DType::i64)
    return {static_cast<const int64_t*>(c.raw_data()), static_cast<const int64_t*>(c.raw_data()) + c.numel()};
  const auto* p = static_cast<const int32_t*>(c.raw_data());
  return {p, p + c.numel()};
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

// Every node is checked before any is converted, so that one message lists every unsupported op
// and a malformed node (no outputs, a wrong number of inputs or outputs for its op's schema, an
// output name defined twice) is refused before a converter reads it.
void Importer::check_nodes() {
  const auto& g = model_.graph();
  const auto& table = converters();
  std::set<std::string> defined;
  for (const auto& t : g.initializer()) defined.insert(t.name());
  for (const auto& vi : g.input()) defined.insert(vi.name());
  std::map<std::string, std::vector<std::string>> unsupported;  // op -> where each node is
  for (node_index_ = 0; node_index_ < g.node_size(); ++node_index_) {
    const onnx::NodeProto& n = g.node(node_index_);
    node_ = &n;
    const bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    if (!default_domain || !table.count(n.op_type())) {
      unsupported[default_domain ? n.op_type() : n.domain() + "." + n.op_type()].push_back(where());
      continue;
    }
    if (n.output_size() == 0) DT_THROW(ValueError) << where() << ": the node has no outputs";
    // The op's schema at the model's opset (SimplifiedLayerNormalization has none: onnxruntime's).
    if (const auto* schema = onnx::OpSchemaRegistry::Schema(n.op_type(), int(opset_), "")) {
      auto count = [&](const char* what, int have, int lo, int hi) {
        if (have < lo || have > hi)
          DT_THROW(ValueError) << where() << ": " << have << " " << what << ", but " << n.op_type() << " at opset "
                               << opset_ << " takes " << lo << (hi == lo ? "" : hi > 1000 ? " or more" : " to " + std::to_string(hi));
      };
      count("inputs", n.input_size(), schema->min_input(), schema->max_input());
      count("outputs", n.output_size(), schema->min_output(), schema->max_output());
    }
    for (const auto& o : n.output())
      if (!o.empty() && !defined.insert(o).second)
        DT_THROW(ValueError) << where() << ": output '" << o << "' is already defined (an input, an initializer or another node's output)";
  }
  if (unsupported.empty()) return;
  if (unsupported.size() == 1 && unsupported.begin()->second.size() == 1) {
    const auto& [op, at] = *unsupported.begin();
    DT_THROW(ValueError) << at[0] << ": op " << op << " is not supported by the importer";
  }
  std::string list;
  for (const auto& [op, at] : unsupported)
    list += (list.empty() ? "" : "; ") + op + " at " + at[0] + (at.size() > 1 ? " and " + std::to_string(at.size() - 1) + " more" : "");
  DT_THROW(ValueError) << unsupported.size() << " ops are not supported by the importer: " << list;
}

void Importer::run_converter(Converter f, const onnx::NodeProto& n) {
  try {
    f(*this, n);
  } catch (Error& e) {
    // Errors from the builder's shape inference or a kernel do not know the node: name it.
    const std::string at = where();
    if (e.message().find(at) == std::string::npos) e.locate("", 0, 0, at + ": ");
    throw;
  }
}

int64_t Importer::check_results(const ir::Graph& g, size_t first) {
  int64_t largest = 0;
  for (size_t i = first; i < g.nodes().size(); ++i)
    for (const Value* r : g.nodes()[i]->results)
      largest = std::max(largest, checked_numel(r->type.shape, where() + ": a result of " + std::string(ir::op_name(g.nodes()[i]->op))));
  return largest;
}

void Importer::convert(const onnx::NodeProto& n) {
  node_ = &n;
  // Every IR node made from this one names it (SourceLoc::origin: kept in the .dt as loc("..."),
  // shown by a run-time error of the node).
  struct Origin {
    Importer& im;
    size_t first;
    ~Origin() {
      const auto& nodes = im.main_.nodes();
      if (nodes.size() <= first) return;
      const char* o = ir::intern_origin("ONNX " + im.where());
      for (size_t i = first; i < nodes.size(); ++i)
        if (!nodes[i]->loc.origin) nodes[i]->loc.origin = o;
    }
  } origin{*this, main_.nodes().size()};
  if (absorbed_.count(&n)) return;  // folded into an earlier node (a linear's bias Add)
  const Converter f = converters().at(n.op_type());  // check_nodes() refused the others
  for (int i = 0; i < n.input_size(); ++i)
    if (!n.input(i).empty() && !slots_.count(n.input(i)))
      DT_THROW(ValueError) << where() << ": input '" << n.input(i) << "' is not defined before the node";
  out_values_.assign(size_t(n.output_size()), nullptr);
  out_slots_.assign(size_t(n.output_size()), Slot{});
  bool all_const = true, trainable = false;
  for (int i = 0; i < n.input_size(); ++i)
    if (!n.input(i).empty()) {
      const Slot& s = slots_.at(n.input(i));
      all_const &= s.is_const;
      trainable |= s.trainable;
    }
  // Shape-only ops answer from the input's type and never fold through a scratch graph. A node
  // reading a trainable initializer is not folded (a position embedding's Gather stays a gather of
  // the parameter), nor one whose results pass kMaxFoldElements (it is redone in the graph).
  const bool from_type = n.op_type() == "Shape" || n.op_type() == "Size";
  bool folded = false;
  if (all_const && !trainable && n.input_size() > 0 && !from_type) {
    ir::Graph scratch("fold");
    Builder sb(scratch);
    builder_ = &sb;
    folding_ = true;
    scratch_bound_.clear();
    try {
      run_converter(f, n);
    } catch (...) {
      folding_ = false;
      builder_ = nullptr;
      throw;
    }
    folding_ = false;
    builder_ = nullptr;
    if (check_results(scratch, 0) <= kMaxFoldElements) {
      std::vector<Value*> want;
      for (int k = 0; k < n.output_size(); ++k)
        if (out_values_[size_t(k)]) want.push_back(out_values_[size_t(k)]);
      std::vector<Tensor> got;
      try {
        got = evaluate(scratch, scratch_bound_, want);
      } catch (Error& e) {
        if (e.message().find(where()) == std::string::npos) e.locate("", 0, 0, where() + ": ");
        throw;
      }
      size_t j = 0;
      for (int k = 0; k < n.output_size(); ++k) {
        if (out_values_[size_t(k)]) set_out_const(k, got[j++]);
        else if (!out_slots_[size_t(k)].is_const && !out_slots_[size_t(k)].value && !n.output(k).empty())
          DT_THROW(ValueError) << where() << ": output " << k << " is not supported";
      }
      folded = true;
    } else {
      out_values_.assign(size_t(n.output_size()), nullptr);
      out_slots_.assign(size_t(n.output_size()), Slot{});
    }
  }
  if (!folded) {
    Builder mb(main_);
    builder_ = &mb;
    const size_t first = main_.nodes().size();
    run_converter(f, n);
    builder_ = nullptr;
    check_results(main_, first);
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
  check_nodes();
  const auto& g = model_.graph();
  for (const auto& n : g.node())
    for (const auto& i : n.input()) users_[i].push_back(&n);
  declare_inputs();
  for (node_index_ = 0; node_index_ < g.node_size(); ++node_index_) convert(g.node(node_index_));
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
  if (opt_.fuse) passes::make_onnx_fusion_pass(result_.weights, &result_.summary.fused)->run(main_);
  warn_constant_folded_export();
  ir::verify(main_);
  return std::move(result_);
}

const ConverterTable& converters() {
  static const ConverterTable table = [] {
    ConverterTable t;
    add_math_converters(t);
    add_shape_converters(t);
    add_index_converters(t);
    add_loss_converters(t);
    add_einsum_converters(t);
    return t;
  }();
  return table;
}

}  // namespace onnx_internal

using namespace onnx_internal;

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

std::vector<std::string> onnx_supported_ops() {
  std::vector<std::string> v;
  for (const auto& [k, f] : converters()) v.push_back(k);
  return v;
}

}  // namespace dt::io
