#include "dtensor/autodiff/autodiff.h"

#include "dtensor/core/error.h"
#include "dtensor/ir/grad_rule.h"

namespace dt::autodiff {

using ir::Graph;
using ir::Node;
using ir::Value;

ir::Value* find_loss(const Graph& g) {
  const auto& outs = g.outputs();
  if (outs.empty()) DT_THROW(ValueError) << "model " << g.name() << " has no outputs: training needs a scalar loss output";
  Value* loss = nullptr;
  if (outs.size() == 1) loss = outs[0];
  for (Value* v : outs)
    if (v->name == "loss") loss = v;
  if (!loss)
    DT_THROW(ValueError) << "model " << g.name() << " has " << outs.size()
                         << " outputs and none is named `loss`: name the loss output `loss`";
  if (loss->type.rank() != 0 || !is_floating(loss->type.dtype))
    DT_THROW(ValueError) << "the loss " << loss->name << " of model " << g.name() << " must be a floating scalar, got "
                         << ir::type_str(loss->type);
  return loss;
}

std::vector<Value*> append_gradients(Graph& g, Value* loss, const std::vector<Value*>& wrt,
                                     std::vector<std::pair<Value*, Value*>>* pairs) {
  if (loss->type.rank() != 0 || !is_floating(loss->type.dtype))
    DT_THROW(ValueError) << "autodiff needs a floating scalar loss, got " << loss->name << " "
                         << ir::type_str(loss->type);
  const std::vector<Node*> forward = g.nodes();  // the backward appends; walk only the forward
  const size_t nv = g.num_values();
  // depends[v]: v depends on a wanted value; reaches[v]: the loss depends on v.
  std::vector<bool> depends(nv, false), reaches(nv, false);
  for (Value* v : wrt) depends[size_t(v->id)] = true;
  for (Node* n : forward) {
    bool any = false;
    for (Value* o : n->operands) any = any || depends[size_t(o->id)];
    if (any)
      for (Value* r : n->results) depends[size_t(r->id)] = true;
  }
  reaches[size_t(loss->id)] = true;
  for (auto it = forward.rbegin(); it != forward.rend(); ++it) {
    bool any = false;
    for (Value* r : (*it)->results) any = any || reaches[size_t(r->id)];
    if (any)
      for (Value* o : (*it)->operands) reaches[size_t(o->id)] = true;
  }
  auto wanted = [&](const Value* v) { return size_t(v->id) < nv && depends[size_t(v->id)] && reaches[size_t(v->id)]; };

  ir::Builder b(g);
  std::vector<Value*> grads(nv, nullptr);
  grads[size_t(loss->id)] = b.record(ir::OpKind::full, {},
                                     {{"shape", std::vector<int64_t>{}}, {"value", 1.0}, {"dtype", loss->type.dtype}})[0];
  for (auto it = forward.rbegin(); it != forward.rend(); ++it) {
    const Node& n = **it;
    std::vector<Value*> result_grads;
    bool any_grad = false;
    for (Value* r : n.results) {
      result_grads.push_back(grads[size_t(r->id)]);
      any_grad = any_grad || result_grads.back();
    }
    std::vector<bool> wants;
    bool any_want = false;
    for (Value* o : n.operands) {
      wants.push_back(wanted(o));
      any_want = any_want || wants.back();
    }
    if (!any_grad || !any_want) continue;
    if (pairs)
      for (size_t r = 0; r < n.results.size(); ++r)
        if (result_grads[r]) pairs->emplace_back(n.results[r], result_grads[r]);
    const ir::OpDef& def = ir::op_def(n.op);
    if (!def.grad)
      DT_THROW(ValueError) << "op " << def.name() << " has no gradient rule, but the gradient of the loss "
                           << loss->name << " must flow through it (node " << n.result()->name
                           << (n.loc.line ? " at line " + std::to_string(n.loc.line) : std::string()) << ")";
    ir::GradContext ctx(b, n, std::move(result_grads), std::move(wants));
    def.grad(ctx);
    for (size_t i = 0; i < n.operands.size(); ++i) {
      Value* gi = ctx.operand_grads()[i];
      if (!gi) continue;
      Value*& acc = grads[size_t(n.operands[i]->id)];
      acc = acc ? b.add(acc, gi) : gi;
    }
  }
  std::vector<Value*> out;
  for (Value* v : wrt) {
    Value* gv = grads[size_t(v->id)];
    if (gv) {
      // A gradient that is another value itself (the loss's seed when wrt holds the loss, or a
      // view) gets its own node so the name belongs to it alone.
      if (gv->kind != ir::ValueKind::result || gv->name.rfind("grad.", 0) == 0) gv = b.reshape(gv, gv->type.shape);
      g.rename(gv, "grad." + v->name);
      if (pairs) pairs->emplace_back(v, gv);
    }
    out.push_back(gv);
  }
  return out;
}

}  // namespace dt::autodiff
