#include "dtensor/core/dtype.h"

#include <cmath>

namespace dt {

size_t itemsize(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i64: return 8;
    case DType::i32: return 4;
    case DType::boolean: return 1;
  }
  DT_CHECK(false) << "bad dtype " << int(t);
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::boolean: return "bool";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  if (s == "f32" || s == "float32" || s == "float") return DType::f32;
  if (s == "f64" || s == "float64" || s == "double") return DType::f64;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "f16" || s == "float16" || s == "half") return DType::f16;
  if (s == "i64" || s == "int64") return DType::i64;
  if (s == "i32" || s == "int32") return DType::i32;
  if (s == "bool") return DType::boolean;
  DT_THROW(ValueError) << "unknown dtype '" << s
                       << "' (expected f32, f64, bf16, f16, i64, i32 or bool)";
}

bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}

}  // namespace dt
