#include "dtensor/core/shape.h"

#include <sstream>

#include "dtensor/core/error.h"

namespace dt {

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides st(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = acc;
    acc *= shape[i] > 0 ? shape[i] : 1;
  }
  return st;
}

int64_t normalize_dim(int64_t d, int64_t rank) {
  int64_t r = d < 0 ? d + rank : d;
  if (r < 0 || r >= rank)
    DT_THROW(DimError) << "dim " << d << " out of range for tensor of rank " << rank;
  return r;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1)
      DT_THROW(ShapeError) << "shapes " << shape_str(a) << " and " << shape_str(b)
                           << " do not broadcast (dim " << i << ": " << x << " vs " << y << ")";
    out[i] = x == 1 ? y : x;
  }
  return out;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

int64_t chunk_size(int64_t size, int64_t n) {
  DT_CHECK(n > 0) << n;
  return (size + n - 1) / n;
}
int64_t chunk_offset(int64_t size, int64_t n, int64_t index) {
  return std::min(index * chunk_size(size, n), size);
}
int64_t chunk_length(int64_t size, int64_t n, int64_t index) {
  int64_t c = chunk_size(size, n);
  int64_t lo = std::min(index * c, size);
  int64_t hi = std::min((index + 1) * c, size);
  return hi - lo;
}

}  // namespace dt
