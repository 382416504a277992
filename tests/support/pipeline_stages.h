// One pipeline stage's program as IR, from its schedule (dtensor/pipeline/schedule.h): what the
// deadlock proof's tests, the killed-rank test under mpirun and `dtensor bench pipeline` run.
//
// Micro-batch k enters stage 0 as input mb<k> ([rows, width]); every stage's forward is
// in @ w (its input w, [width, width]) and its backward g @ w, plus the weight gradient in^T @ g
// accumulated over micro-batches when `weight_gradient` (so a forward's input stays live until its
// backward: the activation memory a schedule holds); the last stage's backward starts from its
// forward's result. Activations go to stage s+1 and gradients to s-1 over link groups (link k joins
// stages k and k+1, its rank list from `link_ranks`), posted and waited in the schedule's order.
// With virtual_stages v > 1 the rank runs stages s, s+p, ... of p*v, each the same matmul.
// With `dp_group` set, the weight gradient of every backward is all_reduced on that group too (a
// data-parallel dimension beside the pipeline). Stage 0 returns its backwards' results in
// micro-batch order, the others their weight gradient (or w).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "dtensor/ir/graph.h"
#include "dtensor/pipeline/schedule.h"

namespace dt::test_support {

struct PipelineStageOptions {
  pipeline::Schedule schedule = pipeline::Schedule::gpipe;
  int stages = 2, stage = 0, microbatches = 1;
  int virtual_stages = 1;  // interleaved-1f1b: stages stage, stage + p, ... on this rank
  int64_t rows = 4, width = 4;
  bool weight_gradient = false;
  // Link k's global ranks (stage k's first): default {k mod p, (k + 1) mod p}.
  std::function<std::vector<int>(int link)> link_ranks;
  std::string dp_group;  // "" for none
  std::vector<int> dp_ranks;
};

// Returns the stage's program (file comment).
ir::Graph pipeline_stage_graph(const PipelineStageOptions& options);

// Returns the message tag of a pipeline message: 2k for micro-batch k's activation, 2k + 1 for
// its gradient.
int64_t pipeline_tag(const pipeline::Message& message);

}  // namespace dt::test_support
