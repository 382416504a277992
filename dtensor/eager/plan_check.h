// Differential checks of redistribution: do the ranks' local tensors form the expected global
// tensor? Used by the executor tests and `dtensor plan --verify`.
#pragma once

#include <string>
#include <vector>

#include "dtensor/core/tensor.h"
#include "dtensor/layout/dtensor_spec.h"
#include "dtensor/redistribute/redistribute_plan.h"

namespace dt {

// Returns the global value (as doubles, row-major) that locals indexed by global rank laid out as
// `spec` stand for: the mesh dims are combined from the last to the first, a shard dim joining
// its members' pieces, a replicate dim taking index 0, a partial dim reducing its members with its
// op (the fixed order of mixed partials, dtensor_spec.h). The locals must have their shapes.
std::vector<double> reduce_locals(const DTensorSpec& spec, const std::vector<Tensor>& locals);

// Returns "" when the locals (indexed by global rank) laid out as `spec` form `full`: every
// shard equals its chunk of `full`; ranks that differ only in Replicate coordinates hold equal
// tensors; for Partial placements, reduce_locals equals `full` (within rtol). Otherwise returns a
// message naming the first mismatch.
std::string check_locals(const DTensorSpec& spec, const std::vector<Tensor>& locals, const Tensor& full,
                         double rtol = 1e-6);

// Returns `shape` filled with seeded integers in [-50, 50] cast to dtype (exact in every dtype, so
// sums and maxima are exact and results compare bitwise).
Tensor exact_random(const Shape& shape, DType dtype, uint64_t seed);

// Runs `plan` on the threads backend (one thread per rank of the default mesh of its shape)
// starting from distribute_tensor of seeded random data, and returns check_locals of the result.
std::string verify_plan(const RedistributePlan& plan, uint64_t seed);

}  // namespace dt
