// Element types and their conversions.
//
// bf16 and f16 are storage types: kernels load them into f32, compute in f32 and round back to
// nearest even on store. DT_DISPATCH picks the C++ type for a runtime dtype so that algorithms are
// written once and instantiated per dtype at the runtime boundary (style.md rule 2).
#pragma once

#include <cmath>
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

// The conversions are inline so that kernel loops over bf16/f16 can inline (and vectorise) them.
inline bf16::bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) {
    bits = uint16_t((u >> 16) | 0x40);  // keep sign, force a quiet NaN
    return;
  }
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate.
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  bits = uint16_t(u >> 16);
}

inline f16::f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  if (mag >= 0x7f800000u) {  // inf or NaN
    bits = uint16_t(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0u));
    return;
  }
  if (mag >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
    bits = uint16_t(sign | 0x7c00u);
    return;
  }
  if (mag < 0x38800000u) {  // result is subnormal (or zero) in f16
    // Value = mag as float; f16 subnormal unit is 2^-24. Round to nearest even in that unit.
    float af;
    std::memcpy(&af, &mag, 4);
    float scaled = af * 16777216.0f;  // exact: multiply by 2^24
    float r = std::nearbyint(scaled);  // default rounding mode is nearest-even
    bits = uint16_t(sign | uint32_t(r));
    return;
  }
  // Normal: rebias exponent (127 -> 15) and round the 23-bit mantissa to 10 bits, nearest even.
  uint32_t lsb = (mag >> 13) & 1u;
  mag += 0xfffu + lsb;
  bits = uint16_t(sign | ((mag - 0x38000000u) >> 13));
}

inline f16::operator float() const {
  uint32_t sign = uint32_t(bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t man = bits & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (man == 0) {
      out = sign;
    } else {  // subnormal: value = man * 2^-24
      float v = float(man) * (1.0f / 16777216.0f);
      std::memcpy(&out, &v, 4);
      out |= sign;
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (man << 13);
  } else {
    out = sign | ((exp + 112u) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

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
