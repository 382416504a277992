// Direct reduce_scatter: out[0..count) = reduction over ranks s (in order 0..n-1) of block `me`
// of rank s's `in` (in_s[me*count .. (me+1)*count)).
//
// Each rank reads its own block from every peer's `in` and reduces it into its `out`: every input
// byte is read once, by the one rank that needs it, and nothing is staged.
//
//   phase 1  out = reduce(in_0[me block], ..., in_{n-1}[me block]);
//   barrier  "read": every rank has read its block of my `in`; after it nobody touches my buffers.
//
// In place: `out` may be my own block of `in` (out == in + me*count): only I read that block, and
// reduce_buffers reads each piece from every input before storing it.
#include "dtensor/comm/reduce_kernel.h"
#include "dtensor/comm/threads/algorithms.h"

namespace dt::threads {

void reduce_scatter(AlgorithmContext& ctx) {
  const CollectiveDesc& desc = ctx.desc();
  int n = ctx.size();
  const size_t block = desc.bytes();
  if (block == 0) return;
  std::vector<const void*> blocks(static_cast<size_t>(n));
  for (int s = 0; s < n; ++s)
    blocks[size_t(s)] = static_cast<const std::byte*>(ctx.part(s).in) + size_t(ctx.me) * block;
  reduce_buffers(blocks.data(), n, ctx.mine().out, desc.count, desc.dtype, desc.reduce_op);
  if (n > 1) ctx.barrier();
}

}  // namespace dt::threads
