// One-shot all_reduce, for small buffers (at or under CommOptions::one_shot_threshold bytes).
//
// Every member reads the whole buffer of every peer and reduces all n buffers itself, in member
// order 0..n-1, so each member computes the identical result in a single pass with one
// synchronisation. It moves n times the data of two-shot's reduce phase but has the lowest
// latency, which is what matters for small buffers.
//
// When the output is my own peer buffer (threads: in place on the caller's `buf`), peers read it
// while I reduce, so I must not write it until every peer is done reading:
//   phase 1  reduce all peers' buffers into my scratch;
//   finish   (threads: a barrier) every member has finished reading every buffer;
//   phase 2  copy scratch into my buffer.
// When the output is private (MPI window: the caller's buffer, the inputs in the segments), I
// reduce straight into it and finish.
#include <cstring>

#include "dtensor/comm/all_reduce_algos.h"
#include "dtensor/comm/reduce_kernel.h"

namespace dt {

void all_reduce_one_shot(PeerMemory& pm, void* out, size_t count, DType dtype, ReduceOp op) {
  int n = pm.size();
  size_t nbytes = count * itemsize(dtype);
  std::vector<const void*> bufs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) bufs[size_t(i)] = pm.peer(i);
  if (out != pm.peer(pm.me())) {
    if (nbytes > 0) reduce_buffers(bufs.data(), n, out, count, dtype, op);
    pm.finish();
    return;
  }
  if (n == 1 || nbytes == 0) {  // the reduction of one buffer is itself (avg divides by 1)
    pm.finish();
    return;
  }
  std::vector<std::byte>& scratch = pm.scratch();
  if (scratch.size() < nbytes) scratch.resize(nbytes);
  reduce_buffers(bufs.data(), n, scratch.data(), count, dtype, op);
  pm.finish();
  std::memcpy(out, scratch.data(), nbytes);
}

}  // namespace dt
