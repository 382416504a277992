// The reductions a collective or a Partial placement applies, as PyTorch names them. Its own
// header so that layout/ and ir/ can name a reduction without seeing the ProcessGroup interface.
#pragma once

#include <cstdint>
#include <string_view>

namespace dt {

// prod (PyTorch's Partial("prod") / ReduceOp.PRODUCT) multiplies; bool's prod is logical and.
enum class ReduceOp : uint8_t { sum, avg, max, min, prod };
inline constexpr int kNumReduceOps = 5;
std::string_view reduce_op_name(ReduceOp op);
ReduceOp parse_reduce_op(std::string_view text);  // "sum" | "avg" | "max" | "min" | "prod"

}  // namespace dt
