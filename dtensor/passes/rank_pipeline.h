// The pass pipeline a distributed run needs, over a job's per-rank programs at once: the
// cross-rank consistency check after partitioning and after every pass (rank_consistency.h), then
// the cross-rank comm-buffer plan (buffer_planner.h), so that `dtensor compile`, `dtensor run` on
// threads and under mpirun, and library users all get the same programs.
//
// With the job's orbits (ir/program_orbits.h, from sharding::compile with `orbits`), the programs
// given need only be the ranks a caller wants plus one representative per orbit: the check runs
// on the representatives (check_orbit_consistency, and check_p2p_order_by_orbit when they have
// transfers), every other program is checked to be its
// representative's up to renaming, and the comm buffers are planned from the programs given, which
// cover every distinct program of the job. The work is then the programs given, whatever the
// number of ranks: rank r of a 65,536-rank job compiles its own program and the job's few
// representatives. Without orbits, every program given is checked against the others (the
// programs must then be the whole job for the check to prove it).
#pragma once

#include <cstddef>
#include <ostream>
#include <span>
#include <vector>

#include "dtensor/ir/graph.h"
#include "dtensor/ir/program_orbits.h"
#include "dtensor/passes/pass_manager.h"

namespace dt::passes {

struct RankPipelineOptions {
  bool check_ranks = true;            // prove rank consistency after partitioning and each pass
  std::ostream* print_after = nullptr;  // print every rank's IR after each pass here
  // The job's orbits; every representative's program must be among the programs given.
  const ir::RankOrbits* orbits = nullptr;
};

// What run_rank_pipelines looked at (counted, so that a test can bound the work by the mesh size).
struct RankPipelineStats {
  size_t programs_transformed = 0;  // programs the passes ran on
  size_t programs_checked = 0;      // programs the cross-rank check read, at its largest stage
  size_t orbits = 0;                // distinct programs of the job (0: no orbits given)
};

// Runs `pm`'s passes over programs[i] (global rank ranks[i]) pass by pass. Throws InternalError
// when the programs stop being rank-consistent (naming the pass). When comm buffers were placed
// and the programs' buffers correspond, re-plans them so each buffer has one arena offset on
// every rank (uneven shards make per-rank plans differ); otherwise each keeps its own plan.
RankPipelineStats run_rank_pipelines(PassManager& pm, std::vector<ir::Graph>& programs, std::span<const int> ranks,
                                     const RankPipelineOptions& options = {});

}  // namespace dt::passes
