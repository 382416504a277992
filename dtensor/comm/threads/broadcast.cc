// Direct broadcast: every non-root rank copies the root's `buf` into its own.
//
//   phase 1  non-roots: memcpy(buf, root's buf); the root does nothing;
//   barrier  "read": every rank has read the root's buf, so the root may complete.
#include <cstring>

#include "dtensor/comm/threads/algorithms.h"

namespace dt::threads {

void broadcast(AlgorithmContext& ctx) {
  const CollectiveDesc& desc = ctx.mine().desc;
  size_t nbytes = desc.count * itemsize(desc.dtype);
  if (nbytes == 0 || ctx.size() == 1) return;
  if (ctx.me != desc.root) std::memcpy(ctx.mine().out, ctx.part(desc.root).out, nbytes);
  ctx.barrier();
}

}  // namespace dt::threads
