// `dtensor train MODEL --weights W --data D [--steps N] [--optimizer sgd|adamw] [--lr ...]
//  [--mesh M --plan P] [--save OUT] [--grads-out G] [--json]`: trains a forward model with a scalar
// loss output (job/train.h) on one device or sharded on the threads backend, printing one
// line per step (a progress bar instead when stdout is a terminal and --json is off).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "dtensor/autodiff/autodiff.h"
#include "dtensor/comm/timeout.h"
#include "dtensor/core/atomic_file.h"
#include "dtensor/core/error.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/ir/parser.h"
#include "dtensor/io/sharded_checkpoint.h"
#include "dtensor/job/train.h"
#include "dtensor/job/weights.h"
#include "dtensor/sharding/tensor_sharding.h"
#include "tools/command.h"
#include "tools/load_program.h"
#include "tools/mesh_options.h"
#include "tools/passes_cli.h"
#include "tools/threads_option.h"

namespace dt::tools {
namespace {

struct TrainCliOptions {
  ModelFiles files;     // MODEL, --weights, --data (in `inputs`)
  MeshCliOptions mesh;  // --mesh, --plan, --backend
  std::string save, grads_out;
  int steps = 1;
  autodiff::OptimizerConfig optimizer;
  std::string recompute = "none";  // blocks | none (autodiff/recompute.h)
  std::optional<double> lr;  // default: 0.1 for sgd, 1e-3 for adamw (torch's defaults differ too)
  bool json = false;
  PassCliOptions passes;
  std::optional<int> threads;  // per rank; absent: cores / ranks
  std::optional<double> timeout_s;  // per-collective timeout (sharded), validated
  bool allow_non_finite = false;    // keep training past a NaN/inf loss
  const CLI::App* cmd = nullptr;  // to ask which flags were given
};

// Tokens per step: the number of elements of the data input `input` of one batch (token ids for a
// language model, rows for the mlp).
int64_t tokens_per_step(const ir::Graph& model) {
  for (const ir::Value* v : model.inputs())
    if (v->name == "input") return v->type.rank() > 1 ? v->type.shape[0] * v->type.shape[1] : v->type.numel();
  return 0;
}

void train_command(TrainCliOptions opt) {
  if (opt.steps < 1) DT_THROW(ValueError) << "--steps must be >= 1, got " << opt.steps;
  refuse_unless(opt.cmd, opt.optimizer.kind == "sgd", {"--momentum"}, "applies to --optimizer sgd only");
  refuse_unless(opt.cmd, opt.optimizer.kind == "adamw", {"--beta1", "--beta2", "--eps"},
                "applies to --optimizer adamw only");
  opt.optimizer.lr = opt.lr ? *opt.lr : (opt.optimizer.kind == "adamw" ? 1e-3 : 0.1);
  autodiff::validate(opt.optimizer);
  if (opt.mesh.mesh.empty() != opt.mesh.plan.empty()) DT_THROW(ValueError) << "--mesh and --plan go together";
  const bool sharded = opt.mesh.sharded();
  apply_threads_option(opt.threads, sharded ? int(DeviceMesh::parse(opt.mesh.mesh).size()) : 1);
  const Duration timeout = opt.timeout_s ? timeout_from_seconds(*opt.timeout_s, "--timeout-s") : CommOptions{}.timeout;
  if (!sharded) {
    if (under_mpirun())
      DT_THROW(ValueError) << "started by mpirun without --mesh: every process would train the whole model; add --mesh N "
                              "--plan P (N = the number of processes), or run without mpirun";
    std::vector<std::string> sharded_only = {"--backend", "--timeout-s"};
    sharded_only.insert(sharded_only.end(), pass_flag_names().begin(), pass_flag_names().end());
    refuse_unless(opt.cmd, false, sharded_only, "applies to sharded training only: add --mesh and --plan");
  }
  for (const std::string* out : {&opt.save, &opt.grads_out})
    if (!out->empty())
      refuse_output_over_input(*out, {{"model", opt.files.model}, {"weights", opt.files.weights}, {"data", opt.files.inputs},
                                       {"plan", opt.mesh.plan}});
  if (!opt.save.empty() && !opt.grads_out.empty() && same_file(opt.save, opt.grads_out))
    DT_THROW(ValueError) << "--save and --grads-out name the same file " << opt.save;

  ir::Graph model = ir::parse_file(opt.files.model);
  try {
    autodiff::find_loss(model);
  } catch (const ValueError& e) {
    // The usual cause: a forward model written without its loss.
    DT_THROW(ValueError) << e.what() << " (the example models have one when written with --loss: dtensor example gpt --loss)";
  }
  const int64_t tokens = tokens_per_step(model);
  // Consts (buffers, folded constants: docs/ir.md) are bound from the weights but never trained.
  const auto frozen = std::count_if(model.params().begin(), model.params().end(), [](const ir::Value* p) { return p->frozen; });
  // A checkpoint directory of any mesh and plan is assembled to full tensors and resharded.
  const std::map<std::string, Tensor> weights = job::Weights::load(opt.files.weights).full_tensors();
  const std::map<std::string, Tensor> data = io::read_safetensors(opt.files.inputs);

  const bool bar = !opt.json && isatty(STDOUT_FILENO);
  job::TrainOptions to;
  to.steps = opt.steps;
  to.optimizer = opt.optimizer;
  to.keep_first_grads = !opt.grads_out.empty();
  to.recompute = autodiff::parse_recompute(opt.recompute);
  to.stop_on_non_finite = !opt.allow_non_finite;
  to.on_step = [&](int step, double loss, double ms) {
    if (opt.json) return;
    const double tps = ms > 0 ? double(tokens) / (ms / 1e3) : 0;
    if (bar) {
      const int width = 30, done = int(double(width) * step / opt.steps);
      std::printf("\r[%s%s] step %d/%d  loss %.6f  %.1f ms  %.0f tokens/s", std::string(size_t(done), '#').c_str(),
                  std::string(size_t(width - done), ' ').c_str(), step, opt.steps, loss, ms, tps);
      if (step == opt.steps) std::printf("\n");
      std::fflush(stdout);
    } else {
      std::printf("step %d/%d  loss %.9g  %.3f ms  %.0f tokens/s\n", step, opt.steps, loss, ms, tps);
    }
  };

  job::TrainResult r;
  if (!sharded) {
    r = job::train_single_device(std::move(model), weights, data, to);
  } else {
    job::ShardedTrainOptions so;
    so.job = job_options(opt.mesh, opt.passes, model, &opt.optimizer);
    so.job.comm.timeout = timeout;
    so.gather_state = !opt.save.empty();  // mpi: rank 0 receives every rank's shards and writes
    r = job::train_sharded(std::move(model), weights, data, to, so);
  }

  if (!r.root) return;  // mpi: rank 0 reports
  for (const auto& w : r.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (r.non_finite_step > 0) {
    // Exit 1, like a failed check: the input was well-formed but training diverged. Nothing is
    // saved, so an earlier checkpoint at --save stays the last good one.
    std::fprintf(stderr, "dtensor: step %d of %d: the loss is %g: training stopped, nothing saved%s\n", r.non_finite_step,
                 opt.steps, r.losses.back(),
                 opt.save.empty() ? "" : (" (" + opt.save + " is left as it was)").c_str());
    command_exit_code() = 1;
    return;
  }
  if (!opt.save.empty()) {
    if (sharded && io::is_sharded_checkpoint_path(opt.save)) {
      // A pipeline's tensors are each on its stage's sub-mesh (sub_meshes).
      io::ShardedCheckpoint ckpt{DeviceMesh::parse(opt.mesh.mesh), opt.mesh.plan, {}, r.placements, {}, r.sub_meshes};
      for (auto& rank : r.rank_state) ckpt.local.emplace_back(rank.begin(), rank.end());
      for (const auto& [name, t] : r.state) ckpt.shapes[name] = t.shape();
      io::write_sharded_checkpoint(opt.save, ckpt);
    } else
      io::write_safetensors(opt.save, io::TensorMap(r.state.begin(), r.state.end()));
  }
  if (!opt.grads_out.empty())
    io::write_safetensors(opt.grads_out, io::TensorMap(r.first_grads.begin(), r.first_grads.end()));
  if (opt.json) {
    nlohmann::json j = {{"model", opt.files.model},       {"steps", opt.steps},         {"optimizer", opt.optimizer.kind},
                        {"lr", opt.optimizer.lr},   {"losses", r.losses},         {"step_ms", r.step_ms},
                        {"peak_bytes", r.peak_bytes}, {"ranks", sharded ? DeviceMesh::parse(opt.mesh.mesh).size() : 1}};
    if (!r.bytes_sent_per_step.empty()) {
      j["bytes_sent_per_step"] = r.bytes_sent_per_step.front();
      j["collectives"] = r.collectives;
    }
    j["frozen"] = frozen;
    if (!opt.save.empty()) j["saved"] = opt.save;
    if (!opt.grads_out.empty()) j["grads_out"] = opt.grads_out;
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("trained %s for %d step%s (%s, lr %g): loss %.9g -> %.9g, peak memory %.2f MiB per rank\n",
              opt.files.model.c_str(), opt.steps, opt.steps == 1 ? "" : "s", opt.optimizer.kind.c_str(), opt.optimizer.lr,
              r.losses.front(), r.losses.back(), double(r.peak_bytes) / (1 << 20));
  if (frozen) std::printf("%td consts (buffers and folded constants) frozen: not trained\n", frozen);
  if (!r.bytes_sent_per_step.empty())
    std::printf("each step sends %.1f KiB from the busiest rank\n", double(r.bytes_sent_per_step.front()) / 1024);
  if (!opt.save.empty()) std::printf("wrote trained weights and optimizer state to %s\n", opt.save.c_str());
  if (!opt.grads_out.empty()) std::printf("wrote the first step's gradients to %s\n", opt.grads_out.c_str());
}

void setup(CLI::App& app) {
  static TrainCliOptions opt;
  CLI::App* cmd = app.add_subcommand("train", "Train a model with a scalar loss output (one device or --mesh)");
  opt.cmd = cmd;
  ModelOptionSpec files;
  files.model_help = "IR file (.dt) of the forward graph; its output `loss` (or only output) is the loss";
  files.weights_help = "safetensors file with every parameter (and, to resume, the optimizer state --save wrote)";
  files.inputs_flag = "--data";
  files.inputs_help = "safetensors file with the data inputs (`input`, `target`): one batch reused every step, or a "
                      "leading dim of K batches used in turn";
  files.required = true;
  add_model_options(cmd, opt.files, files);
  cmd->add_option("--steps", opt.steps, "number of optimizer steps")->capture_default_str();
  cmd->add_option("--optimizer", opt.optimizer.kind, "sgd or adamw")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  cmd->add_option("--lr", opt.lr, "learning rate (default 0.1 for sgd, 1e-3 for adamw)");
  cmd->add_option("--momentum", opt.optimizer.momentum, "sgd momentum")->capture_default_str();
  cmd->add_option("--weight-decay", opt.optimizer.weight_decay, "weight decay (adamw: decoupled)")->capture_default_str();
  cmd->add_option("--beta1", opt.optimizer.beta1, "adamw beta1")->capture_default_str();
  cmd->add_option("--beta2", opt.optimizer.beta2, "adamw beta2")->capture_default_str();
  cmd->add_option("--eps", opt.optimizer.eps, "adamw eps")->capture_default_str();
  cmd->add_option("--recompute", opt.recompute,
                  "blocks: recompute each block's activations in the backward from its input instead of keeping them "
                  "(less memory, about one more forward per step); none: keep them")
      ->check(CLI::IsMember({"blocks", "none"}))
      ->capture_default_str();
  add_mesh_options(cmd, opt.mesh, {.what = "train sharded"});
  add_pass_options(cmd, opt.passes, /*with_print=*/false);
  cmd->add_option("--save", opt.save,
                  "write the trained parameters and optimizer state: one FILE.safetensors of full tensors, or with "
                  "--mesh a sharded checkpoint directory (loadable by run --weights DIR and train --weights DIR)");
  cmd->add_option("--grads-out", opt.grads_out, "write the first step's full gradients, named like the parameters");
  cmd->add_flag("--json", opt.json, "print {losses, step_ms, peak_bytes, ...} as JSON");
  add_threads_option(cmd, opt.threads);
  cmd->add_option("--timeout-s", opt.timeout_s, "per-collective timeout in seconds, sharded training (default 60)");
  cmd->add_flag("--allow-non-finite", opt.allow_non_finite,
                "keep training after a step whose loss is NaN or infinite (default: stop there, exit 1, save nothing)");
  cmd->callback([] { train_command(opt); });
}

CommandRegistrar reg("train", setup);

}  // namespace
}  // namespace dt::tools
