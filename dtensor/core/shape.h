// Shapes, strides and dim arithmetic shared by every stage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/core/small_vector.h"

namespace dt {

// Sizes and strides keep up to 6 dims inline (no heap allocation): every tensor and every IR
// value holds one of each, and ranks above 6 are rare (they still work, on the heap).
inline constexpr size_t kInlineDims = 6;
using Shape = SmallVector<int64_t, kInlineDims>;
using Strides = SmallVector<int64_t, kInlineDims>;

// Returns the product of the sizes (1 for a scalar shape, 0 if any size is 0).
int64_t numel(const Shape& shape);
// Returns row-major strides in elements: [2,3,4] -> [12,4,1].
Strides contiguous_strides(const Shape& shape);
// Returns d normalised into [0, rank); throws DimError "dim 3 out of range for tensor of rank 2".
int64_t normalize_dim(int64_t d, int64_t rank);
// Returns the broadcast of two shapes (numpy rules); throws ShapeError with both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b);
// Returns "[2, 3, 4]".
std::string shape_str(const Shape& shape);

// torch.chunk arithmetic: a dim of size `size` over `n` ranks uses chunk c = ceil(size / n);
// index i holds [i*c, min((i+1)*c, size)), which can be short or empty.
// Example: size 10, n 4 -> c 3 -> chunks of 3, 3, 3, 1. size 2, n 4 -> 1, 1, 0, 0.
int64_t chunk_size(int64_t size, int64_t n);
int64_t chunk_offset(int64_t size, int64_t n, int64_t index);
int64_t chunk_length(int64_t size, int64_t n, int64_t index);

}  // namespace dt
