// The α–β cost model of the redistribution planner: a collective costs a fixed latency α plus the
// bytes a rank sends divided by the bandwidth β; local steps (chunk, zero, keep) cost nothing.
#pragma once

#include <cstdint>

namespace dt {

struct CostModel {
  double alpha_us = 10.0;  // latency per collective, microseconds
  double beta_gbs = 10.0;  // bandwidth per rank, GB/s (1e9 bytes per second)

  // Returns the estimated time of one collective sending `bytes` per rank, in microseconds.
  double collective_us(int64_t bytes) const { return alpha_us + double(bytes) / (beta_gbs * 1e3); }
  bool operator==(const CostModel& o) const { return alpha_us == o.alpha_us && beta_gbs == o.beta_gbs; }
};

}  // namespace dt
