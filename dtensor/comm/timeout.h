// Converting timeouts without overflow.
//
// A Duration is int64 milliseconds, but `steady_clock::now() + timeout` converts it to int64
// nanoseconds: past about 106 days (9.2e12 ms) the sum wraps negative and every wait ends at
// once. Every deadline in the comm backends is computed by deadline_after, which saturates, and a
// timeout given in seconds (--timeout-s) goes through timeout_from_seconds, which validates.
#pragma once

#include <chrono>
#include <string_view>

#include "dtensor/comm/process_group.h"

namespace dt {

// The largest timeout a user may ask for: about 11.6 days, far beyond any collective.
inline constexpr double kMaxTimeoutSeconds = 1e6;
// Waits are capped here (100 years): now + this stays far from int64 nanoseconds' limit.
inline constexpr Duration kMaxWait = std::chrono::duration_cast<Duration>(std::chrono::hours(24 * 365 * 100));

// Returns `seconds` (finite, > 0, <= kMaxTimeoutSeconds) as a Duration rounded to the nearest
// millisecond (at least 1 ms); throws ValueError naming `option` otherwise (nan, inf, 0, -1, 1e10).
Duration timeout_from_seconds(double seconds, std::string_view option);

// Returns steady_clock::now() + timeout, with timeout clamped to [0, kMaxWait].
std::chrono::steady_clock::time_point deadline_after(Duration timeout);

}  // namespace dt
