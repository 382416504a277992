#include "dtensor/comm/reduce_op.h"

#include "dtensor/comm/process_group.h"  // AllReduceAlgo
#include "dtensor/core/enum_names.h"

namespace dt {
namespace {

constexpr EnumName<ReduceOp> kReduceOps[] = {{ReduceOp::sum, "sum"},
                                             {ReduceOp::avg, "avg"},
                                             {ReduceOp::max, "max"},
                                             {ReduceOp::min, "min"},
                                             {ReduceOp::prod, "prod"}};

constexpr EnumName<AllReduceAlgo> kAllReduceAlgos[] = {
    {AllReduceAlgo::automatic, "auto"}, {AllReduceAlgo::one_shot, "one_shot"}, {AllReduceAlgo::two_shot, "two_shot"}};

}  // namespace

std::string_view reduce_op_name(ReduceOp op) { return enum_name(kReduceOps, op); }
ReduceOp parse_reduce_op(std::string_view s) { return parse_enum(kReduceOps, s, "reduce op"); }

std::string_view all_reduce_algo_name(AllReduceAlgo algo) { return enum_name(kAllReduceAlgos, algo); }
AllReduceAlgo parse_all_reduce_algo(std::string_view s) { return parse_enum(kAllReduceAlgos, s, "all_reduce algo"); }

}  // namespace dt
