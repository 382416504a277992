// Decoding ONNX protobuf pieces the importer reads (onnx_importer.h): element types, tensors
// (initializers, Constant values, the conformance suite's .pb files), whole models, and the names
// ONNX values get in the IR.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <cstring>

#include "dtensor/core/error.h"
#include "dtensor/core/input_file.h"
#include "dtensor/io/onnx_import.h"
#include "dtensor/io/onnx_importer.h"

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

int64_t checked_numel(const Shape& shape, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || d > kOnnxMaxDim) DT_THROW(ValueError) << what << " has a bad dim " << d << " (dims are 0 to 2^40)";
    if (__builtin_mul_overflow(n, std::max<int64_t>(d, 1), &n) || n > kOnnxMaxNumel)
      DT_THROW(ValueError) << what << " has shape " << shape_str(shape) << ", more than 2^50 elements";
  }
  return numel(shape);
}

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& what) {
  const DType dtype = onnx_dtype(p.data_type(), what);
  Shape shape(p.dims().begin(), p.dims().end());
  if (p.data_location() == onnx::TensorProto::EXTERNAL)
    DT_THROW(ValueError) << what << " stores its data in an external file, which the importer does not read";
  const int64_t n = checked_numel(shape, what);
  // Exactly one payload: raw_data, or the typed field of the element type.
  const int typed = p.float_data_size() + p.double_data_size() + p.int64_data_size() + p.int32_data_size() +
                    p.uint64_data_size() + p.string_data_size();
  if (p.has_raw_data() && typed > 0)
    DT_THROW(ValueError) << what << " has both raw_data and " << typed << " typed values (one payload expected)";
  // The element count is checked against the payload before anything is allocated: a header that
  // claims 2^40 elements over a few bytes of data is refused, not allocated.
  const size_t have = p.has_raw_data() ? p.raw_data().size() / std::max<size_t>(1, itemsize(dtype)) : size_t(typed);
  if (size_t(n) > have)
    DT_THROW(ValueError) << what << " has " << have << " values for shape " << shape_str(shape) << " (" << n << " elements)";
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

onnx::ModelProto parse_model(const std::string& bytes, const std::string& name) {
  onnx::ModelProto m;
  if (bytes.size() > size_t(INT32_MAX) || !m.ParseFromArray(bytes.data(), int(bytes.size())))
    DT_THROW(IoError) << name << ": not a valid ONNX model (the protobuf does not parse: truncated or another format)";
  if (!m.has_graph()) DT_THROW(IoError) << name << ": the ONNX model has no graph";
  return m;
}

}  // namespace onnx_internal

using namespace onnx_internal;

Tensor read_onnx_tensor(const std::string& path, std::string* name) {
  const std::string bytes = read_input_file(path, "ONNX tensor");
  onnx::TensorProto p;
  if (!p.ParseFromArray(bytes.data(), int(bytes.size()))) DT_THROW(IoError) << path << ": not an ONNX TensorProto";
  if (name) *name = p.name();
  return tensor_from_proto(p, path);
}

std::string onnx_ir_name(const std::string& onnx_name) { return ir_name(onnx_name); }

}  // namespace dt::io
