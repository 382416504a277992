// Comparison of two tensors' values (in double), for tests and run verification.
#include <cmath>
#include <limits>

#include "dtensor/kernels/ops.h"

namespace dt {

DiffReport compare(const Tensor& actual, const Tensor& expected, double rtol, double atol) {
  DiffReport r;
  if (actual.shape() != expected.shape()) {
    r.shapes_match = false;
    r.mismatches = std::max(actual.numel(), expected.numel());
    r.max_abs_diff = r.max_rel_diff = std::numeric_limits<double>::infinity();
    return r;
  }
  const std::vector<double> a = actual.to_doubles(), b = expected.to_doubles();
  const double tiny = std::numeric_limits<double>::min();
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    double abs_diff, rel_diff;
    bool close;
    if (x == y) {  // also equal infinities
      abs_diff = rel_diff = 0;
      close = true;
    } else if (std::isnan(x) || std::isnan(y) || std::isinf(x) || std::isinf(y)) {
      // NaN never matches (torch.allclose with equal_nan=False); an infinity only matches itself.
      abs_diff = rel_diff = std::numeric_limits<double>::infinity();
      close = false;
    } else {
      abs_diff = std::fabs(x - y);
      rel_diff = abs_diff / std::max(std::fabs(y), tiny);
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
