// Runs one program per rank on the threads backend: rank r runs programs[r] with bindings[r]
// (its parameter shards and data inputs) on its own thread, with the process groups its program
// declares. Returns every rank's outputs and run statistics; the first failure on any rank is
// rethrown after every rank has stopped (a failed rank makes the others' collectives fail within
// the timeout, so nothing hangs).
#pragma once

#include <functional>
#include <vector>

#include "dtensor/comm/process_group.h"
#include "dtensor/ir/graph.h"
#include "dtensor/runtime/interpreter.h"

namespace dt::runtime {

struct RankResult {
  std::vector<Tensor> outputs;
  RunStats stats;  // of the fastest repetition
};

struct LaunchOptions {
  int repeat = 1;  // runs per rank (the stats keep the fastest)
  CommOptions comm;
  // When set, rank r's interpreter gets node_hook(r) (traces: runtime/trace.h).
  std::function<NodeHook(int rank)> node_hook;
};

// Runs programs[r] on global rank r for r in [0, programs.size()).
std::vector<RankResult> launch(const std::vector<const ir::Graph*>& programs, const std::vector<Bindings>& bindings,
                               const LaunchOptions& options = {});

}  // namespace dt::runtime
