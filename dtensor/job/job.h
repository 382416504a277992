// A distributed job, assembled in one place: a model, a mesh and a parallel plan go in; each
// rank's program, its bindings (parameter shards and data inputs), a run and a training loop come
// out. The CLI's `run`, `train`, `compile`, `profile` and `shard-weights`, the benchmarks and the
// Python module are thin callers of this.
//
// What Job::compile does, in order (each step once):
//   1. resolves the plan against the model and the mesh (sharding::resolve_plan);
//   2. checks that the mesh fits the model (a parameter the plan shards over a mesh dim has at
//      least as many elements along that dim as the mesh dim has ranks; ValueError otherwise);
//   3. propagates and partitions every rank's program, or only `JobOptions::ranks`' and one
//      program per orbit (ranks whose programs are the same up to renaming: sharding/rank_orbits.h);
//   4. runs the pass pipeline over the programs with the cross-rank consistency check, once per
//      orbit (passes/rank_pipeline.h), and plans their comm buffers.
// A Job is immutable once compiled: run() and bindings() may be called any number of times.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "dtensor/comm/process_group.h"
#include "dtensor/ir/graph.h"
#include "dtensor/job/weights.h"
#include "dtensor/layout/device_mesh.h"
#include "dtensor/passes/pass.h"
#include "dtensor/runtime/launcher.h"
#include "dtensor/sharding/compiler.h"
#include "dtensor/sharding/parallel_plan.h"

namespace dt::job {

struct PipelinePrograms;  // train_pipeline.h

// The pass pipeline run over every rank's program after partitioning (passes/pass_manager.h).
struct PassSettings {
  std::string pipeline = "default";  // default | none | a,b,c
  passes::PassOptions options;        // bucket caps, one-shot threshold, memory budget
  bool check_ranks = true;            // prove after partitioning and each pass that groups agree
  std::ostream* print_after = nullptr;  // print every rank's IR after each pass here
};

struct JobOptions {
  DeviceMesh mesh{Shape{1}};
  sharding::ParallelPlan plan;  // default: nothing sharded (every parameter replicated)
  PassSettings passes;
  runtime::Backend backend = runtime::Backend::threads;
  CommOptions comm;
  bool comm_arena = true;  // place planned comm buffers in a symmetric arena
  // Build only these ranks' programs (compile --rank) and one per orbit, which is what the pass
  // pipeline and the cross-rank check need: the work does not grow with the mesh. Such a job
  // reports and prints but cannot run. Empty: every rank.
  std::vector<int> ranks;
};

// Returns mpi when this process was started by mpirun (and the mpi backend is built), else threads.
runtime::Backend default_backend();

// One rank's numbers from a run.
struct RankStats {
  int rank = 0;
  double time_ms = 0;
  size_t peak_bytes = 0;
  int64_t param_bytes = 0, bytes_sent = 0;
  int collectives = 0;
};

struct RunOptions {
  int repeat = 1;  // runs per rank; the stats keep the fastest
  // When set, rank r's interpreter gets node_hook(r) (traces: runtime/trace.h; under mpi, each
  // process's own rank after a barrier so that the tracks share one time origin).
  std::function<runtime::NodeHook(int rank)> node_hook;
  // mpi only: called on every process, inside the MPI world, after the outputs were gathered (the
  // place to merge per-rank traces or compare and print before MPI is finalized); rank 0's return
  // value reaches every process as RunResult::verdict.
  std::function<bool(const struct RunResult&, ProcessGroup& world)> in_world;
};

struct RunResult {
  std::vector<Tensor> outputs;              // full tensors, assembled from every rank's shard
  std::vector<std::vector<Tensor>> locals;  // locals[k][r]: rank r's local shard of output k
  std::vector<RankStats> ranks;             // by rank
  std::map<std::string, int> collectives_per_kind;  // of rank 0's program
  bool root = true;     // false on the mpi processes other than rank 0
  bool verdict = true;  // RunOptions::in_world's answer (mpi), else true
};

class Job {
 public:
  // Compiles `model` (a forward graph) for options.mesh under options.plan: the four steps above.
  static Job compile(const ir::Graph& model, JobOptions options);
  // Same for a graph whose plan needs what a plan file cannot say (a training step places its
  // optimizer state like its parameters): `adjust_plan` edits the resolved plan before propagation.
  static Job compile(const ir::Graph& model, JobOptions options,
                     const std::function<void(sharding::ResolvedPlan&)>& adjust_plan);

  const ir::Graph& graph() const { return graph_; }  // what the programs were partitioned from
  const JobOptions& options() const { return options_; }
  const DeviceMesh& mesh() const { return options_.mesh; }
  const sharding::CompiledModel& compiled() const { return compiled_; }
  const sharding::Sharding& sharding() const { return compiled_.sharding; }
  const std::vector<std::string>& warnings() const { return compiled_.sharding.warnings; }
  // The ranks with a program: JobOptions::ranks (or every rank) and the orbits' representatives.
  const std::vector<int>& ranks() const { return compiled_.ranks; }
  // Rank r's program; ValueError when r has none (not in the mesh, or not among JobOptions::ranks).
  const ir::Graph& program(int rank) const;
  // Every rank's program by rank (programs[r] is rank r's): what the threads launcher takes.
  std::vector<const ir::Graph*> programs_by_rank() const;

  // Rank r's bindings: its shards of the parameters (weights.rank_shards) and of the data inputs.
  runtime::Bindings bindings(int rank, const Weights& weights, const TensorMap& inputs) const;
  // Every rank's bindings by rank, matching programs_by_rank().
  std::vector<runtime::Bindings> bindings_by_rank(const Weights& weights, const TensorMap& inputs) const;
  // Returns output k of the graph assembled from every rank's local shard (locals by rank).
  Tensor assemble_output(size_t k, const std::vector<Tensor>& locals) const;
  // Returns the report numbers of rank r from its stats.
  RankStats rank_stats(int rank, const runtime::RunStats& stats) const;

  // The pipeline's programs when the plan has a pipeline section (forward only), else null: such a
  // job only runs (threads or mpi backend: train_pipeline.h's run_pipeline).
  const PipelinePrograms* pipeline() const { return pipeline_.get(); }

  // Runs every rank: on threads all in this process, on mpi this process's rank (under mpirun
  // -np <mesh size>), the outputs gathered to every process.
  RunResult run(const Weights& weights, const TensorMap& inputs, const RunOptions& options = {}) const;

 private:
  Job() = default;
  // bindings() with weights.matches(...) known (bindings_by_rank checks it once for all ranks).
  runtime::Bindings bindings(int rank, const Weights& weights, const TensorMap& inputs, bool matching) const;
  ir::Graph graph_;
  JobOptions options_;
  sharding::CompiledModel compiled_;
  std::map<int, size_t> program_of_rank_;  // rank -> index into compiled_.programs
  std::shared_ptr<const PipelinePrograms> pipeline_;
};

// Throws ValueError when a parameter the resolved plan shards on tensor dim d over mesh dim m has
// fewer than mesh.size(m) elements along d (some ranks would hold nothing of it).
void check_mesh_fits_model(const ir::Graph& model, const sharding::ResolvedPlan& plan, const DeviceMesh& mesh);

}  // namespace dt::job
