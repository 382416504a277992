// Comparison of two tensors' values (in double), for tests and run verification.
#include <cmath>
#include <limits>

#include "dtensor/kernels/ops.h"

namespace dt {

DiffReport compare(const Tensor& actual, const Tensor& expected, double rtol, double atol, double rel_floor) {
  DiffReport r;
  if (actual.shape() != expected.shape()) {
    r.shapes_match = false;
    r.mismatches = std::max(actual.numel(), expected.numel());
    r.max_abs_diff = r.max_rel_diff = std::numeric_limits<double>::infinity();
    return r;
  }
  const std::vector<double> a = actual.to_doubles(), b = expected.to_doubles();
  if (rel_floor < 0) rel_floor = std::numeric_limits<double>::min();
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    double abs_diff, rel_diff;
    bool close;
    if (x == y) {  // also equal infinities
      abs_diff = rel_diff = 0;
      close = true;
    } else if (!std::isfinite(x) || !std::isfinite(y)) {
      abs_diff = rel_diff = std::numeric_limits<double>::infinity();
      close = false;
    } else {
      abs_diff = std::fabs(x - y);
      const double denom = std::max(std::fabs(y), rel_floor);
      rel_diff = denom > 0 ? abs_diff / denom : std::numeric_limits<double>::infinity();
      close = abs_diff <= atol + rtol * std::fabs(y);
    }
    r.max_abs_diff = std::max(r.max_abs_diff, abs_diff);
    r.max_rel_diff = std::max(r.max_rel_diff, rel_diff);
    if (!close) ++r.mismatches;
  }
  return r;
}

bool allclose(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  DiffReport r = compare(actual, expected, rtol, atol);
  return r.shapes_match && r.mismatches == 0;
}

}  // namespace dt
