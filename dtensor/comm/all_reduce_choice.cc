#include "dtensor/comm/all_reduce_algos.h"

#include "dtensor/core/error.h"

namespace dt {

AllReduceAlgo choose_all_reduce_algo(AllReduceAlgo requested, size_t nbytes, const CommOptions& options) {
  if (requested != AllReduceAlgo::automatic) return requested;
  return nbytes <= options.one_shot_threshold ? AllReduceAlgo::one_shot : AllReduceAlgo::two_shot;
}

void run_all_reduce(PeerMemory& pm, AllReduceAlgo algo, void* out, size_t count, DType dtype, ReduceOp op) {
  switch (algo) {
    case AllReduceAlgo::one_shot: return all_reduce_one_shot(pm, out, count, dtype, op);
    case AllReduceAlgo::two_shot: return all_reduce_two_shot(pm, out, count, dtype, op);
    case AllReduceAlgo::automatic: break;
  }
  DT_CHECK(false) << "run_all_reduce needs a resolved algorithm, got " << all_reduce_algo_name(algo);
}

}  // namespace dt
