#include "dtensor/comm/timeout.h"

#include <algorithm>
#include <fmt/format.h>

#include <cmath>

#include "dtensor/core/error.h"

namespace dt {

Duration timeout_from_seconds(double seconds, std::string_view option) {
  if (!std::isfinite(seconds) || seconds <= 0 || seconds > kMaxTimeoutSeconds)
    DT_THROW(ValueError) << option << " must be a number of seconds in (0, " << fmt::format("{}", kMaxTimeoutSeconds)
                         << "], got " << fmt::format("{}", seconds);  // shortest exact form: 1000001, not 1e+06
  // seconds <= 1e6, so the product is at most 1e9 ms: no overflow.
  return Duration(std::max<int64_t>(1, std::llround(seconds * 1e3)));
}

std::chrono::steady_clock::time_point deadline_after(Duration timeout) {
  timeout = std::clamp(timeout, Duration(0), kMaxWait);
  return std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
}

}  // namespace dt
