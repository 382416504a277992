#include "dtensor/redistribute/backward.h"

#include "dtensor/core/error.h"

namespace dt {

Placements gradient_placements(const Placements& src, const Placements& grad) {
  if (src.size() != grad.size())
    DT_THROW(ValueError) << "gradient placements " << placements_str(grad) << " and input placements "
                         << placements_str(src) << " differ in length";
  Placements out = src;
  for (size_t m = 0; m < src.size(); ++m)
    if (src[m].is_partial() && !grad[m].is_partial()) out[m] = Placement::replicate();
  return out;
}

std::shared_ptr<const RedistributePlan> plan_backward(RedistributePlanner& planner, const Shape& mesh_shape,
                                                      const Placements& src, const Placements& grad,
                                                      const Shape& shape, DType dtype) {
  return planner.plan(mesh_shape, grad, gradient_placements(src, grad), shape, dtype);
}

}  // namespace dt
