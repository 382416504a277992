#include "dtensor/eager/eager_ops.h"

#include "dtensor/core/error.h"
#include "dtensor/sharding/partitioner.h"
#include "dtensor/sharding/propagation.h"

namespace dt::eager {
namespace {

// Runs a one-node program without collectives on local tensors.
std::vector<Tensor> run_local(const ir::Graph& program, const std::vector<Tensor>& locals) {
  std::vector<Tensor> results;
  const ir::Node& n = *program.nodes().back();
  std::vector<Tensor> in;
  for (const ir::Value* v : n.operands) in.push_back(locals[size_t(v->id)]);
  results.resize(n.results.size());
  ir::op_def(n.op).kernel(ir::KernelArgs{n, in, results, nullptr});
  return results;
}

}  // namespace

std::vector<DTensor> dispatch(ir::OpKind op, const std::vector<DTensor>& operands, const ir::NamedAttrs& attrs) {
  if (operands.empty()) DT_THROW(ValueError) << ir::op_name(op) << " on DTensors needs at least one operand";
  const auto& groups = operands[0].groups();
  const DeviceMesh& mesh = groups->mesh();
  for (const DTensor& d : operands)
    if (d.spec().mesh() != mesh)
      DT_THROW(ValueError) << ir::op_name(op) << " operands live on meshes " << mesh.str() << " and "
                           << d.spec().mesh().str();
  ir::Graph g(std::string(ir::op_name(op)));
  ir::Builder b(g);
  std::vector<ir::Value*> ins;
  for (size_t i = 0; i < operands.size(); ++i)
    ins.push_back(b.input("in" + std::to_string(i), operands[i].dtype(), operands[i].shape()));
  std::vector<ir::Value*> outs = b.record(op, ins, attrs);
  b.outputs(outs);

  sharding::ResolvedPlan plan;
  for (int64_t m = 0; m < mesh.ndim(); ++m) plan.mesh_dim_names.push_back("mesh" + std::to_string(m));
  plan.value_placements.assign(g.num_values(), {});
  plan.stored_only.assign(g.num_values(), 0);
  plan.defer_reductions = false;  // PyTorch's result placements
  for (size_t i = 0; i < ins.size(); ++i) plan.value_placements[size_t(ins[i]->id)] = operands[i].placements();
  sharding::Sharding s = sharding::propagate(g, mesh, plan);
  // Redistribute eagerly, then partition with the inputs already where the node needs them.
  std::vector<Tensor> locals(g.num_values());
  for (size_t i = 0; i < ins.size(); ++i) {
    const Placements& need = s.nodes[0].operands[i];
    locals[size_t(ins[i]->id)] = operands[i].redistribute(need).to_local();
    s.values[size_t(ins[i]->id)] = need;
  }
  for (size_t k = 0; k < outs.size(); ++k) s.outputs[k] = s.values[size_t(outs[k]->id)];
  ir::Graph program = sharding::partition(g, s, groups->global_rank(), default_planner(), {.verify = false});
  std::vector<Tensor> results = run_local(program, locals);
  std::vector<DTensor> out;
  for (size_t k = 0; k < outs.size(); ++k) {
    auto spec = std::make_shared<const DTensorSpec>(mesh, s.values[size_t(outs[k]->id)], outs[k]->type.shape,
                                                    outs[k]->type.dtype);
    out.emplace_back(results[k], spec, groups);
  }
  return out;
}

DTensor linear(const DTensor& x, const DTensor& weight) { return dispatch(ir::OpKind::linear, {x, weight})[0]; }
DTensor linear(const DTensor& x, const DTensor& weight, const DTensor& bias) {
  return dispatch(ir::OpKind::linear, {x, weight, bias})[0];
}
DTensor matmul(const DTensor& a, const DTensor& b) { return dispatch(ir::OpKind::matmul, {a, b})[0]; }
DTensor add(const DTensor& a, const DTensor& b) { return dispatch(ir::OpKind::add, {a, b})[0]; }
DTensor mul(const DTensor& a, const DTensor& b) { return dispatch(ir::OpKind::mul, {a, b})[0]; }
DTensor relu(const DTensor& x) { return dispatch(ir::OpKind::relu, {x})[0]; }
DTensor gelu(const DTensor& x, const std::string& approximate) {
  return dispatch(ir::OpKind::gelu, {x}, {{"approximate", approximate}})[0];
}
DTensor softmax(const DTensor& x, int64_t dim) { return dispatch(ir::OpKind::softmax, {x}, {{"dim", dim}})[0]; }
DTensor layer_norm(const DTensor& x, const Shape& normalized_shape, const DTensor& weight, const DTensor& bias,
                   double eps) {
  return dispatch(ir::OpKind::layer_norm, {x, weight, bias}, {{"normalized_shape", normalized_shape}, {"eps", eps}})[0];
}
DTensor sum(const DTensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return dispatch(ir::OpKind::sum, {x}, {{"dims", dims}, {"keepdim", keepdim}})[0];
}

}  // namespace dt::eager
