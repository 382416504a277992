// Direct all_gather: out[s*count .. (s+1)*count) = rank s's `in`, for every group index s.
//
// Each rank copies every peer's `in` straight into its own `out` (one copy per byte, no staging),
// starting with its own index and walking round the group so that ranks read different peers'
// buffers at the same time instead of all reading rank 0 first.
//
//   phase 1  copy in_s into out[s*count ..] for s = me, me+1, ... (mod n);
//   barrier  "read": every rank has read my `in`; after it nobody touches my buffers.
//
// In place: when `in` is exactly my block of `out` (in == out + me*count), the own copy is
// skipped; peers then read my block of `out`, which I never write. Any other overlap of `in` and
// `out` is undefined.
#include <cstring>

#include "dtensor/comm/threads/algorithms.h"

namespace dt::threads {

void all_gather(AlgorithmContext& ctx) {
  const CollectiveDesc& desc = ctx.mine().desc;
  int n = ctx.size();
  size_t block = desc.count * itemsize(desc.dtype);
  if (block == 0) return;
  auto* out = static_cast<std::byte*>(ctx.mine().out);
  for (int k = 0; k < n; ++k) {
    int s = (ctx.me + k) % n;
    std::byte* dst = out + size_t(s) * block;
    const void* src = ctx.part(s).in;
    if (src != dst) std::memcpy(dst, src, block);
  }
  if (n > 1) ctx.barrier();
}

}  // namespace dt::threads
