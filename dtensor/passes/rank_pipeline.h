// The pass pipeline a distributed run needs, over every rank's program at once: the cross-rank
// consistency check after partitioning and after every pass (rank_consistency.h), then the
// cross-rank comm-buffer plan (buffer_planner.h), so that `dtensor compile`, `dtensor run` on
// threads and under mpirun, and library users all get the same programs.
#pragma once

#include <ostream>
#include <span>
#include <vector>

#include "dtensor/ir/graph.h"
#include "dtensor/passes/pass_manager.h"

namespace dt::passes {

struct RankPipelineOptions {
  bool check_ranks = true;            // prove rank consistency after partitioning and each pass
  std::ostream* print_after = nullptr;  // print every rank's IR after each pass here
};

// Runs `pm`'s passes over programs[i] (global rank ranks[i]) pass by pass. Throws InternalError
// when the programs stop being rank-consistent (naming the pass). When comm buffers were placed
// and the programs' buffers correspond, re-plans them so each buffer has one arena offset on
// every rank (uneven shards make per-rank plans differ); otherwise each keeps its own plan.
void run_rank_pipelines(PassManager& pm, std::vector<ir::Graph>& programs, std::span<const int> ranks,
                        const RankPipelineOptions& options = {});

}  // namespace dt::passes
