// The backward rule of a redistribution (seeds/001): the gradient of redistribute(src -> dst)
// is the gradient redistributed from its own placements back to src, except that a Partial in
// src becomes Replicate where the gradient is not partial. Turning a gradient back into a
// partial sum would only cost a reduction later.
#pragma once

#include <memory>

#include "dtensor/redistribute/planner.h"

namespace dt {

// Returns the placements the gradient is redistributed to: src[m], or R where src[m] is partial
// and grad[m] is not. Throws ValueError when the counts differ.
Placements gradient_placements(const Placements& src, const Placements& grad);

// Returns the plan that moves a gradient laid out as `grad` (usually the forward target) back
// for a forward redistribution from `src`.
std::shared_ptr<const RedistributePlan> plan_backward(RedistributePlanner& planner, const Shape& mesh_shape,
                                                      const Placements& src, const Placements& grad,
                                                      const Shape& shape, DType dtype);

}  // namespace dt
