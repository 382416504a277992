// One unit scheme for sizes in every report: B, KiB, MiB, GiB, the size picking the unit.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <string>

namespace dt {

// Returns "512 B", "1.50 KiB", "27.54 MiB", "1.20 GiB".
inline std::string bytes_text(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", v) : fmt::format("{:.2f} {}", v, units[u]);
}

}  // namespace dt
