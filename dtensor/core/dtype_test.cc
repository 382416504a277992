#include "dtensor/core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace dt {
namespace {

TEST(DType, NamesRoundTrip) {
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i64, DType::i32, DType::boolean})
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_THROW(parse_dtype("f8"), ValueError);
}

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1 + 2^-7: ties go to even (1.0).
  EXPECT_EQ(float(bf16(1.0f + 1.0f / 256)), 1.0f);
  // 1 + 3*2^-8 is halfway between 1+2^-7 and 1+2^-6: ties go to even (1+2^-6).
  EXPECT_EQ(float(bf16(1.0f + 3.0f / 256)), 1.0f + 1.0f / 64);
  // Just above halfway rounds up.
  EXPECT_EQ(float(bf16(1.0f + 1.0f / 256 + 1.0f / 65536)), 1.0f + 1.0f / 128);
  EXPECT_TRUE(std::isnan(float(bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(float(bf16(-2.5f)), -2.5f);
}

TEST(DType, F16RoundsToNearestEven) {
  EXPECT_EQ(float(f16(1.0f + 1.0f / 2048)), 1.0f);  // halfway, tie to even
  EXPECT_EQ(float(f16(1.0f + 3.0f / 2048)), 1.0f + 1.0f / 512);
  EXPECT_EQ(float(f16(65504.0f)), 65504.0f);  // largest finite
  EXPECT_TRUE(std::isinf(float(f16(70000.0f))));
  EXPECT_EQ(float(f16(5.9604645e-8f)), 5.9604645e-8f);  // smallest subnormal 2^-24
  EXPECT_EQ(float(f16(2.0f * 5.9604645e-8f)), 2.0f * 5.9604645e-8f);
  EXPECT_EQ(float(f16(-0.0f)), -0.0f);
  // Every f16 bit pattern that is finite survives a round trip through f32.
  for (uint32_t b = 0; b < 0x7c00; ++b) {
    f16 h;
    h.bits = uint16_t(b);
    EXPECT_EQ(f16(float(h)).bits, h.bits) << b;
  }
}

}  // namespace
}  // namespace dt
