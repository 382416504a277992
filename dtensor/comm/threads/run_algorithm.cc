#include "dtensor/comm/threads/algorithms.h"

namespace dt::threads {

std::string_view all_reduce_algorithm(size_t nbytes, const CommOptions& options) {
  return nbytes <= options.one_shot_threshold ? "one_shot" : "two_shot";
}

void run_algorithm(AlgorithmContext& ctx) {
  const CollectiveDesc& desc = ctx.mine().desc;
  switch (desc.op) {
    case CollectiveOp::all_reduce:
      if (all_reduce_algorithm(desc.bytes(), ctx.options) == "one_shot")
        all_reduce_one_shot(ctx);
      else
        all_reduce_two_shot(ctx);
      return;
    case CollectiveOp::all_gather: return all_gather(ctx);
    case CollectiveOp::reduce_scatter: return reduce_scatter(ctx);
    case CollectiveOp::all_to_all: return all_to_all(ctx);
    case CollectiveOp::broadcast: return broadcast(ctx);
    case CollectiveOp::send:
    case CollectiveOp::recv: return send_recv(ctx);
    case CollectiveOp::barrier: return barrier(ctx);
  }
}

}  // namespace dt::threads
