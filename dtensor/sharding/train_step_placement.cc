#include "dtensor/sharding/train_step_placement.h"

#include "dtensor/core/error.h"

namespace dt::sharding {

void place_like_params(const autodiff::TrainStep& step, ResolvedPlan& plan) {
  const ir::Graph& g = step.graph;
  for (const std::string& name : step.state) {
    const ir::Value* s = g.find(name);
    const ir::Value* p = g.find(name.substr(0, name.rfind('.')));
    DT_CHECK(s && p) << "state " << name << " has no parameter in the step graph";
    if (s->type.shape != p->type.shape) continue;
    for (auto* bits : {&plan.stored_only, &plan.pinned})
      if (bits->size() > size_t(s->id)) (*bits)[size_t(s->id)] = (*bits)[size_t(p->id)];
    plan.value_placements[size_t(s->id)] = plan.value_placements[size_t(p->id)];
  }
  // A gradient shared by several forward values (passed through) keeps the pair nearest the loss.
  plan.gradient_of.assign(g.num_values(), -1);
  for (const auto& [v, gv] : step.gradient_pairs)
    if (plan.gradient_of[size_t(gv)] < 0) plan.gradient_of[size_t(gv)] = int(v);
  for (size_t k = 0; k < step.updates.size(); ++k) {
    const ir::Value* v = g.find(step.updates[k]);
    DT_CHECK(v) << "update target " << step.updates[k] << " missing from the step graph";
    plan.output_placements[k + 1] = plan.value_placements[size_t(v->id)];
  }
}

CompiledModel compile_train_step(const autodiff::TrainStep& step, const ParallelPlan& plan, const DeviceMesh& mesh,
                                 CompileOptions options) {
  options.adjust_plan = [&step](ResolvedPlan& p) { place_like_params(step, p); };
  return compile(step.graph, plan, mesh, options);
}

}  // namespace dt::sharding
