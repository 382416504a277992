// `dtensor plan-search MODEL --mesh M [--train] [--max-memory-per-rank S] [--explain] [--json]
//  [--save-plan P.json] [--machine M.json]`: the plan `--plan auto` would choose (dtensor/autoplan/search.h). Prints
// the plan JSON; --explain adds its estimated step time split into compute and each collective
// kind, the per-rank memory, the mesh roles tried and, for each module class and mesh dim, the
// alternatives with the step time each would give; --json prints all of that as JSON.
#include <cstdio>

#include "dtensor/autoplan/search.h"
#include "dtensor/core/atomic_file.h"
#include "dtensor/ir/parser.h"
#include "tools/command.h"
#include "tools/load_program.h"
#include "tools/mesh_options.h"

namespace dt::tools {
namespace {

struct PlanSearchCliOptions {
  ModelFiles files;                     // MODEL only
  MeshCliOptions mesh = {.mesh = "1"};  // --mesh, --max-memory-per-rank, --save-plan, --machine
  bool train = false, explain = false, json = false;
  std::string optimizer = "sgd";
};

void plan_search_command(const PlanSearchCliOptions& opt) {
  const ir::Graph model = ir::parse_file(opt.files.model);
  autoplan::SearchOptions so = search_options(opt.mesh);
  so.train = opt.train;
  so.optimizer.kind = opt.optimizer;
  const autoplan::SearchResult r = autoplan::search(model, DeviceMesh::parse(opt.mesh.mesh), so);
  if (!opt.mesh.save_plan.empty()) {
    refuse_output_over_input(opt.mesh.save_plan, {{"model", opt.files.model}});
    write_file_atomically(opt.mesh.save_plan, r.plan.to_json());
  }
  if (opt.json) {
    std::printf("%s", autoplan::to_json(r).c_str());
    return;
  }
  std::printf("%s\n", r.plan.to_json().c_str());
  if (opt.explain) std::printf("%s", autoplan::explain(r).c_str());
}

void setup(CLI::App& app) {
  static PlanSearchCliOptions opt;
  CLI::App* cmd = app.add_subcommand(
      "plan-search", "Find the cheapest parallel plan for a model on a mesh (what --plan auto uses) and say why");
  add_model_options(cmd, opt.files, {.weights_help = nullptr, .inputs_flag = nullptr});
  cmd->add_option("--mesh", opt.mesh.mesh, "device mesh (e.g. 4, 2x2)")->capture_default_str();
  cmd->add_option("--max-memory-per-rank", opt.mesh.max_memory,
                  "per-rank memory limit (parameters, training state, activations), e.g. 2GiB");
  cmd->add_option("--save-plan", opt.mesh.save_plan, "also write the chosen plan here (plan JSON)");
  add_machine_option(cmd, opt.mesh, "");
  cmd->add_flag("--train", opt.train, "search for the training step (gradients and optimizer state count)");
  cmd->add_option("--optimizer", opt.optimizer, "--train: sgd or adamw (adamw's state counts as memory)")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  cmd->add_flag("--explain", opt.explain, "also print the estimate and every alternative considered");
  cmd->add_flag("--json", opt.json, "print the plan, estimate and alternatives as JSON");
  cmd->callback([cmd] {
    refuse_unless(cmd, opt.train, {"--optimizer"}, "applies to --train only");
    refuse_unless(cmd, !opt.json, {"--explain"}, "prints text, which --json replaces: drop one");
    plan_search_command(opt);
  });
}

CommandRegistrar reg("plan-search", setup);

}  // namespace
}  // namespace dt::tools
