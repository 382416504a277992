// Importing ONNX models (docs/import.md): an ONNX file becomes a static dtensor graph plus its
// weights, through the official ONNX library's protobuf classes (libonnx-dev).
//
// Shapes are made static at import: every graph input gets its shape from the model or from
// `input_shapes` (the dims an exporter left dynamic), and every value computed only from shapes
// and constants (the Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains exporters write,
// ConstantOfShape, Range, masks sliced from buffers) is evaluated at import with the same op
// kernels the runtime uses. What remains is a plain graph of IR ops:
//   - initializers read by the computation become parameters named by their ONNX names (PyTorch
//     keeps module paths, `h.0.attn.q_proj.weight`), so parallel plans apply unchanged;
//   - MatMul(x, Transpose(W)) [+ Add(bias)] and Gemm(transB = 1) with initializer weights become
//     `linear` (weight [out, in], as nn.Linear stores it), so column/row-wise plans match them; a
//     MatMul with an initializer weight [in, out] also becomes `linear`, its parameter holding the
//     transposed weight under the initializer's name;
//   - folded constants become `full` (one repeated value), `constant` (up to 4096 elements) or a
//     parameter named after the ONNX value (larger ones, such as a causal mask).
// Unsupported ops, dims that stay dynamic, inputs that must be constant but are computed, and
// IR/opset versions outside the supported range are dt::Error's naming the node (name, op type,
// first output); a file that is not an ONNX model is an IoError.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "dtensor/io/safetensors.h"
#include "dtensor/ir/graph.h"

namespace dt::io {

struct OnnxImportOptions {
  std::map<std::string, Shape> input_shapes;  // graph input name -> its shape
  std::map<std::string, DType> input_dtypes;  // graph input name -> dtype to declare it with
  // Graph inputs whose values are fixed at import (folded like initializers, not parameters): the
  // conformance suite feeds axes, starts and shapes as inputs.
  std::map<std::string, Tensor> constant_inputs;
  // Recognise the decomposed RMSNorm and attention patterns as rms_norm and
  // scaled_dot_product_attention (onnx_fusion.h); off, the graph keeps the exporter's ops.
  bool fuse = true;
};

struct OnnxImportResult {
  ir::Graph graph;
  TensorMap weights;  // one tensor per parameter of `graph`, by name
};

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

// The IR name the importer gives an ONNX value or input ("onnx::Mul_3" -> "onnx__Mul_3").
std::string onnx_ir_name(const std::string& onnx_name);

// The ONNX op types the importer converts (sorted), for docs and the conformance command.
std::vector<std::string> onnx_supported_ops();

}  // namespace dt::io
