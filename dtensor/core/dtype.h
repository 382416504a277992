// Element types and their conversions.
//
// bf16 and f16 are storage types: kernels load them into f32, compute in f32 and round back to
// nearest even on store. DT_DISPATCH picks the C++ type for a runtime dtype so that algorithms are
// written once and instantiated per dtype at the runtime boundary (style.md rule 2).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "dtensor/core/error.h"

namespace dt {

enum class DType : uint8_t { f32, f64, bf16, f16, i64, i32, boolean };
inline constexpr int kNumDTypes = 7;

// Returns the size in bytes of one element.
size_t itemsize(DType t);
// Returns the text name used by the CLI, the IR and the safetensors files' mapping: "f32", "bf16"...
std::string_view dtype_name(DType t);
// Parses "f32", "float32", "bf16", "bfloat16", "f16", "float16", "f64", "i64", "int64", "i32",
// "bool". Throws ValueError naming the text otherwise.
DType parse_dtype(std::string_view text);
bool is_floating(DType t);

// bfloat16 storage: the top 16 bits of an IEEE f32.
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  bf16(float f);  // rounds to nearest even; NaN stays NaN
  operator float() const {
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// IEEE half-precision storage.
struct f16 {
  uint16_t bits = 0;
  f16() = default;
  f16(float f);  // rounds to nearest even; overflow goes to inf
  operator float() const;
};

// The type arithmetic is done in: f32 for the 16-bit floats, the type itself otherwise.
template <typename T> struct compute_type { using type = T; };
template <> struct compute_type<bf16> { using type = float; };
template <> struct compute_type<f16> { using type = float; };
template <typename T> using compute_t = typename compute_type<T>::type;

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<f16>() { return DType::f16; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<bool>() { return DType::boolean; }

}  // namespace dt

// DT_DISPATCH(dtype, T, body): runs body with T bound to the C++ element type of dtype.
#define DT_DISPATCH_CASE(enumval, ctype, ...) \
  case ::dt::DType::enumval: {                \
    using T = ctype;                          \
    __VA_ARGS__;                              \
    break;                                    \
  }
#define DT_DISPATCH(dtype, ...)                                                    \
  switch (dtype) {                                                                 \
    DT_DISPATCH_CASE(f32, float, __VA_ARGS__)                                      \
    DT_DISPATCH_CASE(f64, double, __VA_ARGS__)                                     \
    DT_DISPATCH_CASE(bf16, ::dt::bf16, __VA_ARGS__)                                \
    DT_DISPATCH_CASE(f16, ::dt::f16, __VA_ARGS__)                                  \
    DT_DISPATCH_CASE(i64, int64_t, __VA_ARGS__)                                    \
    DT_DISPATCH_CASE(i32, int32_t, __VA_ARGS__)                                    \
    DT_DISPATCH_CASE(boolean, bool, __VA_ARGS__)                                   \
  }
// Same, floating dtypes only; others throw DTypeError naming `what`.
#define DT_DISPATCH_FLOAT(dtype, what, ...)                                              \
  switch (dtype) {                                                                       \
    DT_DISPATCH_CASE(f32, float, __VA_ARGS__)                                            \
    DT_DISPATCH_CASE(f64, double, __VA_ARGS__)                                           \
    DT_DISPATCH_CASE(bf16, ::dt::bf16, __VA_ARGS__)                                      \
    DT_DISPATCH_CASE(f16, ::dt::f16, __VA_ARGS__)                                        \
    default:                                                                             \
      DT_THROW(DTypeError) << what << " does not support dtype " << ::dt::dtype_name(dtype); \
  }
