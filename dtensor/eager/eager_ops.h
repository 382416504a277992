// Eager ops on DTensors: each call runs the op's sharding rule through the same propagation as
// the compiler (one-node graph), redistributes the inputs to the cheapest strategy's placements
// (DTensor::redistribute: planner + executor), runs the op's kernel on the local shards and wraps
// the result with the placements the rule gives (S from pass-through factors, P(sum) from a
// sharded reduction: a colwise linear returns S(-1), a rowwise one P(sum)). Collective over the
// mesh: every rank calls with the same arguments.
#pragma once

#include <vector>

#include "dtensor/eager/dtensor.h"
#include "dtensor/ir/builder.h"

namespace dt::eager {

// Runs any registry op on DTensors (attributes by name, defaults filled).
std::vector<DTensor> dispatch(ir::OpKind op, const std::vector<DTensor>& operands, const ir::NamedAttrs& attrs = {});

DTensor linear(const DTensor& x, const DTensor& weight);
DTensor linear(const DTensor& x, const DTensor& weight, const DTensor& bias);
DTensor matmul(const DTensor& a, const DTensor& b);
DTensor add(const DTensor& a, const DTensor& b);
DTensor mul(const DTensor& a, const DTensor& b);
DTensor relu(const DTensor& x);
DTensor gelu(const DTensor& x, const std::string& approximate = "none");
DTensor softmax(const DTensor& x, int64_t dim);
DTensor layer_norm(const DTensor& x, const Shape& normalized_shape, const DTensor& weight, const DTensor& bias,
                   double eps = 1e-5);
DTensor sum(const DTensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);

}  // namespace dt::eager
