#include "dtensor/comm/all_reduce_algos.h"
#include "dtensor/comm/threads/algorithms.h"

namespace dt::threads {

AllReduceAlgo run_algorithm(AlgorithmContext& ctx) {
  const CollectiveDesc& desc = ctx.mine().desc;
  switch (desc.op) {
    case CollectiveOp::all_reduce: {
      RendezvousPeerMemory pm(ctx);
      run_all_reduce(pm, desc.algo, ctx.mine().out, desc.count, desc.dtype, desc.reduce_op);
      return desc.algo;
    }
    case CollectiveOp::all_gather: all_gather(ctx); break;
    case CollectiveOp::reduce_scatter: reduce_scatter(ctx); break;
    case CollectiveOp::all_to_all: all_to_all(ctx); break;
    case CollectiveOp::broadcast: broadcast(ctx); break;
    case CollectiveOp::send:
    case CollectiveOp::recv: send_recv(ctx); break;
    case CollectiveOp::barrier: barrier(ctx); break;
  }
  return AllReduceAlgo::automatic;
}

}  // namespace dt::threads
