#include "dtensor/comm/process_group.h"

namespace dt {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

ReduceOp parse_reduce_op(std::string_view s) {
  if (s == "sum") return ReduceOp::sum;
  if (s == "avg") return ReduceOp::avg;
  if (s == "max") return ReduceOp::max;
  if (s == "min") return ReduceOp::min;
  DT_THROW(ValueError) << "unknown reduce op '" << s << "' (expected sum, avg, max or min)";
}

}  // namespace dt
