// The --mesh / --plan / --backend / --max-memory-per-rank / --save-plan option block of the commands that shard a model (run, train,
// profile, compile, shard-weights), declared once, and the one rule choosing the backend.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "dtensor/autodiff/train_step.h"
#include "dtensor/autoplan/search.h"
#include "dtensor/job/job.h"
#include "dtensor/runtime/launcher.h"
#include "tools/passes_cli.h"

namespace dt::tools {

struct MeshCliOptions {
  std::string mesh = {}, plan = {};  // both empty: a single-device run
  std::string backend = {};          // threads | mpi; empty: mpi when started by mpirun, else threads
  // --plan auto only (dtensor/autoplan/search.h): the per-rank memory limit ("2GiB", "512MiB",
  // "1e9"; empty: none) and where to write the chosen plan.
  std::string max_memory = {}, save_plan = {};
  // --plan auto and plan-search: a machine file (dtensor calibrate, autoplan/machine.h) whose
  // constants the search's estimate uses; empty: the documented defaults.
  std::string machine = {};
  bool sharded() const { return !mesh.empty() || !plan.empty(); }
};

// How a command declares the block. A command that always shards (compile, shard-weights) sets
// plan_required and gives MeshCliOptions::mesh a default ("1"), shown in the help; one that runs
// only on the threads backend (profile) leaves out --backend.
struct MeshOptionSpec {
  const char* what;  // the action the help names: "run sharded", "shard the weights", ...
  bool plan_required = false;
  bool with_backend = true;
};

// Adds --mesh, --plan, --max-memory-per-rank, --save-plan, --machine and (unless spec.with_backend is false)
// --backend to `cmd`.
void add_mesh_options(CLI::App* cmd, MeshCliOptions& opt, const MeshOptionSpec& spec);
// Adds --machine alone (plan-search, which has no --plan), its help starting with `prefix`.
void add_machine_option(CLI::App* cmd, MeshCliOptions& opt, const std::string& prefix);
// Returns --backend, or mpi when this process was started by mpirun (threads otherwise).
runtime::Backend chosen_backend(const MeshCliOptions& opt);
// True when this process was started by mpirun (always false without Open MPI).
bool under_mpirun();
// Returns the job the flags describe: --mesh (default 1), the plan --plan names, the backend and
// the pass pipeline; the caller adds what else it has (comm options, the ranks to keep).
// `--plan auto` needs the model: use the overload below (this one refuses it).
job::JobOptions job_options(const MeshCliOptions& mesh, const PassCliOptions& passes);
// Same, for `model`; `--plan auto` searches the cheapest plan for it (for its training step with
// `train_optimizer` when given) under --max-memory-per-rank, and writes it to --save-plan.
job::JobOptions job_options(const MeshCliOptions& mesh, const PassCliOptions& passes, const ir::Graph& model,
                            const autodiff::OptimizerConfig* train_optimizer = nullptr);
// The search's options the flags give: --max-memory-per-rank and --machine (the caller adds the
// training step and the pass pipeline).
autoplan::SearchOptions search_options(const MeshCliOptions& mesh);
// Returns a job that only places `model` on the mesh (rank 0's program and one per orbit, no
// passes): what a command needs that writes shards for every rank but runs nothing.
job::Job placement_job(const MeshCliOptions& mesh, const ir::Graph& model);
// Parses a size: a number with an optional unit B, KB, MB, GB, TB (powers of 1000) or KiB, MiB,
// GiB, TiB (powers of 1024); ValueError naming `flag` otherwise.
int64_t parse_size(const std::string& text, const std::string& flag);
// The plan a --plan value names: "auto" (the search's keyword) or a plan file.
inline bool is_auto_plan(const std::string& plan) { return plan == "auto"; }

}  // namespace dt::tools
