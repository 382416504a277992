// `dtensor checkpoint consolidate DIR -o FILE`: a sharded checkpoint (io/sharded_checkpoint.h)
// as one safetensors file of full tensors (parameters and optimizer state), with nothing trained.
// `dtensor checkpoint reshard MODEL DIR --mesh M --plan P -o DIR2`: the same checkpoint for
// another mesh and plan; optimizer state (`<param>.momentum_buffer`, `.exp_avg`, ...) is laid out
// like its parameter, as a training step places it, and a scalar (adamw's `step`) is replicated.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>

#include "dtensor/core/atomic_file.h"
#include "dtensor/core/error.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/io/sharded_checkpoint.h"
#include "dtensor/ir/parser.h"
#include "dtensor/job/job.h"
#include "dtensor/sharding/tensor_sharding.h"
#include "tools/command.h"
#include "tools/mesh_options.h"

namespace dt::tools {
namespace {

struct CheckpointOptions {
  std::string dir, output, model;
  MeshCliOptions mesh = {.mesh = "1"};
};

job::Weights load_checkpoint(const std::string& dir) {
  if (!std::filesystem::is_directory(dir))
    DT_THROW(IoError) << dir << " is not a checkpoint directory (train --save DIR or shard-weights -o DIR write one)";
  return job::Weights::load(dir, "checkpoint");
}

void consolidate(const CheckpointOptions& opt) {
  refuse_output_over_input(opt.output, {{"checkpoint", opt.dir}});
  const job::Weights w = load_checkpoint(opt.dir);
  const job::TensorMap& full = w.full_tensors();
  io::write_safetensors(opt.output, full);
  int64_t bytes = 0;
  for (const auto& [name, t] : full) bytes += int64_t(t.nbytes());
  std::printf("consolidated %zu tensors (%.1f KiB) of %s (mesh %s) into %s\n", full.size(), double(bytes) / 1024,
              opt.dir.c_str(), w.checkpoint_data()->mesh.str().c_str(), opt.output.c_str());
}

// Returns the parameter a checkpoint tensor belongs to: itself, or the longest parameter name that
// prefixes it followed by a dot (optimizer state); null for none.
const ir::Value* owning_param(const ir::Graph& model, const std::string& name) {
  const ir::Value* best = nullptr;
  for (const ir::Value* p : model.params())
    if (name == p->name) return p;
    else if (name.size() > p->name.size() && name.compare(0, p->name.size(), p->name) == 0 &&
             name[p->name.size()] == '.' && (!best || p->name.size() > best->name.size()))
      best = p;
  return best;
}

void reshard(const CheckpointOptions& opt) {
  refuse_output_over_input((std::filesystem::path(opt.output) / "checkpoint.json").string(),
                           {{"model", opt.model}, {"plan", opt.mesh.plan}});
  const job::TensorMap full = load_checkpoint(opt.dir).full_tensors();
  std::error_code ec;
  if (std::filesystem::equivalent(opt.output, opt.dir, ec))
    DT_THROW(ValueError) << "-o " << opt.output << " is the checkpoint being resharded: write another directory";
  const ir::Graph model = ir::parse_file(opt.model);
  // The placements are the job's (the propagation `compile` partitions with).
  const job::Job job = placement_job(opt.mesh, model);
  const DeviceMesh& mesh = job.mesh();
  io::ShardedCheckpoint out{mesh, opt.mesh.plan, std::vector<io::TensorMap>(size_t(mesh.size())), {}, {}, {}};
  for (const auto& [name, t] : full) {
    const ir::Value* p = owning_param(model, name);
    if (!p) DT_THROW(ValueError) << "the checkpoint holds " << name << ", which is neither a parameter of " << opt.model
                                 << " nor the optimizer state of one";
    const Placements placements = t.dim() == 0 ? Placements(size_t(mesh.ndim()))
                                               : job.sharding().values[size_t(p->id)];
    if (t.dim() != 0 && t.shape() != p->type.shape)
      DT_THROW(ValueError) << "the checkpoint's " << name << " is " << shape_str(t.shape()) << " but " << p->name
                           << " is " << ir::type_str(p->type) << " in " << opt.model;
    out.placements[name] = placements_str(placements);
    out.shapes[name] = t.shape();
    for (size_t i = 0; i < mesh.ranks().size(); ++i)
      out.local[i][name] = sharding::shard_tensor(t, mesh, placements, mesh.ranks()[i]);
  }
  io::write_sharded_checkpoint(opt.output, out);
  std::printf("resharded %zu tensors of %s onto mesh %s with plan %s into %s\n", full.size(), opt.dir.c_str(),
              mesh.str().c_str(), opt.mesh.plan.c_str(), opt.output.c_str());
}

void setup(CLI::App& app) {
  static CheckpointOptions opt;
  CLI::App* cmd = app.add_subcommand("checkpoint", "Consolidate or reshard a sharded checkpoint directory");
  cmd->require_subcommand(1);
  CLI::App* c = cmd->add_subcommand("consolidate", "Write a checkpoint's full tensors to one safetensors file");
  c->add_option("DIR", opt.dir, "checkpoint directory (train --save DIR, shard-weights -o DIR)")->required();
  c->add_option("-o,--output", opt.output, "safetensors file of full tensors")->required();
  c->callback([] { consolidate(opt); });
  CLI::App* r = cmd->add_subcommand("reshard", "Write a checkpoint again for another mesh and plan");
  r->add_option("MODEL", opt.model, "IR file (.dt) of the model the checkpoint belongs to")->required();
  r->add_option("DIR", opt.dir, "checkpoint directory to read")->required();
  add_mesh_options(r, opt.mesh, {.what = "lay the checkpoint out", .plan_required = true, .with_backend = false});
  r->add_option("-o,--output", opt.output, "new checkpoint directory")->required();
  r->callback([] { reshard(opt); });
}

CommandRegistrar reg("checkpoint", setup);

}  // namespace
}  // namespace dt::tools
