// Point-to-point send/recv as a two-member rendezvous: participant 0 is the sender, 1 the
// receiver, keyed by (group, src, dst, n-th message from src to dst) so messages between a pair
// match in order and independently of other pairs and of collectives.
//
//   phase 1  the receiver copies the sender's `in` into its `out`;
//   barrier  the sender completes only once its buffer has been read.
//
// Both sides block their group's progress thread until matched (rendezvous, no eager buffering):
// two ranks that each send to the other before receiving must order the pair (e.g. even ranks
// send first) or the sends time out.
#include <cstring>

#include "dtensor/comm/threads/algorithms.h"

namespace dt::threads {

void send_recv(AlgorithmContext& ctx) {
  const CollectiveDesc& desc = ctx.desc();
  const size_t nbytes = desc.bytes();
  if (nbytes == 0) return;
  if (ctx.me == 1) std::memcpy(ctx.mine().out, ctx.part(0).in, nbytes);
  ctx.barrier();
}

}  // namespace dt::threads
