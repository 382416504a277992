#include "tests/support/train_memory.h"

#include <set>

#include "dtensor/core/error.h"

namespace dt::autodiff {

int64_t saved_activation_bytes(const ir::Graph& forward, const OptimizerConfig& opt, Recompute recompute) {
  const size_t nf = forward.nodes().size();
  TrainStep step = make_train_step(forward.clone(), opt, false, recompute);
  std::set<const ir::Node*> fwd(step.graph.nodes().begin(), step.graph.nodes().begin() + ptrdiff_t(nf));
  std::set<const ir::Value*> saved;
  for (size_t i = nf; i < step.graph.nodes().size(); ++i)
    for (const ir::Value* v : step.graph.nodes()[i]->operands)
      if (v->producer && fwd.count(v->producer)) saved.insert(v);
  int64_t b = 0;
  for (const ir::Value* v : saved) b += int64_t(v->type.nbytes());
  return b;
}

FsdpMemoryTerms fsdp_memory_terms(const ir::GptConfig& cfg, const OptimizerConfig& opt) {
  if (cfg.layers < 1) DT_THROW(ValueError) << "the fsdp memory goal needs at least one layer, got " << cfg.layers;
  const ir::Graph g = ir::build_gpt(cfg);
  ir::GptConfig fewer = cfg;
  fewer.layers = cfg.layers - 1;
  FsdpMemoryTerms t;
  const std::string layer = "h." + std::to_string(cfg.layers - 1) + ".";
  for (const ir::Value* p : g.params()) {
    t.params += int64_t(p->type.nbytes());
    if (p->name.rfind(layer, 0) == 0) t.layer_params += int64_t(p->type.nbytes());
  }
  t.grads = t.params;
  const TrainStep step = make_train_step(g.clone(), opt);
  for (const std::string& s : step.state) t.state += int64_t(step.graph.find(s)->type.nbytes());
  t.activations = saved_activation_bytes(g, opt);
  t.layer_activations = t.activations - saved_activation_bytes(ir::build_gpt(fewer), opt);
  return t;
}

}  // namespace dt::autodiff
