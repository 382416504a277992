// Test helper: compiles a graph with a plan on a mesh, shards weights and inputs, runs every
// rank's program on the threads backend, and assembles each output into its global tensor.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "dtensor/passes/rank_pipeline.h"
#include "dtensor/runtime/launcher.h"
#include "dtensor/sharding/compiler.h"
#include "dtensor/sharding/tensor_sharding.h"

namespace dt::sharding::testing {

struct ShardedRun {
  CompiledModel compiled;
  std::vector<Tensor> outputs;  // global tensors
};

// `passes`: a pipeline ("default", "none", "a,b"): run over all ranks' programs with the
// cross-rank consistency check (passes/rank_pipeline.h).
inline ShardedRun run_sharded(const ir::Graph& graph, const ParallelPlan& plan, const DeviceMesh& mesh,
                              const TensorMap& weights, const TensorMap& inputs, const std::string& passes = "none") {
  ShardedRun run;
  run.compiled = compile(graph, plan, mesh);
  {
    passes::PassManager pm;
    pm.add(passes::parse_pipeline(passes));
    passes::run_rank_pipelines(pm, run.compiled.programs, run.compiled.ranks);
  }
  std::vector<const ir::Graph*> programs;
  std::vector<runtime::Bindings> bindings;
  for (size_t i = 0; i < run.compiled.ranks.size(); ++i) {
    const int r = run.compiled.ranks[i];
    programs.push_back(&run.compiled.programs[i]);
    runtime::Bindings b = shard_weights(graph, run.compiled.sharding, weights, r);
    for (auto& [k, v] : shard_inputs(graph, run.compiled.sharding, inputs, r)) b[k] = v;
    bindings.push_back(std::move(b));
  }
  std::vector<runtime::RankResult> results = runtime::launch(programs, bindings);
  for (size_t k = 0; k < graph.outputs().size(); ++k) {
    std::vector<Tensor> locals;
    for (auto& r : results) locals.push_back(r.outputs[k]);
    run.outputs.push_back(assemble_tensor(locals, mesh, run.compiled.sharding.outputs[k], graph.outputs()[k]->type.shape));
  }
  return run;
}

// Returns the outputs of the single-device run.
inline std::vector<Tensor> run_single(const ir::Graph& graph, const TensorMap& weights, const TensorMap& inputs) {
  runtime::Bindings b;
  for (const ir::Value* p : graph.params()) b[p->name] = weights.at(p->name);
  for (const ir::Value* v : graph.inputs()) b[v->name] = inputs.at(v->name);
  return runtime::launch({&graph}, {b})[0].outputs;
}

// Returns the number of nodes of `op` in a program.
inline int count_ops(const ir::Graph& g, ir::OpKind op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op == op;
  return n;
}

}  // namespace dt::sharding::testing
