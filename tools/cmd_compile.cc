// `dtensor compile MODEL --mesh 4 --plan P [--rank r] [-o FILE] [--report] [--json]`: shards a
// model (IR file) with a parallel plan and prints the per-rank programs (all ranks, or --rank r).
// -o writes them instead: FILE itself with --rank, else FILE with `.rank<r>` before its extension.
// --report prints, instead of the programs, the inserted collectives of each program (value named
// after the module that needed it, kind, group, input type), bytes sent, parameter memory and an
// estimate of peak activation memory per rank, identical ranks in one block, and the cost model's
// communication time; --json prints that report as JSON (every rank in full up to kListedRanks
// ranks, else one entry per distinct program). Only the distinct programs of the job (orbits,
// ir/program_orbits.h) and the --rank one are compiled for --rank and the reports, so a 65,536-rank
// job compiles and reports as fast as a 4-rank one; printing every rank's program builds them all.
//
// A pipeline plan prints its ranks' stage programs: the forward (what `run` runs), or with --train
// the training step (what `train` runs: every micro-batch's forward and backward in schedule order
// with their sends and receives, the gradients accumulated and one SGD update, lr 0.1; --recompute
// blocks recomputes each stage's blocks in its backward), and --report / --json one line per stage.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "dtensor/autodiff/recompute.h"
#include "dtensor/core/atomic_file.h"
#include "dtensor/core/error.h"
#include "dtensor/ir/parser.h"
#include "dtensor/ir/printer.h"
#include "dtensor/job/job.h"
#include "dtensor/job/report.h"
#include "dtensor/job/train_pipeline.h"
#include "dtensor/sharding/compiler.h"
#include "dtensor/core/byte_units.h"
#include "tools/command.h"
#include "tools/load_program.h"
#include "tools/mesh_options.h"
#include "tools/passes_cli.h"

namespace dt::tools {
namespace {

struct CompileCliOptions {
  ModelFiles files;                       // MODEL only
  MeshCliOptions mesh = {.mesh = "1"};    // --mesh, --plan (required)
  std::string output;
  int rank = -1;
  bool report = false, json = false, train = false;
  std::string recompute = "none";  // with --train: blocks | none
  PassCliOptions passes;
};

std::string rank_path(const std::string& path, int rank) {
  std::filesystem::path p(path);
  return (p.parent_path() / fmt::format("{}.rank{}{}", p.stem().string(), rank, p.extension().string())).string();
}


// Returns "rank 3", "ranks 0-3" or "ranks 0, 2, 5-7" from inclusive [first, last] ranges.
std::string ranges_text(const std::vector<std::pair<int, int>>& ranges) {
  std::string out;
  for (const auto& [a, b] : ranges)
    out += fmt::format("{}{}", out.empty() ? "" : ", ", a == b ? fmt::format("{}", a) : fmt::format("{}-{}", a, b));
  return (ranges.size() == 1 && ranges[0].first == ranges[0].second ? "rank " : "ranks ") + out;
}

// Returns ranges_text of the runs of consecutive ranks among `ranks`.
std::string ranks_text(const std::vector<int>& ranks) { return ranges_text(job::rank_ranges(ranks)); }

// Prints the report: one block per distinct rank program (ranks whose programs report the same
// nodes, collectives and sizes share a block), every size in one unit scheme (core/byte_units.h).
void print_report(const nlohmann::json& j) {
  const size_t n_ranks = j["mesh_ranks"].get<size_t>();
  std::printf("model %s: %zu nodes on mesh %s (%zu %s, dims %s), propagation %.3f ms, partition %.3f ms\n",
              j["model"].get<std::string>().c_str(), j["nodes"].get<size_t>(), j["mesh"].get<std::string>().c_str(),
              n_ranks, n_ranks == 1 ? "rank" : "ranks", j["mesh_dims"].dump().c_str(), j["propagate_ms"].get<double>(),
              j["partition_ms"].get<double>());
  std::printf("estimated communication time %.3f ms (cost model, all collectives of the plan); unsharded: parameters "
              "%s, activations %s\n",
              j["estimated_comm_us"].get<double>() / 1e3, bytes_text(j["param_bytes_unsharded"].get<double>()).c_str(),
              bytes_text(j["activation_bytes_estimate_unsharded"].get<double>()).c_str());
  std::printf("estimated step %.3f ms (compute %.3f ms + communication, the model --plan auto ranks plans by), peak "
              "%s per rank\n",
              j["estimated_step_us"].get<double>() / 1e3, j["estimated_compute_us"].get<double>() / 1e3,
              bytes_text(j["estimated_peak_bytes"].get<double>()).c_str());
  for (const auto& w : j["warnings"]) std::printf("warning: %s\n", w.get<std::string>().c_str());
  // Group ranks whose entries are equal but for the rank number, in rank order.
  // A job too large to list rank by rank has one entry per distinct program, with its rank count.
  std::vector<std::pair<nlohmann::json, std::vector<int>>> blocks;
  std::vector<int64_t> running;
  for (const auto& r : j["ranks"]) {
    nlohmann::json body = r;
    body.erase("rank");
    body.erase("ranks_running");
    const int64_t count = r.contains("ranks_running") ? r["ranks_running"].get<int64_t>() : 1;
    auto it = std::find_if(blocks.begin(), blocks.end(), [&](const auto& b) { return b.first == body; });
    if (it == blocks.end()) {
      blocks.push_back({body, {r["rank"].get<int>()}});
      running.push_back(count);
    } else {
      it->second.push_back(r["rank"].get<int>());
      running[size_t(it - blocks.begin())] += count;
    }
  }
  for (size_t b = 0; b < blocks.size(); ++b) {
    const auto& [r, ranks] = blocks[b];
    const std::string who = running[b] == int64_t(ranks.size())
                                ? ranks_text(ranks)
                                : fmt::format("{} ranks (like {})", running[b], ranks_text(ranks));
    std::printf("\n%s: %zu nodes, parameters %s, activations %s (estimated peak), sends %s\n", who.c_str(),
                r["nodes"].get<size_t>(), bytes_text(r["param_bytes"].get<double>()).c_str(),
                bytes_text(r["activation_bytes_estimate"].get<double>()).c_str(),
                bytes_text(r["bytes_sent"].get<double>()).c_str());
    // Columns as wide as their longest entry (module paths of real models are long).
    size_t wv = 5, wk = 4, wg = 5;
    for (const auto& c : r["collectives"]) {
      wv = std::max(wv, c["value"].get<std::string>().size());
      wk = std::max(wk, c["kind"].get<std::string>().size());
      wg = std::max(wg, c["group"].get<std::string>().size());
    }
    std::printf("  %-*s  %-*s  %-*s  %s\n", int(wv), "value", int(wk), "kind", int(wg), "group", "input");
    for (const auto& c : r["collectives"])
      std::printf("  %-*s  %-*s  %-*s  %s\n", int(wv), c["value"].get<std::string>().c_str(), int(wk),
                  c["kind"].get<std::string>().c_str(), int(wg), c["group"].get<std::string>().c_str(),
                  c["input"].get<std::string>().c_str());
    for (const auto& [kind, n] : r["collectives_per_kind"].items())
      std::printf("  total %s: %d, %s sent\n", kind.c_str(), n.get<int>(),
                  bytes_text(r["bytes_sent_per_kind"][kind].get<double>()).c_str());
  }
}

// Prints (or with -o writes, one file per rank) the programs of `ranks`.
void emit_programs(const CompileCliOptions& opt, const std::vector<int>& ranks,
                   const std::function<const ir::Graph&(int rank)>& program);

// Prints the report of a pipeline: one line per stage.
void print_pipeline_report(const nlohmann::json& j, const CompileCliOptions& opt) {
  std::printf("pipeline of %d stages, %d micro-batches per step, %s schedule (plan %s on mesh %s)%s\n",
              j["stages"].get<int>(), j["microbatches"].get<int>(), j["schedule"].get<std::string>().c_str(),
              opt.mesh.plan.c_str(), opt.mesh.mesh.c_str(),
              !opt.train                 ? ""
              : opt.recompute == "none" ? ": the training step"
                                         : ": the training step, blocks recomputed");
  for (const auto& s : j["stage"]) {
    const nlohmann::json& p = s["program"];
    std::string layers;
    for (const auto& l : s["layers"]) layers += (layers.empty() ? "" : ", ") + l.get<std::string>();
    std::printf("stage %d: %s; layers %s; per rank: %zu nodes, parameters %s, sends %s and receives %s across "
                "stage boundaries, %s sent in all per step\n",
                s["stage"].get<int>(), ranges_text(s["ranks"].get<std::vector<std::pair<int, int>>>()).c_str(), layers.c_str(), p["nodes"].get<size_t>(),
                bytes_text(p["param_bytes"].get<double>()).c_str(), bytes_text(s["boundary_bytes_sent"].get<double>()).c_str(),
                bytes_text(s["boundary_bytes_received"].get<double>()).c_str(),
                bytes_text(p["bytes_sent"].get<double>()).c_str());
  }
}

// compile of a pipeline plan: its stage programs (the forward, or with --train the training step),
// or their report.
void compile_pipeline_command(const CompileCliOptions& opt, const job::PipelinePrograms& pp,
                              const sharding::PipelinePlan& plan, const DeviceMesh& mesh) {
  if (opt.report || opt.json) {
    if (opt.rank >= 0) DT_THROW(ValueError) << "--rank with --report or --json: a pipeline's report is per stage; drop --rank";
    nlohmann::json j = job::pipeline_report_json(pp, plan);
    j["train"] = opt.train;
    j["recompute"] = opt.recompute;
    if (opt.json) std::printf("%s\n", j.dump(2).c_str());
    else print_pipeline_report(j, opt);
    return;
  }
  if (opt.rank >= 0 && !mesh.contains(opt.rank)) DT_THROW(ValueError) << "rank " << opt.rank << " is not in mesh " << mesh.str();
  // A rank whose program was not built (under mpirun only the orbits' are) is built here.
  std::optional<pipeline::StageProgram> built;
  emit_programs(opt, opt.rank >= 0 ? std::vector<int>{opt.rank} : mesh.ranks(), [&](int r) -> const ir::Graph& {
    if (const pipeline::StageProgram* sp = pp.find(r)) return sp->step.graph;
    built = pp.instantiate(r);
    return built->step.graph;
  });
}

// compile --train: a pipeline plan's training step programs, as `train` compiles them
// (job/train_pipeline.h; the step of other plans is compiled when `train` runs it).
void compile_train_command(const CompileCliOptions& opt, const ir::Graph& model) {
  const job::JobOptions jo = job_options(opt.mesh, opt.passes, model);
  if (!jo.plan.pipeline)
    DT_THROW(ValueError) << "--train prints a pipeline plan's training step programs, and plan " << opt.mesh.plan
                         << " has no pipeline section: drop --train";
  pipeline::ProgramOptions po;
  po.training = true;
  po.recompute = autodiff::parse_recompute(opt.recompute);
  // A report reads one program per orbit, --rank that rank's too (whatever the mesh size).
  std::optional<std::vector<int>> ranks;
  if (opt.rank >= 0) ranks = std::vector<int>{opt.rank};
  else if (opt.report || opt.json) ranks = std::vector<int>{};
  const job::PipelinePrograms pp = job::compile_pipeline(model, jo.plan, jo.mesh, po, ranks);
  compile_pipeline_command(opt, pp, *jo.plan.pipeline, jo.mesh);
}

void compile_command(const CompileCliOptions& opt) {
  const ir::Graph model = ir::parse_file(opt.files.model);
  if (opt.train) {
    compile_train_command(opt, model);
    return;
  }
  // The passes and the cross-rank check need one program per orbit (passes/rank_pipeline.h): with
  // --rank or a report only those (and the rank's own) are built, whatever the mesh size.
  job::JobOptions jo = job_options(opt.mesh, opt.passes, model);
  if (opt.rank >= 0) jo.ranks = {opt.rank};
  else if (opt.report || opt.json) jo.ranks = {jo.mesh.ranks().front()};
  const job::Job job = job::Job::compile(model, std::move(jo));
  if (job.pipeline()) {
    compile_pipeline_command(opt, *job.pipeline(), *job.options().plan.pipeline, job.mesh());
    return;
  }
  const sharding::CompiledModel& c = job.compiled();
  for (const auto& w : c.sharding.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (opt.report || opt.json) {
    nlohmann::json j = job::report_json(c, model);
    // The report of one rank: its own program only.
    if (opt.rank >= 0) j["ranks"] = nlohmann::json::array({job::program_json(job.program(opt.rank), opt.rank)});
    if (opt.json) std::printf("%s\n", j.dump(2).c_str());
    else print_report(j);
    return;
  }
  // The programs asked for: --rank's, or every rank's (the job then built them all).
  emit_programs(opt, opt.rank >= 0 ? std::vector<int>{opt.rank} : job.mesh().ranks(),
                [&](int r) -> const ir::Graph& { return job.program(r); });
}

void emit_programs(const CompileCliOptions& opt, const std::vector<int>& ranks,
                   const std::function<const ir::Graph&(int rank)>& program) {
  // The per-rank files appear together or not at all (dtensor/core/atomic_file.h).
  StagedFiles files;
  for (int r : ranks) {
    const std::string text = ir::print(program(r));
    if (!opt.output.empty()) {
      const std::string path = opt.rank >= 0 ? opt.output : rank_path(opt.output, r);
      refuse_output_over_input(path, {{"model", opt.files.model}, {"plan", opt.mesh.plan}});
      files.add(path, text);
    } else {
      if (ranks.size() > 1) std::printf("# rank %d\n", r);
      std::printf("%s", text.c_str());
    }
  }
  files.commit();
}

void setup(CLI::App& app) {
  static CompileCliOptions opt;
  CLI::App* cmd = app.add_subcommand("compile", "Shard a model with a parallel plan: print the per-rank programs");
  add_model_options(cmd, opt.files, {.weights_help = nullptr, .inputs_flag = nullptr});
  add_mesh_options(cmd, opt.mesh, {.what = "shard the model", .plan_required = true, .with_backend = false});
  cmd->add_option("--rank", opt.rank, "only this rank's program");
  cmd->add_option("-o,--output", opt.output, "write the program(s) here (FILE.rank<r>.dt per rank without --rank)");
  cmd->add_flag("--report", opt.report, "print the inserted collectives and per-rank parameter memory instead");
  cmd->add_flag("--json", opt.json, "print the report as JSON");
  cmd->add_flag("--train", opt.train,
                "a pipeline plan: the training step's programs (every micro-batch's forward and backward, one SGD "
                "update) instead of the forward's");
  cmd->add_option("--recompute", opt.recompute, "with --train: blocks recomputes each stage's blocks in its backward")
      ->capture_default_str();
  add_pass_options(cmd, opt.passes, /*with_print=*/true);
  cmd->callback([cmd] {
    refuse_unless(cmd, !opt.report && !opt.json, {"--output"},
                  "writes the programs, which --report and --json print a report instead of: drop one");
    refuse_unless(cmd, opt.train, {"--recompute"}, "applies to the training step: add --train");
    compile_command(opt);
  });
}

CommandRegistrar reg("compile", setup);

}  // namespace
}  // namespace dt::tools
