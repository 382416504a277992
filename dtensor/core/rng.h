// A seeded generator whose stream is identical on every platform.
//
// The bit stream is SplitMix64 (fixed integer arithmetic, no std:: distributions, whose output
// differs between standard libraries). Uniforms take the top 24 (f32) or 53 (f64) bits; normals
// use Box-Muller on two uniforms.
#pragma once

#include <cstdint>

#include "dtensor/core/tensor.h"

namespace dt {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : state_(seed) {}
  uint64_t next_u64();
  double uniform();  // [0, 1) with 53 bits
  double normal();   // mean 0, stddev 1

 private:
  uint64_t state_;
  bool has_spare_ = false;
  double spare_ = 0;
};

// Returns a tensor of uniform [low, high) values (floating dtypes) drawn in row-major order.
Tensor rand(const Shape& shape, Generator& gen, DType dtype = DType::f32, double low = 0, double high = 1);
// Returns a tensor of normal(mean, std) values drawn in row-major order.
Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::f32, double mean = 0, double std = 1);
// Returns integers uniform in [low, high) (i64 or i32).
Tensor randint(const Shape& shape, int64_t low, int64_t high, Generator& gen, DType dtype = DType::i64);

}  // namespace dt
