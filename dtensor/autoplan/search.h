// `--plan auto`: the cheapest parallel plan for a model on a mesh under a per-rank memory limit.
//
// Search space. Each mesh dim takes a role: `dp` (the data inputs sharded on their batch dim;
// each module replicated or fsdp) or `tp` (each module replicate, colwise, rowwise, sequence or
// fsdp); a 2-d mesh tries every assignment of roles to its dims. Modules of repeated blocks
// (h.0.attn.q_proj, h.1.attn.q_proj, ... with identical parameter shapes) form one class decided
// once (the plan names it with one glob, h.*.attn.q_proj). Nothing op-specific: a style is legal
// when sharding::resolve_plan accepts it, and every strategy comes from the registered sharding
// rules through sharding::propagate.
//
// Cost (estimate.h): compute from OpDef::flops over the ranks sharing the work + the planner's α–β
// price of every redistribution propagation inserts; memory from the programs the job will run:
// rank 0's and one per orbit, after the job's pass pipeline (bucketing and overlap scheduling
// move all_gathers earlier, reshard-after-forward frees gathered parameters: the memory of a plan
// is what its compiled programs hold, parameters, optimizer state and the activation estimate).
// Under a limit the passes get the limit less the parameters as their memory budget (unless the
// caller set one), so they never prefetch past it; SearchResult::pass_options is what the job
// must run them with for its programs to be the ones estimated. A candidate that makes
// propagation fall back (an op with no strategy) is rejected.
//
// Method, per role assignment (SearchResult::method, the weakest one used):
// - exact: at most SearchOptions::exact_max_states plans (the mlp, a model of few module
//   classes): every plan is costed.
// - chain-dp: otherwise, for a forward program, a dynamic program over the chain of modules in
//   the order the nodes read their parameters (chain_dp.h). Each module's segment of nodes is
//   priced given the placements of the values crossing the cut before it (the state: e.g. the
//   residual stream between two transformer blocks, plus q and k inside attention), every style
//   combination of the module on the mesh dims is tried from every state reached, and the
//   cheapest path to each state is kept: the exact optimum of the step time under the cost model
//   over plans where every module decides alone (the modules of a class may then differ: the plan
//   names them one by one where they do), so never worse than the exact search over classes. Used
//   when (states reached x choices) x nodes stays under SearchOptions::chain_max_work, and when
//   its plan is within the memory limit (the time optimum is then the constrained optimum too);
//   otherwise descent. A training step is no chain (its backward follows the whole forward).
// - descent: coordinate descent over (module class, mesh dim): every style of the role is tried
//   in a fixed order and kept when it lowers (memory excess over the limit, then step time);
//   sweeps repeat until none improves (at most kMaxSweeps). A local search, not exact:
//   SearchResult::lower_bound_us is a certified lower bound of any plan's step time (all FLOPs
//   split over every rank, no communication) to judge it by.
// The best role assignment wins; ties keep the earlier candidate, so the same input gives the
// same plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/autodiff/train_step.h"
#include "dtensor/autoplan/estimate.h"
#include "dtensor/ir/graph.h"
#include "dtensor/layout/device_mesh.h"
#include "dtensor/passes/pass.h"
#include "dtensor/sharding/parallel_plan.h"

namespace dt::autoplan {

struct SearchOptions {
  bool train = false;                   // search for the training step of the model
  autodiff::OptimizerConfig optimizer;  // its optimizer (the state it adds counts as memory)
  int64_t max_memory_per_rank = 0;      // bytes; 0: no limit
  MachineModel machine;
  // The pass pipeline the job runs (job::PassSettings' pipeline and options): under a memory limit
  // each candidate's programs go through it before their memory is estimated.
  std::string pipeline = "default";
  passes::PassOptions pass_options;
  // A role assignment with at most this many plans (styles per (module class, mesh dim),
  // multiplied) is solved exactly by costing every one; larger ones by coordinate descent.
  int64_t exact_max_states = 4096;
  // The chain DP's budget in node visits (evaluations x graph nodes; one evaluation propagates
  // the whole graph, ~2 us a node here): a chain projected past it (chain_dp.h) is left to
  // descent. The default keeps the 2-layer example gpt in the DP on meshes 2, 3 and 4 (~0.5-0.9 s),
  // gives up on its 2x2 mesh and on 4 layers after a few steps, and the 32-layer
  // Llama-3-8B-shaped one (bench plan-search) out of it without preparing it.
  int64_t chain_max_work = 1000000;
  // auto (the order above) or one method forced: exact (every plan, whatever their number),
  // chain-dp (descent where it does not apply), descent. Tests compare the methods with it.
  std::string method = "auto";
  // Modules of repeated blocks form one class (the default); false: every module its own class
  // (exact search then costs every per-module plan).
  bool group_blocks = true;
  // The styles each role tries, in order (empty: the defaults, replicate first; a list must start
  // with replicate, the starting point of the search).
  std::vector<sharding::Style> tp_styles, dp_styles;
};

// One (module class, mesh dim) decision and what the alternatives would have cost.
struct Alternative {
  std::string style;
  double step_us = 0;
  int64_t peak_bytes = -1;  // -1: not estimated (no memory limit)
  std::string rejected;      // why it cannot be used ("" when usable)
  std::string method;        // role assignments: how their plan was found (exact | chain-dp | descent)
};
struct ModuleDecision {
  std::string pattern, mesh_dim, chosen;
  std::vector<Alternative> alternatives;  // in the order tried, from the final plan's neighbourhood
};

struct SearchResult {
  sharding::ParallelPlan plan;
  Estimate estimate;
  std::vector<std::string> roles;  // per mesh dim: dp | tp
  std::vector<ModuleDecision> decisions;
  // Other role assignments tried, with their best step time ("" rejected when feasible).
  std::vector<std::pair<std::string, Alternative>> role_alternatives;
  double lower_bound_us = 0;
  // Every role assignment was solved exactly (every plan of the search space costed): the plan is
  // the optimum under the cost model. Otherwise lower_bound_us is what to judge it by.
  bool exact = true;
  std::string method = "exact";  // exact | chain-dp | descent: the weakest used over the role assignments
  int evaluated = 0;  // candidate plans costed
  // The pass options the plan's memory was estimated under: SearchOptions::pass_options with, under
  // a limit and no budget of the caller's, memory_budget_bytes = the limit less the plan's
  // per-rank parameters. A job compiled with them has the estimated peak (its report's
  // estimated_peak_bytes), which is then within the limit.
  passes::PassOptions pass_options;
};

// Searches. Throws ValueError when no plan fits max_memory_per_rank, naming the smallest per-rank
// memory found.
SearchResult search(const ir::Graph& forward, const DeviceMesh& mesh, const SearchOptions& options);
// With the default options (one static object in search.cc: a default-argument temporary made GCC
// 12 warn, falsely, that PassOptions' vector may be used uninitialized in every caller).
SearchResult search(const ir::Graph& forward, const DeviceMesh& mesh);

// A human-readable account: the plan's estimate, each decision with its alternatives.
std::string explain(const SearchResult& result);
// The same as JSON text (plan, estimate, decisions).
std::string to_json(const SearchResult& result);

}  // namespace dt::autoplan
