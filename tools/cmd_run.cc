// `dtensor run MODEL --weights W --inputs I [--expect E] [--save-outputs O] [--trace T] [--json]`:
// runs a model written in the IR on CPU and reports time, peak memory and every output (a scalar's
// value, any non-finite values); with --expect, compares each output E names (tools/output_check.h;
// exit code 1 when one does not match or is not finite).
//
// The flags fill one RunOptions (tools/run_report.h) that both paths read: the single-device
// path is run_single_device(); the multi-rank path (--mesh/--plan) is run_sharded(), a job
// (dtensor/job/job.h) on the threads backend or, under mpirun, the mpi backend (--backend). A
// flag that cannot apply to the run asked for is an error (refuse_unless), never silently ignored.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/comm/timeout.h"
#include "dtensor/core/atomic_file.h"
#include "dtensor/core/error.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/io/tensor_binding.h"
#include "dtensor/ir/parser.h"
#include "dtensor/job/job.h"
#include "dtensor/layout/device_mesh.h"
#include "dtensor/runtime/launcher.h"
#include "dtensor/runtime/trace.h"
#include "tools/command.h"
#include "dtensor/core/byte_units.h"
#include "tools/output_check.h"
#include "tools/load_program.h"
#include "tools/run_report.h"
#include "tools/threads_option.h"

namespace dt::tools {
namespace {

// The flags that only a sharded run reads.
std::vector<std::string> sharded_only_flags() {
  std::vector<std::string> flags = {"--backend"};
  flags.insert(flags.end(), pass_flag_names().begin(), pass_flag_names().end());
  flags.insert(flags.end(), {"--no-comm-arena", "--check-collectives", "--timeout-s", "--sharded"});
  return flags;
}

struct RunCli {
  RunOptions run;
  std::optional<double> timeout_s;  // into run.comm.timeout, validated
  std::optional<int> threads;       // per rank; absent: cores / ranks
  const CLI::App* cmd = nullptr;
};

struct RunResult {
  std::vector<Tensor> outputs;
  runtime::RunStats stats;  // of the fastest repetition
};

// Runs the program on one rank (a threads world of size 1, so collectives on a 1-rank group work),
// recording a trace when --trace asks for one.
RunResult run_single_device(const LoadedProgram& p, const RunOptions& opt) {
  runtime::LaunchOptions lo;
  lo.repeat = opt.repeat;
  std::unique_ptr<runtime::TraceRecorder> trace;
  if (!opt.trace.empty()) {
    trace = std::make_unique<runtime::TraceRecorder>(1);
    lo.node_hook = [&](int rank) { return trace->hook(rank); };
  }
  RunResult r;
  run_ranks(1, [&](ProcessGroup& world) {
    runtime::RankResult res = runtime::run_rank(p.graph, p.bindings, world, lo);
    r.outputs = std::move(res.outputs);
    r.stats = res.stats;
  });
  if (trace) trace->write(opt.trace);
  return r;
}

// Prints the report (text or JSON); returns false when an output is not finite or --expect was
// given and did not match.
bool report(const RunOptions& opt, const LoadedProgram& p, const RunResult& r) {
  nlohmann::json j;
  j["model"] = opt.files.model;
  j["nodes"] = p.graph.nodes().size();
  j["ranks"] = 1;
  j["time_ms"] = r.stats.seconds * 1e3;
  j["peak_bytes"] = r.stats.peak_bytes;
  std::vector<std::optional<Tensor>> reference;
  if (!opt.expect.empty()) {
    if (r.outputs.empty()) DT_THROW(ValueError) << "model " << opt.files.model << " has no output to compare";
    reference = expected_outputs(p.graph, opt.expect);
  }
  const OutputCheck check = check_outputs(p.graph, r.outputs, reference, opt.rtol, opt.atol);
  j["outputs"] = check.outputs;
  j["match"] = check.match;
  if (!opt.expect.empty())
    j["expect"] = {{"file", opt.expect},           {"max_abs_diff", check.max_abs_diff},
                   {"max_rel_diff", check.max_rel_diff}, {"rtol", opt.rtol},
                   {"atol", opt.atol},             {"match", check.match}};
  if (!opt.save_outputs.empty()) {
    save_outputs(opt.save_outputs, p.graph, r.outputs);
    j["saved_outputs"] = opt.save_outputs;
  }
  if (!opt.trace.empty()) j["trace"] = opt.trace;
  if (opt.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return check.match;
  }
  std::printf("model %s: %zu nodes, %zu parameters\n", opt.files.model.c_str(), p.graph.nodes().size(),
              p.graph.params().size());
  std::printf("ran on 1 device in %.3f ms, peak memory %s (live intermediates)\n", r.stats.seconds * 1e3,
              bytes_text(double(r.stats.peak_bytes)).c_str());
  for (const std::string& line : check.lines) std::printf("%s\n", line.c_str());
  if (!opt.save_outputs.empty()) std::printf("saved %zu outputs to %s\n", r.outputs.size(), opt.save_outputs.c_str());
  if (!opt.trace.empty()) std::printf("wrote trace %s\n", opt.trace.c_str());
  if (!opt.expect.empty())
    std::printf("expect %s: max_abs_diff %.3g, max_rel_diff %.3g (rtol %g, atol %g): %s\n", opt.expect.c_str(),
                check.max_abs_diff, check.max_rel_diff, opt.rtol, opt.atol, check.match ? "match" : "MISMATCH");
  return check.match;
}

// Runs on the mesh as a job and reports (on the mpi backend every process runs its rank and rank 0
// reports); returns whether every output matched.
bool run_sharded(const RunOptions& opt) {
  for (const std::string& out : {opt.trace, opt.save_outputs})
    refuse_output_over_input(out, {{"model", opt.files.model}, {"weights", opt.files.weights},
                                   {"inputs", opt.files.inputs}, {"expect", opt.expect}, {"plan", opt.mesh.plan}});
  if (!opt.trace.empty() && !opt.save_outputs.empty() && same_file(opt.trace, opt.save_outputs))
    DT_THROW(ValueError) << "--trace and --save-outputs name the same file " << opt.trace;
  const ir::Graph model = ir::parse_file(opt.files.model);
  require_model_files(model, opt.files);
  job::JobOptions jo = job_options(opt.mesh, opt.passes, model);
  jo.comm = opt.comm;
  jo.comm_arena = opt.comm_arena;
  const job::Job job = job::Job::compile(model, std::move(jo));
  // A weights file must hold every parameter (bind_params checks names, dtypes and shapes); a
  // checkpoint directory is checked against the job's placements when it is used.
  job::Weights weights;
  if (std::filesystem::is_directory(opt.files.weights)) weights = job::Weights::load(opt.files.weights);
  else if (!opt.files.weights.empty())
    weights = job::Weights::full(io::bind_params(model, io::SafetensorsFile::open(opt.files.weights)));
  job::TensorMap inputs;
  if (!opt.files.inputs.empty()) inputs = io::bind_inputs(model, io::SafetensorsFile::open(opt.files.inputs));
  const bool mpi = job.options().backend == runtime::Backend::mpi;
  auto print_warnings = [&] {
    for (const auto& w : job.warnings()) std::fprintf(stderr, "warning: %s\n", w.c_str());
  };

  job::RunOptions ro;
  ro.repeat = opt.repeat;
  std::unique_ptr<runtime::TraceRecorder> trace;
  const int n = int(job.mesh().size());
  if (!opt.trace.empty() && !mpi) {
    trace = std::make_unique<runtime::TraceRecorder>(n);
    ro.node_hook = [&](int rank) { return trace->hook(rank); };
  } else if (!opt.trace.empty()) {
    // Under mpi the hook is asked for once per process, after a barrier: every process's track
    // starts at the same moment.
    ro.node_hook = [&](int rank) {
      trace = std::make_unique<runtime::TraceRecorder>(n);
      return trace->hook(rank);
    };
  }
  if (!mpi) {
    print_warnings();
    const job::RunResult r = job.run(weights, inputs, ro);
    if (trace) trace->write(opt.trace);
    return report_sharded_run(opt, job, r, weights, inputs);
  }
  ro.in_world = [&](const job::RunResult& r, ProcessGroup& world) {
    if (trace) trace->write_gathered(world, opt.trace);
    if (world.rank() != 0) return true;
    print_warnings();  // once, from rank 0
    const bool match = report_sharded_run(opt, job, r, weights, inputs);
    std::fflush(stdout);
    return match;
  };
  return job.run(weights, inputs, ro).verdict;
}

void run_command(RunCli& cli) {
  RunOptions& opt = cli.run;
  if (cli.timeout_s) opt.comm.timeout = timeout_from_seconds(*cli.timeout_s, "--timeout-s");  // before any work
  if (opt.repeat < 1) DT_THROW(ValueError) << "--repeat must be >= 1, got " << opt.repeat;
  const bool sharded = opt.mesh.sharded();
  apply_threads_option(cli.threads, opt.mesh.mesh.empty() ? 1 : int(DeviceMesh::parse(opt.mesh.mesh).size()));
  refuse_unless(cli.cmd, !opt.save_outputs.empty(), {"--sharded"},
                "saves each rank's outputs: add --save-outputs DIR");
  if (sharded) {
    if (opt.mesh.plan.empty()) DT_THROW(ValueError) << "--mesh needs --plan (a parallel plan, docs/plans.md)";
    if (opt.mesh.mesh.empty())
      DT_THROW(ValueError) << "--plan needs --mesh (the device mesh it shards over, e.g. --mesh 4)";
    if (!run_sharded(opt)) command_exit_code() = 1;
    return;
  }
  if (under_mpirun())
    DT_THROW(ValueError) << "started by mpirun without --mesh: every process would run the whole model; add --mesh N "
                            "--plan P (N = the number of processes) for a sharded run, or run without mpirun";
  refuse_unless(cli.cmd, false, sharded_only_flags(), "applies to sharded runs only: add --mesh and --plan");
  refuse_unless(cli.cmd, !opt.expect.empty(), {"--rtol", "--atol"},
                "is the tolerance of a comparison: add --expect (a single-device run compares with nothing else)");
  for (const std::string& out : {opt.trace, opt.save_outputs})
    refuse_output_over_input(out, {{"model", opt.files.model}, {"weights", opt.files.weights},
                                   {"inputs", opt.files.inputs}, {"expect", opt.expect}});
  if (!opt.trace.empty() && !opt.save_outputs.empty() && same_file(opt.trace, opt.save_outputs))
    DT_THROW(ValueError) << "--trace and --save-outputs name the same file " << opt.trace;
  const LoadedProgram p = load_program(opt.files);
  const RunResult r = run_single_device(p, opt);
  if (!report(opt, p, r)) command_exit_code() = 1;
}

void setup(CLI::App& app) {
  static RunCli cli;
  RunOptions& opt = cli.run;
  CLI::App* cmd = app.add_subcommand("run", "Run a model (IR file) on CPU; compare with --expect");
  cli.cmd = cmd;
  ModelOptionSpec files;
  files.weights_help = "safetensors file with every parameter of the model, or (with --mesh) a shard-weights "
                       "directory of rank<r>.safetensors";
  add_model_options(cmd, opt.files, files);
  cmd->add_option("--expect", opt.expect,
                  "safetensors file of expected outputs: each output it names (or `output` for output 0) must "
                  "match; or a directory that --save-outputs DIR --sharded wrote");
  cmd->add_option("--save-outputs", opt.save_outputs,
                  "write every output, by name, to this safetensors file (gathered to full tensors for --mesh); "
                  "with --sharded, a directory of rank<r>.safetensors with each rank's local outputs");
  cmd->add_flag("--sharded", opt.sharded_outputs,
                "--mesh runs: --save-outputs writes each rank's local outputs (and their placements) instead of "
                "the gathered full tensors");
  cmd->add_option("--rtol", opt.rtol, "relative tolerance of --expect")->capture_default_str();
  cmd->add_option("--atol", opt.atol,
                  "absolute tolerance of --expect, scaled by max(1, max|expected|) of each output: an element "
                  "matches when |actual - expected| <= atol * max(1, max|expected|) + rtol * |expected|")
      ->capture_default_str();
  cmd->add_option("--repeat", opt.repeat, "run N times and report the fastest")->capture_default_str();
  cmd->add_flag("--json", opt.json, "print the report as JSON");
  add_mesh_options(cmd, opt.mesh, {.what = "run sharded"});
  add_pass_options(cmd, opt.passes, /*with_print=*/false);
  cmd->add_flag("!--no-comm-arena", opt.comm_arena,
                "allocate comm buffers normally instead of at their planned symmetric-arena offsets");
  cmd->add_option("--trace", opt.trace,
                  "write a Chrome trace (Perfetto) of the run: one track per rank (under mpirun, rank 0 writes "
                  "every rank's track into this one file)");
  cmd->add_flag("--check-collectives", opt.comm.check_collectives,
                "debug: compare op, dtype, shape and sequence number across ranks before each collective");
  cmd->add_option("--timeout-s", cli.timeout_s, "per-collective timeout in seconds (default 60)");
  add_threads_option(cmd, cli.threads);
  cmd->callback([] { run_command(cli); });
}

CommandRegistrar reg("run", setup);

}  // namespace
}  // namespace dt::tools
