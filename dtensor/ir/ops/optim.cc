// Optimizer ops: one parameter's update, in place (OpDef::in_place): every result is written into
// the buffer of its operand (param, momentum_buffer; param, exp_avg, exp_avg_sq, step), so a rank
// never holds a parameter or its state twice. The results name the new values (the training
// loop rebinds them, which is the same buffer); nothing reads the old operands after the update
// (passes keep every reader of them before it: GraphEdit's in-place ordering). The interpreter
// writes into bound parameters only when the caller hands them over
// (Interpreter::set_update_params_in_place, as the training loop does); else it updates a copy.
// Formulas in kernels/ops_grad.h.
//
//   sgd_update(param, grad, momentum_buffer?) {lr, momentum, weight_decay} -> (param, momentum_buffer?)
//   adamw_update(param, grad, exp_avg, exp_avg_sq, step) {lr, beta1, beta2, eps, weight_decay}
//       -> (param, exp_avg, exp_avg_sq, step + 1)       (step: a scalar f32 of steps taken)
//
// Elementwise in every operand but the scalar step, so the sharding rule shards state like its
// parameter.
#include "dtensor/kernels/ops_grad.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {
namespace {

void require_param_like(const Node& node, size_t first, size_t last) {
  const TensorType& p = node.operands[0]->type;
  infer_util::require_floating(node, 0);
  for (size_t i = first; i <= last && i < node.operands.size(); ++i)
    if (node.operands[i]->type != p)
      DT_THROW(ShapeError) << op_name(node.op) << " " << op_def(node.op).operands[i].name << " "
                           << type_str(node.operands[i]->type) << " does not match param " << type_str(p);
}

void infer_sgd(const Node& node, const Graph&, std::vector<TensorType>& out) {
  require_param_like(node, 1, 2);
  if (node.attr_float("momentum") != 0 && node.operands.size() < 3)
    DT_THROW(ValueError) << "sgd_update with momentum " << node.attr_float("momentum") << " needs a momentum_buffer";
  out.push_back(node.operands[0]->type);
  if (node.operands.size() == 3) out.push_back(node.operands[0]->type);  // the new momentum_buffer
}
void run_sgd(const KernelArgs& a) {
  const Node& n = a.node;
  dt::sgd_update_(a.in[0], a.in[1], a.in.size() > 2 ? a.in[2] : Tensor(), n.attr_float("lr"), n.attr_float("momentum"),
                  n.attr_float("weight_decay"));
  a.out[0] = a.in[0];
  if (a.out.size() > 1) a.out[1] = a.in[2];  // unchanged when momentum is 0
}

void infer_adamw(const Node& node, const Graph&, std::vector<TensorType>& out) {
  require_param_like(node, 1, 3);
  const TensorType& step = node.operands[4]->type;
  if (step.rank() != 0 || step.dtype != DType::f32)
    DT_THROW(ShapeError) << "adamw_update step must be a scalar f32, got " << type_str(step);
  for (int i = 0; i < 3; ++i) out.push_back(node.operands[0]->type);
  out.push_back(step);
}
void run_adamw(const KernelArgs& a) {
  const Node& n = a.node;
  const double step = a.in[4].item();
  dt::adamw_update_(a.in[0], a.in[1], a.in[2], a.in[3], step, n.attr_float("lr"), n.attr_float("beta1"),
                    n.attr_float("beta2"), n.attr_float("eps"), n.attr_float("weight_decay"));
  *static_cast<float*>(a.in[4].raw_data()) = float(step + 1);  // a scalar f32 (infer_adamw)
  for (size_t k = 0; k < 4; ++k) a.out[k] = a.in[k == 0 ? 0 : k + 1];
}

}  // namespace

void register_optim_ops(OpTable& t) {
  t.add({.kind = OpKind::sgd_update, .operands = {{"param"}, {"grad"}, {"momentum_buffer", true}},
         .attrs = {{"lr", AttrKind::f64, std::nullopt},
                   {"momentum", AttrKind::f64, Attr(0.0)},
                   {"weight_decay", AttrKind::f64, Attr(0.0)}},
         .infer = infer_sgd, .kernel = run_sgd});
  t.add({.kind = OpKind::adamw_update,
         .operands = {{"param"}, {"grad"}, {"exp_avg"}, {"exp_avg_sq"}, {"step"}},
         .attrs = {{"lr", AttrKind::f64, std::nullopt},
                   {"beta1", AttrKind::f64, Attr(0.9)},
                   {"beta2", AttrKind::f64, Attr(0.999)},
                   {"eps", AttrKind::f64, Attr(1e-8)},
                   {"weight_decay", AttrKind::f64, Attr(0.01)}},
         .infer = infer_adamw, .kernel = run_adamw});
  // Results are their operands' buffers (not fresh): written in place.
  for (OpKind k : {OpKind::sgd_update, OpKind::adamw_update}) {
    t.at(k).in_place = true;
    t.at(k).reads_stored = true;
    t.at(k).optimizer_update = true;
  }
  t.at(OpKind::sgd_update).in_place_operands = {0, 2};
  t.at(OpKind::adamw_update).in_place_operands = {0, 2, 3, 4};
  t.set_sharding_rules(optim_sharding_rules());
}

}  // namespace dt::ir
