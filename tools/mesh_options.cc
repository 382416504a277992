#include "tools/mesh_options.h"

#include <fmt/format.h>


namespace dt::tools {

void add_mesh_options(CLI::App* cmd, MeshCliOptions& opt, const MeshOptionSpec& spec) {
  CLI::Option* mesh =
      cmd->add_option("--mesh", opt.mesh, fmt::format("{} on this device mesh (e.g. 4, 2x2)", spec.what));
  if (!opt.mesh.empty()) mesh->capture_default_str();
  cmd->add_option("--plan", opt.plan, "parallel plan for --mesh (docs/plans.md)")->required(spec.plan_required);
  if (!spec.with_backend) return;
  cmd->add_option("--backend", opt.backend,
                  "backend of a --mesh run: threads (one thread per rank) or mpi (one process per rank, under "
                  "mpirun -np <mesh size>); default: mpi when started by mpirun, else threads")
      ->check(CLI::IsMember({"threads", "mpi"}));
}

bool under_mpirun() { return runtime::launched_by_mpirun(); }

runtime::Backend chosen_backend(const MeshCliOptions& opt) {
  if (!opt.backend.empty()) return runtime::parse_backend(opt.backend);
  return under_mpirun() ? runtime::Backend::mpi : runtime::Backend::threads;
}

job::JobOptions job_options(const MeshCliOptions& mesh, const PassCliOptions& passes) {
  job::JobOptions o;
  o.mesh = DeviceMesh::parse(mesh.mesh.empty() ? "1" : mesh.mesh);
  if (!mesh.plan.empty()) o.plan = sharding::ParallelPlan::load(mesh.plan);
  o.backend = chosen_backend(mesh);
  o.passes = pass_settings(passes);
  return o;
}

}  // namespace dt::tools
