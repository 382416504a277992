// Importing ONNX models (docs/import.md): an ONNX file becomes a static dtensor graph plus its
// weights, through the official ONNX library's protobuf classes (libonnx-dev).
//
// Shapes are made static at import: every graph input gets its shape from the model or from
// `input_shapes` (the dims an exporter left dynamic), and every value computed only from shapes
// and constants (the Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains exporters write,
// ConstantOfShape, Range, masks sliced from buffers) is evaluated at import with the same op
// kernels the runtime uses. What remains is a plain graph of IR ops:
//   - floating initializers read by the computation become parameters named by their ONNX names
//     (PyTorch keeps module paths, `h.0.attn.q_proj.weight`), so parallel plans apply unchanged;
//     a value computed from one is never folded (a position embedding read through a Gather stays
//     a gather of `wpe.weight` in the graph); buffers (integer initializers, PyTorch's buffer
//     names such as `inv_freq`, names in `frozen`) become consts (IR `const`: never trained,
//     replicated unless a plan names them);
//   - MatMul(x, Transpose(W)) [+ Add(bias)] and Gemm(transB = 1) with initializer weights become
//     `linear` (weight [out, in], as nn.Linear stores it), so column/row-wise plans match them; a
//     MatMul with an initializer weight [in, out] also becomes `linear`, its parameter holding the
//     transposed weight under the initializer's name;
//   - folded constants become `full` (one repeated value), `constant` (up to 32 elements) or a
//     const named after the ONNX value, stored with the weights (larger ones: a causal mask, RoPE
//     tables). Folding stops at 2^20 elements per result: larger computations stay in the graph;
//     a shape past the IR's bounds (dims 2^40, 2^50 elements) is refused.
// Before converting, every node is checked: all unsupported ops are listed in one error, and a
// node without outputs, with a wrong number of inputs or outputs for its op, or redefining a name
// is refused. Every error raised while converting a node names it.
// Unsupported ops, dims that stay dynamic, inputs that must be constant but are computed, and
// IR/opset versions outside the supported range are dt::Error's naming the node (name, op type,
// first output); a file that is not an ONNX model is an IoError.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "dtensor/io/safetensors.h"
#include "dtensor/ir/graph.h"
#include "dtensor/passes/onnx_fusion.h"

namespace dt::io {

struct OnnxImportOptions {
  std::map<std::string, Shape> input_shapes;  // graph input name -> its shape
  std::map<std::string, DType> input_dtypes;  // graph input name -> dtype to declare it with
  // Graph inputs whose values are fixed at import (folded like initializers, not parameters): the
  // conformance suite feeds axes, starts and shapes as inputs.
  std::map<std::string, Tensor> constant_inputs;
  // Recognise the decomposed RMSNorm and attention patterns as rms_norm and
  // scaled_dot_product_attention (the pass in passes/onnx_fusion.h); off, the graph keeps the exporter's ops.
  bool fuse = true;
  // Initializers to import as consts although they look trainable (`--frozen NAME`).
  std::set<std::string> frozen;
  // When > 0, dims the model leaves dynamic and `input_shapes` does not give get this size (the
  // fuzz harness); 0: such a dim is an error naming the input.
  int64_t dynamic_dim_default = 0;
};

struct OnnxImportSummary {
  passes::FusionCounts fused;
  int frozen = 0;      // consts: buffers and folded constants stored with the weights
  int parameters = 0;  // trainable parameters
};

struct OnnxImportResult {
  ir::Graph graph;
  TensorMap weights;  // one tensor per parameter and const of `graph`, by name
  OnnxImportSummary summary;
  std::vector<std::string> warnings;  // one line each (a constant-folded export)
};

// "fused: 2 attention, 5 rms_norm; frozen constants: 3; parameters: 24".
std::string import_summary(const OnnxImportSummary& s);

// Supported range of the model's ir_version and of its default-domain opset.
inline constexpr int64_t kOnnxMinIrVersion = 3, kOnnxMaxIrVersion = 8;
inline constexpr int64_t kOnnxMinOpset = 11, kOnnxMaxOpset = 17;

// Imports the ONNX file at `path` (see the file comment); the graph is verified.
OnnxImportResult import_onnx(const std::string& path, const OnnxImportOptions& options = {});
// Same, from the bytes of a model file; `name` is used in messages and as the graph's name.
OnnxImportResult import_onnx_bytes(const std::string& bytes, const std::string& name,
                                   const OnnxImportOptions& options = {});

// Reads one ONNX TensorProto file (the conformance suite's input_*.pb / output_*.pb); returns the
// tensor and sets `name` to its name.
Tensor read_onnx_tensor(const std::string& path, std::string* name = nullptr);

// Parses `--input-shape` text "name=2x32" (a scalar: "name=") and `--input-dtype` text
// "name=i64"; ValueError naming the text otherwise.
std::pair<std::string, Shape> parse_input_shape(const std::string& text);
std::pair<std::string, DType> parse_input_dtype(const std::string& text);
// Parses each text into `options`; a name given twice is a ValueError (not last-wins).
void add_input_shapes(OnnxImportOptions& options, const std::vector<std::string>& texts);
void add_input_dtypes(OnnxImportOptions& options, const std::vector<std::string>& texts);

// The IR name the importer gives an ONNX value or input ("onnx::Mul_3" -> "onnx__Mul_3").
std::string onnx_ir_name(const std::string& onnx_name);

// The ONNX op types the importer converts (sorted), for docs and the conformance command.
std::vector<std::string> onnx_supported_ops();

}  // namespace dt::io
