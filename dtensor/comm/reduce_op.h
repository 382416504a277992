// The reductions a collective or a Partial placement applies, as PyTorch names them. Its own
// header so that layout/ and ir/ can name a reduction without seeing the ProcessGroup interface.
#pragma once

#include <cstdint>
#include <string_view>

namespace dt {

enum class ReduceOp : uint8_t { sum, avg, max, min };
std::string_view reduce_op_name(ReduceOp op);
ReduceOp parse_reduce_op(std::string_view text);  // "sum" | "avg" | "max" | "min"

}  // namespace dt
