// Direct all_gather: out[s*count .. (s+1)*count) = rank s's `in`, for every group index s.
//
// Each rank copies every peer's `in` straight into its own `out` (one copy per byte, no staging),
// starting with its own index and walking round the group so that ranks read different peers'
// buffers at the same time instead of all reading rank 0 first.
//
//   for each chunk (kAllGatherChunkBytes of every input):
//     copy chunk of in_s into out[s*count ..] for s = me, me+1, ... (mod n);
//     barrier (all but the last chunk: pacing only);
//   barrier "read": every rank has read my `in`; after it nobody touches my buffers.
//
// Why chunks: every input is read by all n ranks. Keeping the ranks within one chunk of each
// other means the first reader pulls a chunk into the shared cache and the other n-1 read it from
// there, so each input crosses the memory bus about once instead of n times. The intermediate
// barriers are for pacing only; correctness needs just the final one.
//
// In place: when `in` is exactly my block of `out` (in == out + me*count), the own copy is
// skipped; peers then read my block of `out`, which I never write. Any other overlap of `in` and
// `out` is undefined.
#include <cstring>

#include "dtensor/comm/threads/algorithms.h"

namespace dt::threads {

void all_gather(AlgorithmContext& ctx) {
  const int n = ctx.size();
  const size_t block = ctx.desc().bytes();
  if (block == 0) return;
  auto* out = static_cast<std::byte*>(ctx.mine().out);
  ctx.paced_chunks(block, kAllGatherChunkBytes, [&](size_t begin, size_t len) {
    for (int k = 0; k < n; ++k) {
      int s = (ctx.me + k) % n;
      std::byte* dst = out + size_t(s) * block;
      const auto* src = static_cast<const std::byte*>(ctx.part(s).in);
      if (src != dst) std::memcpy(dst + begin, src + begin, len);
    }
  });
}

}  // namespace dt::threads
