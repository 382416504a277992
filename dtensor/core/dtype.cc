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

bf16::bf16(float f) {
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

f16::f16(float f) {
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

f16::operator float() const {
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

}  // namespace dt
