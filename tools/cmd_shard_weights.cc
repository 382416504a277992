// `dtensor shard-weights MODEL --weights W --mesh 4 --plan P -o DIR`: writes a sharded checkpoint
// DIR (io/sharded_checkpoint.h) holding every rank's shard of every parameter, laid out by the same
// propagation that `dtensor compile` partitions with. W is a safetensors file of full tensors or a
// checkpoint directory of any mesh and plan (which this reshards).
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>

#include "dtensor/core/atomic_file.h"
#include "dtensor/core/error.h"
#include "dtensor/io/sharded_checkpoint.h"
#include "dtensor/ir/parser.h"
#include "dtensor/job/job.h"
#include "dtensor/sharding/propagation.h"
#include "tools/command.h"
#include "tools/load_program.h"
#include "tools/mesh_options.h"

namespace dt::tools {
namespace {

struct ShardWeightsOptions {
  ModelFiles files;                     // MODEL, --weights (required)
  MeshCliOptions mesh = {.mesh = "1"};  // --mesh, --plan (required)
  std::string output;
};

void shard_weights_command(const ShardWeightsOptions& opt) {
  // The checkpoint writes only its manifest, generation directories and lock file in DIR.
  refuse_output_over_input((std::filesystem::path(opt.output) / "checkpoint.json").string(),
                           {{"model", opt.files.model}, {"weights", opt.files.weights}, {"plan", opt.mesh.plan}});
  const ir::Graph model = ir::parse_file(opt.files.model);
  // The placements are the job's (the propagation `compile` partitions with).
  const job::Job job = placement_job(opt.mesh, model);
  const DeviceMesh& mesh = job.mesh();
  // --weights may itself be a checkpoint directory of another mesh or plan: it is resharded.
  const job::Weights weights = job::Weights::load(opt.files.weights);
  io::ShardedCheckpoint ckpt{mesh, opt.mesh.plan, {}, {}, {}, {}};
  for (const ir::Value* p : model.params()) {
    ckpt.placements[p->name] = sharding::placements_of(job.sharding(), p);
    ckpt.shapes[p->name] = p->type.shape;
  }
  int64_t total = 0;
  std::string summary;
  for (int r : mesh.ranks()) {
    ckpt.local.push_back(weights.rank_shards(model, job.sharding(), mesh, r));
    int64_t bytes = 0;
    for (const auto& [name, t] : ckpt.local.back()) bytes += int64_t(t.nbytes());
    total += bytes;
    summary += fmt::format("rank {}: {} tensors, {:.1f} KiB\n", r, ckpt.local.back().size(), double(bytes) / 1024);
  }
  io::write_sharded_checkpoint(opt.output, ckpt);
  std::printf("%s%d ranks, %.1f KiB in all -> %s\n", summary.c_str(), int(mesh.size()), double(total) / 1024,
              opt.output.c_str());
}

void setup(CLI::App& app) {
  static ShardWeightsOptions opt;
  CLI::App* cmd = app.add_subcommand("shard-weights", "Write one safetensors file of parameter shards per rank");
  add_model_options(cmd, opt.files, {.inputs_flag = nullptr, .required = true});
  add_mesh_options(cmd, opt.mesh, {.what = "shard the weights", .plan_required = true, .with_backend = false});
  cmd->add_option("-o,--output", opt.output, "output directory (a sharded checkpoint)")->required();
  cmd->callback([] { shard_weights_command(opt); });
}

CommandRegistrar reg("shard-weights", setup);

}  // namespace
}  // namespace dt::tools
