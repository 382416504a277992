// Pipeline-parallel training (the plan's `pipeline` section): what train_sharded runs for such a
// plan. The model is cut into stages (pipeline/stages.h), each stage's rank runs its program of
// micro-batch forwards and backwards in schedule order (pipeline/program.h), proved deadlock-free
// at compile time (passes/p2p_order.h), and the optimizer step runs once per step.
//
// Each stage runs on its sub-mesh (the mesh at one index of the pipeline dim): its graph is
// partitioned there under the rest of the plan (sharding/compiler.h), the values crossing stages
// laid out R, or S(0) on the mesh dims that shard the plan's data inputs on dim 0 (the batch), so
// that the rank at each place of a stage's sub-mesh exchanges them with the rank at the same place
// of the neighbouring stage whole.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dtensor/job/train.h"
#include "dtensor/pipeline/program.h"

namespace dt::job {

// The pipeline of a plan on a mesh: its stages and the programs of the ranks asked for
// (ValueError for a plan whose pipeline dim is not among its mesh dims, other dims larger than 1,
// and pipeline/stages.h's errors).
//
// The work does not grow with the mesh: each stage's graph is propagated once on its sub-mesh and
// partitioned for one rank per orbit of it (sharding/rank_orbits.h); the ranks of one pipeline rank
// whose places fall in the same orbit of every stage they run form one orbit of the pipeline (their
// programs are equal up to renaming: the rank lists of their groups, where their shards start), and
// one program per pipeline orbit is built (the report, the deadlock proof by orbit). A rank's own
// program is built when asked (instantiate(): its stages partitioned for it, then its schedule),
// which running needs (every rank on threads, its own under mpirun).
struct PipelinePrograms {
  pipeline::StageSplit split;
  std::vector<pipeline::StageGraph> graphs;       // [stage]
  std::vector<DeviceMesh> meshes;                 // [stage]: its sub-mesh
  // [stage]: its graph's sharding on its sub-mesh, with its first rank's program and its orbits.
  std::vector<sharding::CompiledModel> compiled;
  int64_t pp_dim = 0;                  // the pipeline's mesh dim
  pipeline::ProgramOptions options;    // the schedule and virtual stages set from the plan
  ir::RankOrbits orbits;               // of the pipeline's ranks (the comment above)
  // By increasing rank: the ranks asked for and every orbit's representative.
  std::vector<pipeline::StageProgram> programs;
  int64_t stage_programs_partitioned = 0;  // the work compile_pipeline did: stage programs partitioned

  // The pipeline rank (index along the pipeline dim) and place (index in its sub-mesh) of a rank.
  std::pair<int, int> place_of(int rank) const;
  // The ranks of pipeline stage x (interleaved: of the pipeline rank running it), increasing.
  std::vector<int> stage_ranks(int x) const { return meshes[size_t(x)].ranks(); }
  // The built program of `rank` (ValueError when it was not built; find: null).
  const pipeline::StageProgram& program(int rank) const;
  const pipeline::StageProgram* find(int rank) const;
  // Builds `rank`'s program (ValueError for a rank outside the mesh).
  pipeline::StageProgram instantiate(int rank) const;
  // The program of `rank`'s orbit (its representative's): what every rank of the orbit has but
  // for renaming (stages, data inputs, the names and types of parameters and outputs).
  const pipeline::StageProgram& orbit_program(int rank) const;
  // The stage among sp's (several when interleaved) whose graph has value `name`, -1 when none.
  int stage_holding(const pipeline::StageProgram& sp, const std::string& name) const;
  // The placements of stage graph value `name` on the sp stage holding it.
  const Placements& placements_of(const pipeline::StageProgram& sp, const std::string& name) const;
  // programs by rank for a mesh of n ranks (ValueError for a rank without a built program).
  std::vector<const ir::Graph*> programs_by_rank(int n) const;
};
// Compiles the pipeline and builds the programs of `ranks` (nullopt: every rank; empty: the orbits'
// representatives' alone).
PipelinePrograms compile_pipeline(const ir::Graph& forward, const sharding::ParallelPlan& plan, const DeviceMesh& mesh,
                                  const pipeline::ProgramOptions& options,
                                  const std::optional<std::vector<int>>& ranks = std::nullopt);

// The programs a process runs: every rank's (threads) or its own rank's (mpi).
using LocalPrograms = std::span<const pipeline::StageProgram* const>;
// The bindings of `programs`' ranks (by rank, n ranks; the others left empty): their shards of
// their stages' parameters (and zero optimizer state).
std::vector<runtime::Bindings> bind_stage_params(const PipelinePrograms& pp, const ir::Graph& forward,
                                                 const std::map<std::string, Tensor>& weights, LocalPrograms programs,
                                                 int n);
// Binds each micro-batch of `batch` (one batch of every data input) on those of `programs`' ranks
// that read it.
void bind_microbatches(const PipelinePrograms& pp, const ir::Graph& forward, const std::map<std::string, Tensor>& batch,
                       std::vector<runtime::Bindings>& bind, LocalPrograms programs);

// Job::run of a pipeline (compiled with options.training false): the model's outputs from the last
// stage, every micro-batch's concatenated on dim 0 (scalars averaged), and every rank's numbers.
// `world` null: every rank on the threads backend; else (mpi) this process's rank of `world`, the
// outputs broadcast from the last stage and the numbers gathered, so every process holds them.
RunResult run_pipeline(const PipelinePrograms& pp, const ir::Graph& forward, const std::map<std::string, Tensor>& weights,
                       const TensorMap& inputs, const JobOptions& job, const RunOptions& run, ProcessGroup* world);

// Trains the pipeline. On the mpi backend (sharded.job.backend) each process runs its own rank's
// stage program; every process gets the losses (the last stage's, broadcast) and rank 0 reports;
// rank 0 receives every rank's trained shards when sharded.gather_state asks and the first step's
// gradients when options.keep_first_grads does, and assembles them as the threads backend does.
TrainResult train_pipeline(ir::Graph forward, const std::map<std::string, Tensor>& weights,
                           const std::map<std::string, Tensor>& data, const TrainOptions& options,
                           const ShardedTrainOptions& sharded);

}  // namespace dt::job
