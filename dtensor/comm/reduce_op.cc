#include "dtensor/comm/reduce_op.h"

#include "dtensor/comm/process_group.h"  // AllReduceAlgo
#include "dtensor/core/error.h"

namespace dt {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::prod: return "prod";
  }
  return "?";
}

ReduceOp parse_reduce_op(std::string_view s) {
  if (s == "sum") return ReduceOp::sum;
  if (s == "avg") return ReduceOp::avg;
  if (s == "max") return ReduceOp::max;
  if (s == "min") return ReduceOp::min;
  if (s == "prod") return ReduceOp::prod;
  DT_THROW(ValueError) << "unknown reduce op '" << s << "' (expected sum, avg, max, min or prod)";
}

}  // namespace dt

namespace dt {

std::string_view all_reduce_algo_name(AllReduceAlgo algo) {
  switch (algo) {
    case AllReduceAlgo::automatic: return "auto";
    case AllReduceAlgo::one_shot: return "one_shot";
    case AllReduceAlgo::two_shot: return "two_shot";
  }
  return "?";
}

AllReduceAlgo parse_all_reduce_algo(std::string_view s) {
  if (s == "auto") return AllReduceAlgo::automatic;
  if (s == "one_shot") return AllReduceAlgo::one_shot;
  if (s == "two_shot") return AllReduceAlgo::two_shot;
  DT_THROW(ValueError) << "unknown all_reduce algo '" << s << "' (expected auto, one_shot or two_shot)";
}

}  // namespace dt
