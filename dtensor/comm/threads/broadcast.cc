// Direct broadcast: every non-root rank copies the root's `buf` into its own.
//
//   for each chunk (kBroadcastChunkBytes of the root's buf):
//     non-roots: copy the chunk of the root's buf into theirs; the root does nothing;
//     barrier (pacing for all but the last chunk; the last one is "read": every rank has read
//     the root's buf, so the root may complete).
//
// Chunks keep the readers within one chunk of each other, so the root's buffer is pulled from
// memory once and the other readers find it in the shared cache.
#include <cstring>

#include "dtensor/comm/threads/algorithms.h"

namespace dt::threads {

void broadcast(AlgorithmContext& ctx) {
  const CollectiveDesc& desc = ctx.desc();
  const size_t nbytes = desc.bytes();
  if (nbytes == 0 || ctx.size() == 1) return;
  auto* dst = static_cast<std::byte*>(ctx.mine().out);
  const auto* src = static_cast<const std::byte*>(ctx.part(desc.root).out);
  ctx.paced_chunks(nbytes, kBroadcastChunkBytes, [&](size_t begin, size_t len) {
    if (ctx.me != desc.root) std::memcpy(dst + begin, src + begin, len);
  });
}

}  // namespace dt::threads
