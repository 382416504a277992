#include "dtensor/ir/grad_rule.h"

#include "dtensor/core/error.h"

namespace dt::ir {

Value* GradContext::grad_or_zeros(int i) {
  Value* g = grad(i);
  return g ? g : full(result(i)->type, 0.0);
}

void GradContext::set(int i, Value* g) {
  DT_CHECK(i >= 0 && i < num_operands()) << op_name(node_.op) << " gradient rule set operand " << i;
  if (!g || !wants(i)) return;
  DT_CHECK(g->type == operand(i)->type) << "the gradient rule of " << op_name(node_.op) << " gave operand " << i
                                        << " a gradient of type " << type_str(g->type) << ", the operand is "
                                        << type_str(operand(i)->type);
  operand_grads_[size_t(i)] = g;
}

Value* GradContext::sum_to(Value* g, const Shape& shape) {
  const Shape& from = g->type.shape;
  if (from == shape) return g;
  // Leading dims broadcasting added, then dims stretched from 1.
  const int64_t lead = int64_t(from.size()) - int64_t(shape.size());
  DT_CHECK(lead >= 0) << "sum_to " << shape_str(shape) << " from " << shape_str(from);
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < int64_t(from.size()); ++d)
    if (d < lead || (shape[size_t(d - lead)] == 1 && from[size_t(d)] != 1)) dims.push_back(d);
  Value* s = dims.empty() ? g : b_.sum(g, dims, /*keepdim=*/true);
  return s->type.shape == shape ? s : b_.reshape(s, shape);
}

Value* GradContext::expand_to(Value* g, const Shape& shape) {
  if (g->type.shape == shape) return g;
  return b_.record(OpKind::expand, {g}, {{"shape", std::vector<int64_t>(shape.begin(), shape.end())}})[0];
}

Value* GradContext::full(const TensorType& type, double value) {
  return b_.record(OpKind::full, {},
                   {{"shape", std::vector<int64_t>(type.shape.begin(), type.shape.end())},
                    {"value", value},
                    {"dtype", type.dtype}})[0];
}

Value* GradContext::scale(Value* g, double factor) {
  if (factor == 1.0) return g;
  return b_.mul(g, full({g->type.dtype, {}}, factor));
}

}  // namespace dt::ir
