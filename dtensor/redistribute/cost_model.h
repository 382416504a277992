// The α–β cost model of the redistribution planner: a collective costs a fixed latency α plus the
// bytes a rank sends divided by the bandwidth β; local steps (chunk, zero, keep) cost nothing.
//
// By default one α and one β price every collective (the documented constants below). A machine
// file (`dtensor calibrate`, autoplan/machine.h) can refine them: α–β measured per collective kind
// and group size, and a described cluster of hosts of `ranks_per_host` consecutive ranks whose
// groups that span hosts pay the inter-host α–β. Unset, the refinements change nothing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace dt {

struct AlphaBeta {
  double alpha_us = 10.0;  // latency per collective, microseconds
  double beta_gbs = 10.0;  // bandwidth per rank, GB/s (1e9 bytes per second)
  double us(int64_t bytes) const { return alpha_us + double(bytes) / (beta_gbs * 1e3); }
  bool operator==(const AlphaBeta&) const = default;
};

// The ranks a collective's group holds: how many, and how far apart its first and last rank are
// in the global rank order (span = 1 + the largest rank offset), which says whether it crosses hosts.
struct GroupExtent {
  int64_t size = 1;
  int64_t span = 1;
};

struct CostModel {
  CostModel() = default;
  CostModel(double alpha, double beta) : alpha_us(alpha), beta_gbs(beta) {}

  double alpha_us = 10.0;  // latency per collective, microseconds
  double beta_gbs = 10.0;  // bandwidth per rank, GB/s (1e9 bytes per second)
  // Measured α–β: kind (all_gather, all_reduce, reduce_scatter, all_to_all) -> group size -> α–β.
  // A group size not measured takes the largest measured size below it (the smallest above when
  // none is below); a kind not measured takes alpha_us / beta_gbs.
  std::map<std::string, std::map<int64_t, AlphaBeta>, std::less<>> measured;
  // A described cluster: hosts of ranks_per_host consecutive ranks (0: one host holds every rank);
  // a group spanning more than one host costs `inter_host` (its slowest link).
  int64_t ranks_per_host = 0;
  AlphaBeta inter_host;

  // Returns the estimated time of one collective sending `bytes` per rank, in microseconds.
  double collective_us(int64_t bytes) const { return alpha_us + double(bytes) / (beta_gbs * 1e3); }
  // The same for a collective of `kind` over `group`, with the refinements above.
  double collective_us(std::string_view kind, int64_t bytes, GroupExtent group) const {
    if (ranks_per_host > 0 && group.span > ranks_per_host) return inter_host.us(bytes);
    auto k = measured.find(kind);
    if (k == measured.end() || k->second.empty()) return collective_us(bytes);
    auto it = k->second.upper_bound(group.size);
    if (it != k->second.begin()) --it;
    return it->second.us(bytes);
  }
  bool operator==(const CostModel&) const = default;
};

}  // namespace dt
