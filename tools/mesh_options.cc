#include "tools/mesh_options.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "dtensor/autoplan/machine.h"
#include "dtensor/autoplan/search.h"
#include "dtensor/core/atomic_file.h"
#include "dtensor/core/error.h"


namespace dt::tools {

void add_mesh_options(CLI::App* cmd, MeshCliOptions& opt, const MeshOptionSpec& spec) {
  CLI::Option* mesh =
      cmd->add_option("--mesh", opt.mesh, fmt::format("{} on this device mesh (e.g. 4, 2x2)", spec.what));
  if (!opt.mesh.empty()) mesh->capture_default_str();
  cmd->add_option("--plan", opt.plan,
                  "parallel plan for --mesh (docs/plans.md), or `auto`: the cheapest plan the search finds")
      ->required(spec.plan_required);
  cmd->add_option("--max-memory-per-rank", opt.max_memory,
                  "--plan auto: per-rank memory limit (parameters, training state, activations), e.g. 2GiB");
  cmd->add_option("--save-plan", opt.save_plan, "--plan auto: write the chosen plan here (plan JSON)");
  add_machine_option(cmd, opt, "--plan auto: ");
  if (!spec.with_backend) return;
  cmd->add_option("--backend", opt.backend,
                  "backend of a --mesh run: threads (one thread per rank) or mpi (one process per rank, under "
                  "mpirun -np <mesh size>); default: mpi when started by mpirun, else threads")
      ->check(CLI::IsMember({"threads", "mpi"}));
}

void add_machine_option(CLI::App* cmd, MeshCliOptions& opt, const std::string& prefix) {
  cmd->add_option("--machine", opt.machine,
                  prefix + "the machine's rates and collective α–β (a file of dtensor calibrate, or a described cluster)");
}

bool under_mpirun() { return runtime::launched_by_mpirun(); }

runtime::Backend chosen_backend(const MeshCliOptions& opt) {
  if (!opt.backend.empty()) return runtime::parse_backend(opt.backend);
  return under_mpirun() ? runtime::Backend::mpi : runtime::Backend::threads;
}

int64_t parse_size(const std::string& text, const std::string& flag) {
  static const std::pair<const char*, double> units[] = {{"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
                                                         {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6},
                                                         {"GB", 1e9}, {"TB", 1e12}, {"B", 1.0}};
  double scale = 1;
  std::string number = text;
  for (const auto& [unit, s] : units) {
    const std::string u = unit;
    if (number.size() > u.size() && number.compare(number.size() - u.size(), u.size(), u) == 0) {
      number.resize(number.size() - u.size());
      scale = s;
      break;
    }
  }
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != number.size() || !std::isfinite(v) || v * scale < 1 || v * scale > 9e18)
    DT_THROW(ValueError) << flag << " " << text << ": expected a positive size such as 2GiB, 512MiB or 1e9";
  return int64_t(v * scale);
}

namespace {

job::JobOptions base_options(const MeshCliOptions& mesh, const PassCliOptions& passes) {
  job::JobOptions o;
  o.mesh = DeviceMesh::parse(mesh.mesh.empty() ? "1" : mesh.mesh);
  o.backend = chosen_backend(mesh);
  o.passes = pass_settings(passes);
  if (!is_auto_plan(mesh.plan))
    for (const auto& [flag, value] : {std::pair{"--max-memory-per-rank", &mesh.max_memory}, {"--save-plan", &mesh.save_plan},
                                      {"--machine", &mesh.machine}})
      if (!value->empty()) DT_THROW(ValueError) << flag << " applies to --plan auto only";
  return o;
}

}  // namespace

job::JobOptions job_options(const MeshCliOptions& mesh, const PassCliOptions& passes) {
  job::JobOptions o = base_options(mesh, passes);
  DT_CHECK(!is_auto_plan(mesh.plan)) << "--plan auto needs the model: call job_options(mesh, passes, model)";
  if (!mesh.plan.empty()) o.plan = sharding::ParallelPlan::load(mesh.plan);
  return o;
}

job::JobOptions job_options(const MeshCliOptions& mesh, const PassCliOptions& passes, const ir::Graph& model,
                            const autodiff::OptimizerConfig* train_optimizer) {
  job::JobOptions o = base_options(mesh, passes);
  if (!is_auto_plan(mesh.plan)) {
    if (!mesh.plan.empty()) o.plan = sharding::ParallelPlan::load(mesh.plan);
    return o;
  }
  autoplan::SearchOptions so = search_options(mesh);
  if (train_optimizer) {
    so.train = true;
    so.optimizer = *train_optimizer;
  }
  // The search estimates memory after this job's passes, and says what memory budget they need
  // for the compiled programs to be the ones it estimated.
  so.pipeline = o.passes.pipeline;
  so.pass_options = o.passes.options;
  autoplan::SearchResult r = autoplan::search(model, o.mesh, so);
  o.plan = std::move(r.plan);
  o.passes.options = r.pass_options;
  if (!mesh.save_plan.empty()) write_file_atomically(mesh.save_plan, o.plan.to_json());
  return o;
}

autoplan::SearchOptions search_options(const MeshCliOptions& mesh) {
  autoplan::SearchOptions so;
  if (!mesh.max_memory.empty()) so.max_memory_per_rank = parse_size(mesh.max_memory, "--max-memory-per-rank");
  if (!mesh.machine.empty()) so.machine = autoplan::load_machine(mesh.machine);
  return so;
}

job::Job placement_job(const MeshCliOptions& mesh, const ir::Graph& model) {
  job::JobOptions jo = job_options(mesh, PassCliOptions{.passes = "none"}, model);
  jo.ranks = {jo.mesh.ranks().front()};
  return job::Job::compile(model, std::move(jo));
}

}  // namespace dt::tools
