// One-shot all_reduce, for small buffers (at or under CommOptions::one_shot_threshold bytes).
//
// Every rank reads the whole `buf` of every peer and reduces all n buffers itself, in rank order
// 0..n-1, so each rank computes the identical result in a single pass with one synchronisation.
// It moves n times the data of two-shot's reduce phase but has the lowest latency, which is what
// matters for small buffers.
//
// The operation is in place and peers read my `buf` while I reduce, so I must not write `buf`
// until every peer is done reading it. Hence:
//   phase 1  reduce all peers' buf into my `scratch`;
//   barrier  "read": every rank has finished reading every buf;
//   phase 2  copy `scratch` into my buf.
// After the barrier no peer touches my buf again, so phase 2 needs no further synchronisation and
// this rank completes when its copy is done.
#include <cstring>

#include "dtensor/comm/reduce_kernel.h"
#include "dtensor/comm/threads/algorithms.h"

namespace dt::threads {

void all_reduce_one_shot(AlgorithmContext& ctx) {
  const CollectiveDesc& desc = ctx.mine().desc;
  int n = ctx.size();
  size_t nbytes = desc.count * itemsize(desc.dtype);
  if (n == 1 || nbytes == 0) return;  // the reduction of one buffer is itself (avg divides by 1)

  std::vector<const void*> bufs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) bufs[size_t(i)] = ctx.part(i).out;
  if (ctx.scratch.size() < nbytes) ctx.scratch.resize(nbytes);
  reduce_buffers(bufs.data(), n, ctx.scratch.data(), desc.count, desc.dtype, desc.reduce_op);
  ctx.barrier();
  std::memcpy(ctx.mine().out, ctx.scratch.data(), nbytes);
}

}  // namespace dt::threads
