#include "dtensor/core/bf16_rows.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

namespace dt {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// f32 values whose rounding to bf16 is easy to get wrong: ties both ways, just off a tie, the
// carry into the exponent, the largest finite values (round to inf), subnormals (kept, not
// flushed), signed zeros, infinities and NaNs with payloads, then a spread of other bit patterns.
std::vector<float> hard_values() {
  std::vector<uint32_t> u = {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0x3fffffffu, 0x3fff8000u,
                             0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0x00000001u, 0x00008000u, 0x00018000u,
                             0x007fffffu, 0x80000001u, 0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                             0x7fc00000u, 0xffc00001u, 0x7f800001u, 0xff812345u};
  for (uint32_t x = 0; x < 4000; ++x) u.push_back(x * 0x0010c6f7u + (x & 0xffffu));
  std::vector<float> v;
  for (uint32_t x : u) v.push_back(float_of(x));
  return v;
}

// The lengths cover the 16-lane loop, its tail and a run with no full vector.
constexpr int64_t kLengths[] = {0, 1, 15, 16, 17, 33, 4022};

TEST(Bf16Rows, NarrowIsDtypeRoundingBitForBit) {
  const std::vector<float> src = hard_values();
  for (int64_t n : kLengths) {
    std::vector<bf16> got(size_t(n) + 1);
    got[size_t(n)].bits = 0xabcd;  // a guard past the end
    narrow_to_bf16(src.data(), got.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[size_t(i)].bits, bf16(src[size_t(i)]).bits) << "n " << n << " f32 bits " << std::hex
                                                                << bits_of(src[size_t(i)]);
    EXPECT_EQ(got[size_t(n)].bits, 0xabcd) << "wrote past n " << n;
  }
  // The examples dtype_test spells out: ties to even, subnormals kept, NaN quiet.
  bf16 out[3];
  const float in[3] = {1.0f + 1.0f / 256, float_of(0x00018000u), float_of(0x7f800001u)};
  narrow_to_bf16(in, out, 3);
  EXPECT_EQ(out[0].bits, 0x3f80);
  EXPECT_EQ(out[1].bits, 0x0002);
  EXPECT_EQ(out[2].bits, 0x7fc0);
}

TEST(Bf16Rows, WidenIsExactForEveryBitPattern) {
  std::vector<bf16> src(65536);
  for (uint32_t b = 0; b < 65536; ++b) src[b].bits = uint16_t(b);
  std::vector<float> got(65536 + 1, -7.0f);
  widen_bf16(src.data(), got.data(), 65536);
  for (uint32_t b = 0; b < 65536; ++b) ASSERT_EQ(bits_of(got[b]), b << 16) << "bf16 bits " << std::hex << b;
  EXPECT_EQ(got[65536], -7.0f);
  for (int64_t n : kLengths) {
    std::vector<float> part(size_t(n) + 1, -7.0f);
    widen_bf16(src.data() + 3, part.data(), n);  // an unaligned start
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits_of(part[size_t(i)]), uint32_t(i + 3) << 16);
    EXPECT_EQ(part[size_t(n)], -7.0f);
  }
}

TEST(Bf16Rows, RoundThroughIsNarrowThenWiden) {
  const std::vector<float> src = hard_values();
  for (int64_t n : kLengths) {
    std::vector<float> p(src.begin(), src.begin() + n);
    p.push_back(-7.0f);
    round_through_bf16(p.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(bits_of(p[size_t(i)]), uint32_t(bf16(src[size_t(i)]).bits) << 16)
          << "n " << n << " f32 bits " << std::hex << bits_of(src[size_t(i)]);
    EXPECT_EQ(p[size_t(n)], -7.0f);
  }
}

}  // namespace
}  // namespace dt
