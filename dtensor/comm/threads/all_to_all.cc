// Direct all_to_all with split sizes: rank s sends in_s[send_offset_s(d) .. + send_counts_s[d])
// to every rank d, which stores it at out_d[recv_offset_d(s) .. + recv_counts_d[s]); offsets are
// prefix sums of the counts. Example, n 2: rank 0 send_counts [1, 2], rank 1 send_counts [3, 0]
// -> rank 1 recv_counts [2, 0] receives in_0[1..3) at out_1[0..2).
//
// Each rank pulls its pieces from every peer's `in` (one copy per byte), walking round the group
// from its own index so peers' buffers are read in a staggered order:
//
//   phase 1  for s = me, me+1, ... (mod n): copy my piece of in_s into my out;
//   barrier  "read": every rank has read its piece of my `in`.
//
// The descriptors were checked beforehand: send_counts_s[d] == recv_counts_d[s] for every pair.
#include <cstring>

#include "dtensor/comm/threads/algorithms.h"

namespace dt::threads {

void all_to_all(AlgorithmContext& ctx) {
  const CollectiveDesc& desc = ctx.mine().desc;
  int n = ctx.size();
  size_t elem = itemsize(desc.dtype);
  auto* out = static_cast<std::byte*>(ctx.mine().out);
  size_t total = 0;
  for (int s = 0; s < n; ++s) total += desc.recv_counts[size_t(s)];
  if (total > 0) {
    for (int k = 0; k < n; ++k) {
      int s = (ctx.me + k) % n;
      const CollectiveDesc& peer = ctx.part(s).desc;
      size_t send_offset = 0;
      for (int d = 0; d < ctx.me; ++d) send_offset += peer.send_counts[size_t(d)];
      size_t recv_offset = 0;
      for (int r = 0; r < s; ++r) recv_offset += desc.recv_counts[size_t(r)];
      size_t bytes = desc.recv_counts[size_t(s)] * elem;
      if (bytes == 0) continue;
      std::memcpy(out + recv_offset * elem, static_cast<const std::byte*>(ctx.part(s).in) + send_offset * elem, bytes);
    }
  }
  // Peers may read my `in` even when I receive nothing.
  if (n > 1) ctx.barrier();
}

}  // namespace dt::threads
