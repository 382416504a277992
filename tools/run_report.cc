#include "tools/run_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "dtensor/core/error.h"
#include "dtensor/io/sharded_checkpoint.h"
#include "dtensor/runtime/launcher.h"
#include "tools/byte_units.h"
#include "tools/output_check.h"

namespace dt::tools {
namespace {

// --save-outputs DIR --sharded: each rank's local outputs, with their placements and full shapes
// (io/sharded_checkpoint.h), so that `--expect DIR` assembles them again.
void save_rank_outputs(const std::string& dir, const RunOptions& opt, const job::Job& job,
                       const std::vector<std::vector<Tensor>>& locals) {
  io::ShardedCheckpoint ckpt{job.mesh(), opt.mesh.plan, std::vector<io::TensorMap>(size_t(job.mesh().size())), {}, {}, {}};
  for (size_t k = 0; k < locals.size(); ++k) {
    const ir::Value* v = job.graph().outputs()[k];
    ckpt.placements[v->name] = placements_str(job.sharding().outputs[k]);
    ckpt.shapes[v->name] = v->type.shape;
    for (size_t r = 0; r < locals[k].size(); ++r) ckpt.local[r][v->name] = locals[k][r];
  }
  io::write_sharded_checkpoint(dir, ckpt);
}

}  // namespace

bool report_sharded_run(const RunOptions& opt, const job::Job& job, const job::RunResult& result,
                        const job::Weights& weights, const job::TensorMap& inputs) {
  const ir::Graph& model = job.graph();
  const DeviceMesh& mesh = job.mesh();
  const std::vector<Tensor>& outputs = result.outputs;
  // The reference: the outputs --expect names, else a single-device run of every output.
  std::vector<std::optional<Tensor>> reference;
  std::string compared_with;
  double single_ms = 0;
  if (!opt.expect.empty()) {
    reference = expected_outputs(model, opt.expect);
    compared_with = opt.expect;
  } else {
    runtime::Bindings full = weights.full_tensors();
    for (auto& [k, v] : inputs) full[k] = v;
    runtime::LaunchOptions lo;
    lo.repeat = opt.repeat;
    auto single = runtime::launch({&model}, {full}, lo);
    for (Tensor& t : single[0].outputs) reference.emplace_back(std::move(t));
    single_ms = single[0].stats.seconds * 1e3;
    compared_with = "single-device run";
  }
  nlohmann::json j;
  j["model"] = opt.files.model;
  j["plan"] = opt.mesh.plan;
  j["mesh"] = mesh.str();
  j["ranks"] = mesh.size();
  j["backend"] = runtime::backend_name(job.options().backend);
  j["compared_with"] = compared_with;
  const OutputCheck check = check_outputs(model, outputs, reference, opt.rtol, opt.atol);
  const bool match = check.match;
  const double max_abs = check.max_abs_diff, max_rel = check.max_rel_diff;
  if (!opt.save_outputs.empty()) {
    if (opt.sharded_outputs) save_rank_outputs(opt.save_outputs, opt, job, result.locals);
    else save_outputs(opt.save_outputs, model, outputs);
    j["saved_outputs"] = opt.save_outputs;
  }
  if (!opt.trace.empty()) j["trace"] = opt.trace;
  const nlohmann::json& outs = check.outputs;
  j["outputs"] = outs;
  j["max_abs_diff"] = max_abs;
  j["max_rel_diff"] = max_rel;
  j["match"] = match;
  j["rtol"] = opt.rtol;
  j["atol"] = opt.atol;
  double time_ms = 0;
  nlohmann::json per_rank = nlohmann::json::array();
  for (const job::RankStats& r : result.ranks) {
    time_ms = std::max(time_ms, r.time_ms);
    per_rank.push_back({{"rank", r.rank},
                        {"time_ms", r.time_ms},
                        {"peak_bytes", int64_t(r.peak_bytes)},
                        {"param_bytes", r.param_bytes},
                        {"bytes_sent", r.bytes_sent},
                        {"collectives", int64_t(r.collectives)}});
  }
  j["time_ms"] = time_ms;
  if (single_ms > 0) j["single_device_time_ms"] = single_ms;
  const std::map<std::string, int>& kinds = result.collectives_per_kind;
  j["collectives_per_kind"] = kinds;
  j["per_rank"] = per_rank;
  const double compile_ms = job.compiled().propagate_ms + job.compiled().partition_ms;
  j["compile_ms"] = compile_ms;

  if (opt.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return match;
  }
  std::printf("model %s with plan %s on mesh %s (%lld %s, %s backend): %.3f ms", opt.files.model.c_str(),
              opt.mesh.plan.c_str(), mesh.str().c_str(), (long long)mesh.size(), mesh.size() == 1 ? "rank" : "ranks",
              std::string(runtime::backend_name(job.options().backend)).c_str(), time_ms);
  if (single_ms > 0) std::printf(" (single device %.3f ms)", single_ms);
  std::printf(", compile %.3f ms\n", compile_ms);
  std::string kinds_text;
  for (const auto& [k, n] : kinds) kinds_text += fmt::format("{}{} {}", kinds_text.empty() ? "" : ", ", n, k);
  std::printf("collectives per rank: %s\n", kinds_text.empty() ? "none" : kinds_text.c_str());
  for (const auto& r : per_rank)
    std::printf("  rank %d: %.3f ms, peak %s, parameters %s, sends %s\n", r["rank"].get<int>(),
                r["time_ms"].get<double>(), bytes_text(double(r["peak_bytes"].get<int64_t>())).c_str(),
                bytes_text(double(r["param_bytes"].get<int64_t>())).c_str(),
                bytes_text(double(r["bytes_sent"].get<int64_t>())).c_str());
  for (const std::string& line : check.lines) std::printf("%s\n", line.c_str());
  if (!opt.save_outputs.empty() && opt.sharded_outputs)
    std::printf("saved each rank's %zu local outputs to %s/rank<r>.safetensors (placements in their metadata)\n",
                outputs.size(), opt.save_outputs.c_str());
  else if (!opt.save_outputs.empty())
    std::printf("saved %zu outputs to %s\n", outputs.size(), opt.save_outputs.c_str());
  if (!opt.trace.empty()) std::printf("wrote trace %s (one track per rank)\n", opt.trace.c_str());
  std::printf("compared with %s: max_abs_diff %.3g, max_rel_diff %.3g (rtol %g, atol %g): %s\n", compared_with.c_str(),
              max_abs, max_rel, opt.rtol, opt.atol, match ? "match" : "MISMATCH");
  return match;
}


}  // namespace dt::tools
