// `dtensor train MODEL --weights W --data D [--steps N] [--optimizer sgd|adamw] [--lr ...]
//  [--mesh M --plan P] [--save OUT] [--grads-out G] [--json]`: trains a forward model with a scalar
// loss output (runtime/train_loop.h) on one device or sharded on the threads backend, printing one
// line per step (a progress bar instead when stdout is a terminal and --json is off).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "dtensor/core/atomic_file.h"
#include "dtensor/core/error.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/ir/parser.h"
#include "dtensor/runtime/train_loop.h"
#include "dtensor/sharding/tensor_sharding.h"
#ifdef DTENSOR_WITH_MPI
#include "dtensor/comm/mpi/mpi_runtime.h"
#endif
#include "tools/command.h"
#include "tools/mesh_fit.h"
#include "tools/threads_option.h"
#include "tools/passes_cli.h"

namespace dt::tools {
namespace {

struct TrainCliOptions {
  std::string model, weights, data, save, grads_out, mesh, plan;
  std::string backend;  // threads | mpi; empty: mpi when started by mpirun
  int steps = 1;
  autodiff::OptimizerConfig optimizer;
  std::optional<double> lr;  // default: 0.1 for sgd, 1e-3 for adamw (torch's defaults differ too)
  bool json = false;
  PassCliOptions passes;
  std::optional<int> threads;  // per rank; absent: cores / ranks
};

// Tokens per step: the number of elements of the data input `input` of one batch (token ids for a
// language model, rows for the mlp).
int64_t tokens_per_step(const ir::Graph& model) {
  for (const ir::Value* v : model.inputs())
    if (v->name == "input") return v->type.rank() > 1 ? v->type.shape[0] * v->type.shape[1] : v->type.numel();
  return 0;
}

// A sharded checkpoint: DIR/rank<r>.safetensors with each rank's shards of the parameters and
// optimizer state, and metadata mesh, rank and placements.<name> (as `shard-weights` writes them, so
// `run --weights DIR` loads the parameters too).
bool is_sharded_checkpoint_path(const std::string& path) {
  return std::filesystem::is_directory(path) || path.size() < 12 || path.substr(path.size() - 12) != ".safetensors";
}

void write_rank_checkpoint(const std::string& dir, const runtime::TrainResult& r, const DeviceMesh& mesh,
                           const std::string& plan) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) DT_THROW(IoError) << "cannot create checkpoint directory " << dir << ": " << ec.message();
  std::map<std::string, std::string> meta = {{"mesh", mesh.str()}, {"plan", plan}};
  for (const auto& [name, p] : r.placements) {
    meta["placements." + name] = p;
    meta["shape." + name] = fmt::format("{}", fmt::join(r.state.at(name).shape().begin(), r.state.at(name).shape().end(), ","));
  }
  StagedFiles files;  // all ranks' files appear together or not at all
  for (int rank : mesh.ranks()) {
    meta["rank"] = std::to_string(rank);
    const auto& mine = r.rank_state.at(size_t(rank));
    files.add((std::filesystem::path(dir) / fmt::format("rank{}.safetensors", rank)).string(),
              io::safetensors_bytes(io::TensorMap(mine.begin(), mine.end()), meta));
  }
  files.commit();
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size() && !s.empty()) {
    const size_t end = std::min(s.find(',', at), s.size());
    out.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// Reads a sharded checkpoint back as full tensors (each assembled from every rank's shard).
std::map<std::string, Tensor> read_rank_checkpoint(const std::string& dir) {
  const std::string first = (std::filesystem::path(dir) / "rank0.safetensors").string();
  if (!std::filesystem::exists(first))
    DT_THROW(IoError) << "--weights " << dir << " is a directory without rank0.safetensors (write one with train --save DIR)";
  const io::SafetensorsFile f0 = io::SafetensorsFile::open(first);
  auto mesh_it = f0.metadata().find("mesh");
  if (mesh_it == f0.metadata().end()) DT_THROW(IoError) << first << " records no mesh";
  const DeviceMesh mesh = DeviceMesh::parse(mesh_it->second);
  std::vector<io::SafetensorsFile> files;
  for (int rank : mesh.ranks()) {
    const std::string path = (std::filesystem::path(dir) / fmt::format("rank{}.safetensors", rank)).string();
    if (!std::filesystem::exists(path)) DT_THROW(IoError) << "checkpoint " << dir << " of mesh " << mesh.str() << " has no " << path;
    files.push_back(io::SafetensorsFile::open(path));
  }
  std::map<std::string, Tensor> full;
  for (const std::string& name : f0.names()) {
    auto p = f0.metadata().find("placements." + name);
    if (p == f0.metadata().end()) DT_THROW(IoError) << first << " records no placements for " << name;
    std::vector<Tensor> locals;
    Shape shape;
    for (const io::SafetensorsFile& f : files) locals.push_back(f.get(name));
    // The full shape: local shapes summed along sharded dims are not enough for uneven or strided
    // shards, so the shape is recorded too.
    auto s = f0.metadata().find("shape." + name);
    if (s == f0.metadata().end()) DT_THROW(IoError) << first << " records no shape for " << name;
    for (const std::string& d : split_commas(s->second)) {
      try {
        shape.push_back(std::stoll(d));
      } catch (const std::exception&) {
        DT_THROW(IoError) << first << " records a bad shape for " << name << ": " << s->second;
      }
    }
    full[name] = sharding::assemble_tensor(locals, mesh, parse_placements(p->second), shape);
  }
  return full;
}

void train_command(TrainCliOptions opt) {
  if (opt.steps < 1) DT_THROW(ValueError) << "--steps must be >= 1, got " << opt.steps;
  opt.optimizer.lr = opt.lr ? *opt.lr : (opt.optimizer.kind == "adamw" ? 1e-3 : 0.1);
  autodiff::validate(opt.optimizer);
  if (opt.mesh.empty() != opt.plan.empty()) DT_THROW(ValueError) << "--mesh and --plan go together";
  apply_threads_option(opt.threads, opt.mesh.empty() ? 1 : int(DeviceMesh::parse(opt.mesh).size()));
  runtime::Backend backend = runtime::Backend::threads;
  if (!opt.backend.empty()) backend = runtime::parse_backend(opt.backend);
#ifdef DTENSOR_WITH_MPI
  else if (mpi::launched_by_mpi_launcher()) backend = runtime::Backend::mpi;
#endif
  if (backend == runtime::Backend::mpi) {
    if (opt.mesh.empty())
      DT_THROW(ValueError) << "an mpi training run needs --mesh and --plan (one process per rank: mpirun -np <mesh size>)";
  }
  for (const std::string* out : {&opt.save, &opt.grads_out})
    if (!out->empty())
      refuse_output_over_input(*out, {{"model", opt.model}, {"weights", opt.weights}, {"data", opt.data}, {"plan", opt.plan}});
  if (!opt.save.empty() && !opt.grads_out.empty() && same_file(opt.save, opt.grads_out))
    DT_THROW(ValueError) << "--save and --grads-out name the same file " << opt.save;

  ir::Graph model = ir::parse_file(opt.model);
  const int64_t tokens = tokens_per_step(model);
  std::map<std::string, Tensor> weights, data;
  if (std::filesystem::is_directory(opt.weights)) weights = read_rank_checkpoint(opt.weights);
  else
    for (auto& [k, v] : io::read_safetensors(opt.weights)) weights[k] = v;
  for (auto& [k, v] : io::read_safetensors(opt.data)) data[k] = v;

  const bool bar = !opt.json && isatty(STDOUT_FILENO);
  runtime::TrainOptions to;
  to.steps = opt.steps;
  to.optimizer = opt.optimizer;
  to.keep_first_grads = !opt.grads_out.empty();
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

  runtime::TrainResult r;
  if (opt.mesh.empty()) {
    r = runtime::train_single_device(std::move(model), weights, data, to);
  } else {
    runtime::ShardedTrainOptions so;
    so.backend = backend;
    so.gather_state = !opt.save.empty();  // mpi: rank 0 receives every rank's shards and writes
    so.mesh = DeviceMesh::parse(opt.mesh);
    so.plan = sharding::ParallelPlan::load(opt.plan);
    check_mesh_fits_model(model, so.plan, so.mesh);
    const PassCliOptions passes = opt.passes;
    so.run_passes = [passes](std::vector<ir::Graph>& programs, const std::vector<int>& ranks) {
      run_pass_pipelines(programs, ranks, passes);
    };
    r = runtime::train_sharded(std::move(model), weights, data, to, so);
  }

  if (!r.root) return;  // mpi: rank 0 reports
  if (!opt.save.empty()) {
    if (!opt.mesh.empty() && is_sharded_checkpoint_path(opt.save))
      write_rank_checkpoint(opt.save, r, DeviceMesh::parse(opt.mesh), opt.plan);
    else
      io::write_safetensors(opt.save, io::TensorMap(r.state.begin(), r.state.end()));
  }
  if (!opt.grads_out.empty())
    io::write_safetensors(opt.grads_out, io::TensorMap(r.first_grads.begin(), r.first_grads.end()));
  if (opt.json) {
    nlohmann::json j = {{"model", opt.model},       {"steps", opt.steps},         {"optimizer", opt.optimizer.kind},
                        {"lr", opt.optimizer.lr},   {"losses", r.losses},         {"step_ms", r.step_ms},
                        {"peak_bytes", r.peak_bytes}, {"ranks", opt.mesh.empty() ? 1 : DeviceMesh::parse(opt.mesh).size()}};
    if (!r.bytes_sent_per_step.empty()) {
      j["bytes_sent_per_step"] = r.bytes_sent_per_step.front();
      j["collectives"] = r.collectives;
    }
    if (!opt.save.empty()) j["saved"] = opt.save;
    if (!opt.grads_out.empty()) j["grads_out"] = opt.grads_out;
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("trained %s for %d step%s (%s, lr %g): loss %.9g -> %.9g, peak memory %.2f MiB per rank\n",
              opt.model.c_str(), opt.steps, opt.steps == 1 ? "" : "s", opt.optimizer.kind.c_str(), opt.optimizer.lr,
              r.losses.front(), r.losses.back(), double(r.peak_bytes) / (1 << 20));
  if (!r.bytes_sent_per_step.empty())
    std::printf("each step sends %.1f KiB from the busiest rank\n", double(r.bytes_sent_per_step.front()) / 1024);
  if (!opt.save.empty()) std::printf("wrote trained weights and optimizer state to %s\n", opt.save.c_str());
  if (!opt.grads_out.empty()) std::printf("wrote the first step's gradients to %s\n", opt.grads_out.c_str());
}

void setup(CLI::App& app) {
  static TrainCliOptions opt;
  CLI::App* cmd = app.add_subcommand("train", "Train a model with a scalar loss output (one device or --mesh)");
  cmd->add_option("model", opt.model, "IR file (.dt) of the forward graph; its output `loss` (or only output) is the loss")
      ->required();
  cmd->add_option("--weights", opt.weights,
                  "safetensors file with every parameter (and, to resume, the optimizer state --save wrote)")
      ->required();
  cmd->add_option("--data", opt.data,
                  "safetensors file with the data inputs (`input`, `target`): one batch reused every step, or a "
                  "leading dim of K batches used in turn")
      ->required();
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
  cmd->add_option("--mesh", opt.mesh, "train sharded on this device mesh, e.g. 4 or 2x2");
  cmd->add_option("--plan", opt.plan, "parallel plan for --mesh (docs/plans.md)");
  cmd->add_option("--backend", opt.backend,
                  "backend of a --mesh run: threads or mpi (under mpirun -np <mesh size>); default: mpi when "
                  "started by mpirun, else threads")
      ->check(CLI::IsMember({"threads", "mpi"}));
  add_pass_options(cmd, opt.passes, /*with_print=*/false);
  cmd->add_option("--save", opt.save,
                  "write the trained parameters and optimizer state: one FILE.safetensors of full tensors, or with "
                  "--mesh a directory of rank<r>.safetensors shards (loadable by run --weights DIR and train --weights DIR)");
  cmd->add_option("--grads-out", opt.grads_out, "write the first step's full gradients, named like the parameters");
  cmd->add_flag("--json", opt.json, "print {losses, step_ms, peak_bytes, ...} as JSON");
  add_threads_option(cmd, opt.threads);
  cmd->callback([] { train_command(opt); });
}

CommandRegistrar reg("train", setup);

}  // namespace
}  // namespace dt::tools
