#include "dtensor/core/rng.h"

#include <cmath>
#include <vector>

namespace dt {

uint64_t Generator::next_u64() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Generator::uniform() { return double(next_u64() >> 11) * (1.0 / 9007199254740992.0); }

double Generator::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u1 = uniform();
  double u2 = uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  double r = std::sqrt(-2.0 * std::log(u1));
  double theta = 2.0 * M_PI * u2;
  spare_ = r * std::sin(theta);
  has_spare_ = true;
  return r * std::cos(theta);
}

Tensor rand(const Shape& shape, Generator& gen, DType dtype, double low, double high) {
  if (!is_floating(dtype)) DT_THROW(DTypeError) << "rand needs a floating dtype, got " << dtype_name(dtype);
  std::vector<double> v(size_t(numel(shape)));
  for (double& x : v) x = low + (high - low) * gen.uniform();
  return Tensor::from_doubles(v, shape, dtype);
}

Tensor randn(const Shape& shape, Generator& gen, DType dtype, double mean, double std) {
  if (!is_floating(dtype)) DT_THROW(DTypeError) << "randn needs a floating dtype, got " << dtype_name(dtype);
  std::vector<double> v(size_t(numel(shape)));
  for (double& x : v) x = mean + std * gen.normal();
  return Tensor::from_doubles(v, shape, dtype);
}

Tensor randint(const Shape& shape, int64_t low, int64_t high, Generator& gen, DType dtype) {
  if (dtype != DType::i64 && dtype != DType::i32)
    DT_THROW(DTypeError) << "randint needs i64 or i32, got " << dtype_name(dtype);
  if (high <= low) DT_THROW(ValueError) << "randint needs low < high, got [" << low << ", " << high << ")";
  std::vector<double> v(size_t(numel(shape)));
  uint64_t span = uint64_t(high - low);
  for (double& x : v) x = double(low + int64_t(gen.next_u64() % span));
  return Tensor::from_doubles(v, shape, dtype);
}

}  // namespace dt
