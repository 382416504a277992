// `dtensor run MODEL --weights W --inputs I [--expect E] [--save-outputs O] [--json]`: runs a model
// written in the IR on CPU and reports time, peak memory and every output (a scalar's value, any
// non-finite values); with --expect, compares each output E names (tools/output_check.h; exit code
// 1 when one does not match or is not finite).
//
// The single-device path is run_single_device(); the multi-rank path (--mesh/--plan) is
// tools/run_distributed.cc, on the threads backend or, under mpirun, the mpi backend (--backend).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <nlohmann/json.hpp>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/comm/timeout.h"
#include "dtensor/core/atomic_file.h"
#include "dtensor/core/error.h"
#include "dtensor/core/ops.h"
#include "dtensor/layout/device_mesh.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/io/tensor_binding.h"
#include "dtensor/ir/parser.h"
#include "dtensor/runtime/interpreter.h"
#include "dtensor/runtime/launcher.h"
#ifdef DTENSOR_WITH_MPI
#include "dtensor/comm/mpi/mpi_runtime.h"
#endif
#include "tools/command.h"
#include "tools/byte_units.h"
#include "tools/output_check.h"
#include "tools/load_program.h"
#include "tools/run_distributed.h"
#include "tools/threads_option.h"

namespace dt::tools {
namespace {

struct RunOptions {
  std::string model, weights, inputs, expect;
  std::string save_outputs;  // --save-outputs FILE.safetensors
  std::string mesh, plan;  // multi-rank run (tools/run_distributed.cc)
  bool json = false;
  double rtol = 1e-5, atol = 1e-5;
  int repeat = 1;
  PassCliOptions passes;  // --mesh runs only
  std::string trace;      // --mesh runs only
  std::string backend;    // --mesh runs only: threads | mpi; empty: mpi when started by mpirun
  bool check_collectives = false;
  std::optional<double> timeout_s;  // absent: CommOptions' default
  bool no_comm_arena = false;
  std::optional<int> threads;  // per rank; absent: cores / ranks
};

using Program = LoadedProgram;

struct RunResult {
  std::vector<Tensor> outputs;
  runtime::RunStats stats;  // of the fastest repetition
  int ranks = 1;
};

Program load_program(const RunOptions& opt) { return dt::tools::load_program(opt.model, opt.weights, opt.inputs); }

// Runs the program on one rank (a threads world of size 1, so collectives on a 1-rank group work).
RunResult run_single_device(const Program& p, int repeat, const CommOptions& comm) {
  RunResult r;
  run_ranks(1, [&](ProcessGroup& world) {
    runtime::GroupMap groups = runtime::make_groups(p.graph, world);
    runtime::Interpreter interp(p.graph);
    for (int i = 0; i < std::max(repeat, 1); ++i) {
      runtime::RunStats s;
      r.outputs = interp.run(p.bindings, groups, &s);
      if (i == 0 || s.seconds < r.stats.seconds) r.stats = s;
    }
  }, comm);
  return r;
}

// Prints the report (text or JSON); returns false when an output is not finite or --expect was
// given and did not match.
bool report(const RunOptions& opt, const Program& p, const RunResult& r) {
  nlohmann::json j;
  j["model"] = opt.model;
  j["nodes"] = p.graph.nodes().size();
  j["ranks"] = r.ranks;
  j["time_ms"] = r.stats.seconds * 1e3;
  j["peak_bytes"] = r.stats.peak_bytes;
  std::vector<std::optional<Tensor>> reference;
  if (!opt.expect.empty()) {
    if (r.outputs.empty()) DT_THROW(ValueError) << "model " << opt.model << " has no output to compare";
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
  if (opt.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return check.match;
  }
  std::printf("model %s: %zu nodes, %zu parameters\n", opt.model.c_str(), p.graph.nodes().size(), p.graph.params().size());
  std::printf("ran on 1 device in %.3f ms, peak memory %s (live intermediates)\n", r.stats.seconds * 1e3,
              bytes_text(double(r.stats.peak_bytes)).c_str());
  for (const std::string& line : check.lines) std::printf("%s\n", line.c_str());
  if (!opt.save_outputs.empty()) std::printf("saved %zu outputs to %s\n", r.outputs.size(), opt.save_outputs.c_str());
  if (!opt.expect.empty())
    std::printf("expect %s: max_abs_diff %.3g, max_rel_diff %.3g (rtol %g, atol %g): %s\n", opt.expect.c_str(),
                check.max_abs_diff, check.max_rel_diff, opt.rtol, opt.atol, check.match ? "match" : "MISMATCH");
  return check.match;
}

// Returns the CommOptions of --timeout-s and --check-collectives.
CommOptions comm_options(const RunOptions& opt) {
  CommOptions comm;
  if (opt.timeout_s) comm.timeout = timeout_from_seconds(*opt.timeout_s, "--timeout-s");
  comm.check_collectives = opt.check_collectives;
  return comm;
}

// Returns --backend, or mpi when the process was started by mpirun (threads otherwise).
runtime::Backend choose_backend(const RunOptions& opt) {
  if (!opt.backend.empty()) return runtime::parse_backend(opt.backend);
#ifdef DTENSOR_WITH_MPI
  if (mpi::launched_by_mpi_launcher()) return runtime::Backend::mpi;
#endif
  return runtime::Backend::threads;
}

void run_command(const RunOptions& opt) {
  const CommOptions comm = comm_options(opt);  // validates --timeout-s before any work
  apply_threads_option(opt.threads, opt.mesh.empty() ? 1 : int(DeviceMesh::parse(opt.mesh).size()));
  if (!opt.mesh.empty() || !opt.plan.empty()) {
    if (opt.plan.empty()) DT_THROW(ValueError) << "--mesh needs --plan (a parallel plan, docs/plans.md)";
    DistributedRunOptions d{opt.model, opt.weights, opt.inputs, opt.expect, opt.mesh.empty() ? "1" : opt.mesh,
                            opt.plan, opt.json, opt.rtol, opt.atol, opt.repeat, opt.passes, opt.trace,
                            choose_backend(opt), comm, !opt.no_comm_arena, opt.save_outputs};
    if (!run_distributed(d)) command_exit_code() = 1;
    return;
  }
  if (!opt.backend.empty() && runtime::parse_backend(opt.backend) == runtime::Backend::mpi)
    DT_THROW(ValueError) << "--backend mpi needs --mesh and --plan (a sharded run)";
#ifdef DTENSOR_WITH_MPI
  if (mpi::launched_by_mpi_launcher())
    DT_THROW(ValueError) << "started by mpirun without --mesh: every process would run the whole model; add --mesh N "
                            "--plan P (N = the number of processes) for a sharded run, or run without mpirun";
#endif
  if (!opt.trace.empty())
    DT_THROW(ValueError) << "--trace records a sharded run: add --mesh and --plan (a single-device run has no "
                            "trace yet)";
  refuse_output_over_input(opt.save_outputs, {{"model", opt.model}, {"weights", opt.weights}, {"inputs", opt.inputs},
                                              {"expect", opt.expect}});
  Program p = load_program(opt);
  RunResult r = run_single_device(p, opt.repeat, comm);
  if (!report(opt, p, r)) command_exit_code() = 1;
}

void setup(CLI::App& app) {
  static RunOptions opt;
  CLI::App* cmd = app.add_subcommand("run", "Run a model (IR file) on CPU; compare with --expect");
  cmd->add_option("model", opt.model, "IR file (.dt)")->required();
  cmd->add_option("--weights", opt.weights, "safetensors file with every parameter of the model, or (with --mesh) a shard-weights directory of rank<r>.safetensors");
  cmd->add_option("--inputs", opt.inputs, "safetensors file with the data inputs, by name (extra tensors ignored)");
  cmd->add_option("--expect", opt.expect,
                  "safetensors file of expected outputs: each output it names (or `output` for output 0) must match");
  cmd->add_option("--save-outputs", opt.save_outputs,
                  "write every output, by name, to this safetensors file (gathered to full tensors for --mesh)");
  cmd->add_option("--rtol", opt.rtol, "relative tolerance of --expect")->capture_default_str();
  cmd->add_option("--atol", opt.atol, "absolute tolerance of --expect")->capture_default_str();
  cmd->add_option("--repeat", opt.repeat, "run N times and report the fastest")->capture_default_str();
  cmd->add_flag("--json", opt.json, "print the report as JSON");
  cmd->add_option("--mesh", opt.mesh, "run sharded on this device mesh (e.g. 4, 2x2)");
  cmd->add_option("--plan", opt.plan, "parallel plan for --mesh (docs/plans.md); compares with the single-device run");
  add_pass_options(cmd, opt.passes, /*with_print=*/false);
  cmd->add_flag("--no-comm-arena", opt.no_comm_arena,
                "allocate comm buffers normally instead of at their planned symmetric-arena offsets");
  cmd->add_option("--trace", opt.trace, "write a Chrome trace (Perfetto) of the --mesh run: one track per rank");
  cmd->add_option("--backend", opt.backend,
                  "backend of a --mesh run: threads (one thread per rank) or mpi (one process per rank, under "
                  "mpirun -np <mesh size>); default: mpi when started by mpirun, else threads")
      ->check(CLI::IsMember({"threads", "mpi"}));
  cmd->add_flag("--check-collectives", opt.check_collectives,
                "debug: compare op, dtype, shape and sequence number across ranks before each collective");
  cmd->add_option("--timeout-s", opt.timeout_s, "per-collective timeout in seconds (default 60)");
  add_threads_option(cmd, opt.threads);
  cmd->callback([] { run_command(opt); });
}

CommandRegistrar reg("run", setup);

}  // namespace
}  // namespace dt::tools
