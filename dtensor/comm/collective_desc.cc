#include "dtensor/comm/collective_desc.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace dt {

std::string_view collective_op_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce: return "all_reduce";
    case CollectiveOp::all_gather: return "all_gather";
    case CollectiveOp::reduce_scatter: return "reduce_scatter";
    case CollectiveOp::all_to_all: return "all_to_all";
    case CollectiveOp::broadcast: return "broadcast";
    case CollectiveOp::send: return "send";
    case CollectiveOp::recv: return "recv";
    case CollectiveOp::barrier: return "barrier";
  }
  return "?";
}

std::string ranks_str(const std::vector<int>& ranks) { return fmt::format("[{}]", fmt::join(ranks, ", ")); }

std::string CollectiveDesc::str() const {
  std::string_view name = collective_op_name(op);
  std::string_view dt = dtype_name(dtype);
  switch (op) {
    case CollectiveOp::all_reduce:
    case CollectiveOp::reduce_scatter:
      return fmt::format("{}({}, {}, {})", name, dt, count, reduce_op_name(reduce_op));
    case CollectiveOp::all_gather:
      return rows == 1 ? fmt::format("{}({}, {})", name, dt, count) : fmt::format("{}({}, {}, rows={})", name, dt, count, rows);
    case CollectiveOp::broadcast: return fmt::format("{}({}, {}, root={})", name, dt, count, root);
    case CollectiveOp::send: return fmt::format("{}({}, {}, dst={})", name, dt, count, root);
    case CollectiveOp::recv: return fmt::format("{}({}, {}, src={})", name, dt, count, root);
    case CollectiveOp::all_to_all:
      return fmt::format("{}({}, send=[{}], recv=[{}])", name, dt, fmt::join(send_counts, ", "),
                         fmt::join(recv_counts, ", "));
    case CollectiveOp::barrier: return "barrier()";
  }
  return std::string(name);
}

size_t CollectiveDesc::bytes() const {
  if (op == CollectiveOp::all_to_all) {
    size_t total = 0;
    for (size_t c : send_counts) total += c;
    return total * itemsize(dtype);
  }
  return count * itemsize(dtype);
}

namespace {

// Returns true when a and b agree at `level` (all_to_all counts are checked pairwise elsewhere).
bool descs_agree(const CollectiveDesc& a, const CollectiveDesc& b, MatchLevel level) {
  if (a.op != b.op) return false;
  if (itemsize(a.dtype) != itemsize(b.dtype)) return false;
  if (a.op == CollectiveOp::all_to_all) {
    if (a.send_counts.size() != b.send_counts.size()) return false;
  } else if (a.count != b.count) {
    return false;
  }
  if (a.op == CollectiveOp::all_reduce && a.algo != b.algo) return false;
  if (a.op == CollectiveOp::all_gather && a.rows != b.rows) return false;
  if (level == MatchLevel::memory_safety) return true;
  if (a.dtype != b.dtype) return false;
  if ((a.op == CollectiveOp::all_reduce || a.op == CollectiveOp::reduce_scatter) && a.reduce_op != b.reduce_op)
    return false;
  if (a.op == CollectiveOp::broadcast && a.root != b.root) return false;
  return true;
}

}  // namespace

std::string find_collective_mismatch(const std::vector<const CollectiveDesc*>& descs,
                                     const std::vector<int>& global_ranks, int64_t seq,
                                     MatchLevel level) {
  if (descs.empty()) return "";
  std::string where = fmt::format("collective #{} on group {} mismatch: ", seq, ranks_str(global_ranks));
  // Point-to-point: index 0 is the sender, index 1 the receiver.
  if (descs.size() == 2 && descs[0]->op == CollectiveOp::send && descs[1]->op == CollectiveOp::recv) {
    const CollectiveDesc& s = *descs[0];
    const CollectiveDesc& r = *descs[1];
    bool ok = s.count == r.count && itemsize(s.dtype) == itemsize(r.dtype) &&
              (level == MatchLevel::memory_safety || s.dtype == r.dtype);
    if (ok) return "";
    return where + fmt::format("rank {} issued {}, rank {} issued {}", global_ranks[0], s.str(),
                               global_ranks[1], r.str());
  }
  const CollectiveDesc& first = *descs[0];
  for (size_t i = 1; i < descs.size(); ++i) {
    if (!descs_agree(first, *descs[i], level)) {
      std::string text = where + fmt::format("rank {} issued {}, rank {} issued {}", global_ranks[0], first.str(),
                                             global_ranks[i], descs[i]->str());
      // str() omits the algorithm; name it when it is what differs.
      if (first.op == CollectiveOp::all_reduce && descs[i]->op == CollectiveOp::all_reduce &&
          first.algo != descs[i]->algo)
        text += fmt::format(" (algorithm {} vs {})", all_reduce_algo_name(first.algo), all_reduce_algo_name(descs[i]->algo));
      return text;
    }
  }
  if (first.op == CollectiveOp::all_to_all) {
    size_t n = descs.size();
    for (size_t j = 0; j < n; ++j) {
      if (descs[j]->send_counts.size() != n || descs[j]->recv_counts.size() != n)
        return where + fmt::format("rank {} issued {} with {} split sizes for a group of {}",
                                   global_ranks[j], descs[j]->str(), descs[j]->send_counts.size(), n);
    }
    for (size_t src = 0; src < n; ++src)
      for (size_t dst = 0; dst < n; ++dst) {
        size_t sent = descs[src]->send_counts[dst] * itemsize(descs[src]->dtype);
        size_t expected = descs[dst]->recv_counts[src] * itemsize(descs[dst]->dtype);
        if (sent != expected)
          return where + fmt::format("rank {} sends {} elements to rank {}, which expects {} (rank {} issued {}, rank {} issued {})",
                                     global_ranks[src], descs[src]->send_counts[dst], global_ranks[dst],
                                     descs[dst]->recv_counts[src], global_ranks[src], descs[src]->str(),
                                     global_ranks[dst], descs[dst]->str());
      }
  }
  return "";
}

}  // namespace dt
