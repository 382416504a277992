// The compile report of a job: every rank program's inserted collectives, bytes sent, parameter
// memory and activation estimate, and the model's unsharded numbers. `dtensor compile --report
// --json` prints it and the Python module's CompiledModel.report() returns it.
#pragma once

#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "dtensor/ir/graph.h"
#include "dtensor/job/job.h"
#include "dtensor/sharding/compiler.h"

namespace dt::job {

// Returns the report of the programs in `compiled`, partitioned from `model`: `ranks`, every rank
// of the job (each reported from its orbit's program) when it has at most 4096 ranks, else the
// orbits' representatives with `ranks_running`; `orbits`, one entry per distinct program.
nlohmann::json report_json(const sharding::CompiledModel& compiled, const ir::Graph& model);
// Returns one rank's entry of the report: its collectives, bytes sent, parameter memory and
// activation estimate, from its program `p`.
nlohmann::json program_json(const ir::Graph& p, int rank);
inline nlohmann::json report_json(const Job& job) { return report_json(job.compiled(), job.graph()); }

// Returns the report of a pipeline (train_pipeline.h) cut by `plan`: its stage count, micro-batches
// and schedule, its orbits (distinct rank programs) and the stage programs compile partitioned,
// and per stage its ranks as inclusive [first, last] ranges of consecutive ranks (a stage of 4,096
// ranks on pp dim 0 is [[0, 4095]]) and rank_count, its layers (the blocks whose parameters it owns:
// wte, h.0, ..., lm_head), the bytes its rank program sends and receives across the stage
// boundaries per step, and its first rank's program_json (nodes, collectives within the stage,
// parameter memory), from that rank's orbit's program. With virtual stages the numbers are of the
// rank's program, which runs every stage it holds.
nlohmann::json pipeline_report_json(const PipelinePrograms& pp, const sharding::PipelinePlan& plan);

// Returns the runs of consecutive ranks among `ranks` as inclusive [first, last] pairs, increasing.
std::vector<std::pair<int, int>> rank_ranges(std::vector<int> ranks);

}  // namespace dt::job
