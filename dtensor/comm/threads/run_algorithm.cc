#include "dtensor/comm/threads/algorithms.h"

namespace dt::threads {

std::string_view all_reduce_algorithm(size_t nbytes, const CommOptions& options) {
  return nbytes <= options.one_shot_threshold ? "one_shot" : "two_shot";
}

AllReduceAlgo resolve_all_reduce_algo(size_t nbytes, const CommOptions& options) {
  return nbytes <= options.one_shot_threshold ? AllReduceAlgo::one_shot : AllReduceAlgo::two_shot;
}

AllReduceAlgo run_algorithm(AlgorithmContext& ctx) {
  const CollectiveDesc& desc = ctx.mine().desc;
  switch (desc.op) {
    case CollectiveOp::all_reduce:
      if ((desc.algo == AllReduceAlgo::automatic ? resolve_all_reduce_algo(desc.bytes(), ctx.options) : desc.algo) ==
          AllReduceAlgo::one_shot) {
        all_reduce_one_shot(ctx);
        return AllReduceAlgo::one_shot;
      }
      all_reduce_two_shot(ctx);
      return AllReduceAlgo::two_shot;
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
