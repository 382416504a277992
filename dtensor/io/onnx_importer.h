// The ONNX importer's internals shared by its files (not a public header): the Importer a
// converter works through, and the converter tables. The rooms: onnx_proto.cc decodes protobuf
// pieces (types, tensors, models); onnx_importer.cc is the engine (slots, folding, the node loop);
// onnx_parameters.cc classifies and names initializers (parameters, consts, tied transposes);
// each onnx_convert_<family>.cc adds one family's converters to the table through its
// add_<family>_converters(); onnx_input_options.cc parses the CLI's input options.
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/io/onnx_import.h"
#include "dtensor/ir/builder.h"

namespace dt::io::onnx_internal {

using ir::Builder;
using ir::OpKind;
using ir::Value;

std::string ir_name(const std::string& onnx_name);
DType onnx_dtype(int32_t t, const std::string& what);
Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& what);
// The IR text's bounds (ir/parser.cc): a shape beyond them would write a .dt dtensor cannot read.
inline constexpr int64_t kOnnxMaxDim = int64_t(1) << 40, kOnnxMaxNumel = int64_t(1) << 50;
// The number of elements of `shape` (counting size-0 dims as 1 for the bound); ValueError naming
// `what` when a dim is negative or a bound is passed.
int64_t checked_numel(const Shape& shape, const std::string& what);

struct Slot {
  Value* value = nullptr;  // in the real graph (or, while folding, the scratch graph)
  bool is_const = false;
  Tensor constant;
  std::string initializer;   // the initializer holding exactly this tensor ("" when computed)
  std::string transpose_of;  // initializer W when this is Transpose(W) with perm [1, 0]
  // A trainable initializer, or a value computed from one: never folded at import (the
  // computation stays in the graph, so training updates the initializer itself).
  bool trainable = false;
};

// Whether initializer `name` of `dtype` is one of the model's parameters (trained) rather than a
// buffer (a const): floating, and not named like a buffer PyTorch models register (inv_freq,
// cos_cached, ...) nor listed in `frozen`.
bool is_trainable_initializer(const std::string& name, DType dtype, const std::set<std::string>& frozen);

// Values computed at import stay in the graph above this many elements (issue 29.7): folding a
// [16384, 16384] matmul would take minutes and gigabytes. Up to kMaxInlineElements, a folded
// constant is written inline (`constant`); above, it is a const bound from the weights file.
inline constexpr int64_t kMaxFoldElements = int64_t(1) << 20;
inline constexpr int64_t kMaxInlineElements = 32;

class Importer;
// Converts one ONNX node: reads its inputs and attributes through the importer and sets its outputs.
using Converter = void (*)(Importer& im, const onnx::NodeProto& n);
using ConverterTable = std::map<std::string, Converter>;
const ConverterTable& converters();

class Importer {
 public:
  Importer(const onnx::ModelProto& model, const std::string& name, const OnnxImportOptions& opt)
      : model_(model), opt_(opt), result_{ir::Graph(ir_name(name)), {}, {}, {}}, main_(result_.graph) {}

  OnnxImportResult run();

  // ---- used by the converters ----
  const onnx::NodeProto& node() const { return *node_; }
  int64_t opset() const { return opset_; }
  Builder& b() { return *builder_; }
  int num_inputs() const { return node_->input_size(); }
  bool has_input(int i) const { return i < node_->input_size() && !node_->input(i).empty(); }
  Slot& slot(int i) { return slots_.at(node_->input(i)); }
  bool is_const(int i) { return slot(i).is_const; }
  // Input i as a value of the graph being built (constants materialised).
  Value* in(int i);
  // Input i as a constant; error when it is computed from data.
  const Tensor& const_in(int i);
  std::vector<int64_t> const_ints(int i);
  ir::TensorType type_of(int i);
  void set_out(int k, Value* v) { out_values_[size_t(k)] = v; }
  void set_out_slot(int k, Slot s) { out_slots_[size_t(k)] = std::move(s); }
  void set_out_const(int k, Tensor t) {
    Slot s;
    s.is_const = true;
    s.constant = std::move(t);
    set_out_slot(k, std::move(s));
  }
  // The consumers of output k (for the linear + bias pattern).
  std::vector<const onnx::NodeProto*> consumers(int k) const;
  // Marks `n` as done, its output 0 being `v` (a linear's bias Add).
  void absorb(const onnx::NodeProto* n, Value* v) {
    absorbed_.insert(n);
    Slot s;
    s.value = v;
    slots_[n->output(0)] = std::move(s);
  }
  const Slot* find_slot(const std::string& name) const {
    auto it = slots_.find(name);
    return it == slots_.end() ? nullptr : &it->second;
  }
  // The param (frozen: a const) named after `initializer` holding `t`, declared once.
  Value* param(const std::string& initializer, const Tensor& t, bool frozen = false);

  // Attributes.
  const onnx::AttributeProto* attr(const std::string& name) const {
    for (const auto& a : node_->attribute())
      if (a.name() == name) return &a;
    return nullptr;
  }
  int64_t attr_int(const std::string& name, int64_t def) const {
    const auto* a = attr(name);
    return a ? a->i() : def;
  }
  double attr_float(const std::string& name, double def) const {
    const auto* a = attr(name);
    return a ? double(a->f()) : def;
  }
  std::vector<int64_t> attr_ints(const std::string& name) const {
    const auto* a = attr(name);
    return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : std::vector<int64_t>{};
  }
  std::string attr_str(const std::string& name, const std::string& def) const {
    const auto* a = attr(name);
    return a ? a->s() : def;
  }
  // "node 'name' (Op, output 'y')" for messages.
  std::string where() const;

 private:
  void check_versions();
  void check_nodes();
  void warn_constant_folded_export();
  void find_folded_transposes();
  std::string linear_module() const;
  void declare_inputs();
  // Runs the node's converter into the graph `builder_` builds; errors name the node.
  void run_converter(Converter f, const onnx::NodeProto& n);
  // Refuses results of the nodes of `g` from `first` on whose shapes pass the IR's bounds; returns
  // the largest result's element count.
  int64_t check_results(const ir::Graph& g, size_t first);
  void convert(const onnx::NodeProto& n);
  Value* materialise(const std::string& onnx_name, Slot& s);
  // A computed constant `t` as a value of the main graph (materialise's tail).
  Value* constant_value(const std::string& onnx_name, const Tensor& t);

  const onnx::ModelProto& model_;
  const OnnxImportOptions& opt_;
  OnnxImportResult result_;
  ir::Graph& main_;
  Builder* builder_ = nullptr;
  int64_t opset_ = 0;
  const onnx::NodeProto* node_ = nullptr;
  int node_index_ = 0;  // of node_ in the graph
  bool folding_ = false;
  std::unordered_map<std::string, Slot> slots_;
  std::map<std::string, Value*> params_;  // initializer/param name -> its param value
  std::map<std::string, std::string> renamed_;  // exporter-named initializer -> its module's name
  std::unordered_map<std::string, std::vector<const onnx::NodeProto*>> users_;
  std::set<const onnx::NodeProto*> absorbed_;
  // While converting one node:
  std::vector<Value*> out_values_;
  std::vector<Slot> out_slots_;
  std::map<Value*, Tensor> scratch_bound_;  // scratch graph inputs -> constants
  std::set<int64_t> batch_sizes_;  // the graph inputs' dim 0 (constant_value)
};


// Decoding (onnx_proto.cc).
onnx::ModelProto parse_model(const std::string& bytes, const std::string& name);

// Shared converter helpers (onnx_convert_math.cc, onnx_convert_shape.cc).
Value* rec(Importer& im, OpKind op, std::vector<Value*> xs, const ir::NamedAttrs& attrs = {});
void unary(Importer& im, OpKind op);
void binary(Importer& im, OpKind op);
DType to_dtype(Importer& im, int64_t onnx_type);
// Constant input i holding exactly one value (ValueError naming the node otherwise).
double scalar_in(Importer& im, int i);
// Axes from input `input` (opset >= 13) or else attribute `attr`.
std::vector<int64_t> axes_input_or_attr(Importer& im, int input, const char* attr);

// The families' tables.
void add_math_converters(ConverterTable& table);   // onnx_convert_math.cc
void add_shape_converters(ConverterTable& table);  // onnx_convert_shape.cc
void add_index_converters(ConverterTable& table);  // onnx_convert_index.cc
void add_loss_converters(ConverterTable& table);   // onnx_convert_loss.cc
void add_einsum_converters(ConverterTable& table);  // onnx_convert_einsum.cc

}  // namespace dt::io::onnx_internal
