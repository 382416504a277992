#include "tools/run_distributed.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "dtensor/core/error.h"
#include "dtensor/core/ops.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/io/tensor_binding.h"
#include "dtensor/ir/parser.h"
#include "dtensor/runtime/launcher.h"
#include "dtensor/runtime/trace.h"
#include "dtensor/sharding/compiler.h"
#include "dtensor/sharding/tensor_sharding.h"

namespace dt::tools {

bool run_distributed(const DistributedRunOptions& opt) {
  ir::Graph model = ir::parse_file(opt.model);
  if (!model.params().empty() && opt.weights.empty())
    DT_THROW(ValueError) << "model " << opt.model << " has " << model.params().size() << " parameters: pass --weights";
  if (!model.inputs().empty() && opt.inputs.empty())
    DT_THROW(ValueError) << "model " << opt.model << " has data inputs: pass --inputs";
  io::TensorMap weights, inputs;
  if (!opt.weights.empty()) weights = io::bind_params(model, io::SafetensorsFile::open(opt.weights));
  if (!opt.inputs.empty()) inputs = io::bind_inputs(model, io::SafetensorsFile::open(opt.inputs));
  const DeviceMesh mesh = DeviceMesh::parse(opt.mesh);
  const sharding::ParallelPlan plan = sharding::ParallelPlan::load(opt.plan);
  sharding::CompiledModel c = sharding::compile(model, plan, mesh);
  for (const auto& w : c.sharding.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());

  std::vector<const ir::Graph*> programs(size_t(mesh.size()), nullptr);
  std::vector<runtime::Bindings> bindings(size_t(mesh.size()));
  for (size_t i = 0; i < c.ranks.size(); ++i) {
    const int r = c.ranks[i];
    if (r < 0 || r >= mesh.size())
      DT_THROW(ValueError) << "mesh " << mesh.str() << " uses rank " << r << ": the threads backend runs ranks 0.."
                           << mesh.size() - 1;
    programs[size_t(r)] = &c.programs[i];
    bindings[size_t(r)] = sharding::shard_weights(model, c.sharding, weights, r);
    for (auto& [k, v] : sharding::shard_inputs(model, c.sharding, inputs, r)) bindings[size_t(r)][k] = v;
  }
  for (size_t i = 0; i < c.programs.size(); ++i) run_pass_pipeline(c.programs[i], opt.passes, c.ranks[i]);
  runtime::LaunchOptions lo;
  lo.repeat = opt.repeat;
  std::unique_ptr<runtime::TraceRecorder> trace;
  if (!opt.trace.empty()) {
    trace = std::make_unique<runtime::TraceRecorder>(mesh.size());
    lo.node_hook = [&](int rank) { return trace->hook(rank); };
  }
  std::vector<runtime::RankResult> results = runtime::launch(programs, bindings, lo);
  if (trace) trace->write(opt.trace);
  std::vector<Tensor> outputs;
  for (size_t k = 0; k < model.outputs().size(); ++k) {
    std::vector<Tensor> locals;
    for (auto& r : results) locals.push_back(r.outputs[k]);
    outputs.push_back(sharding::assemble_tensor(locals, mesh, c.sharding.outputs[k], model.outputs()[k]->type.shape));
  }

  // The reference: --expect's `output` for output 0, else a single-device run of every output.
  std::vector<Tensor> reference;
  std::string compared_with;
  double single_ms = 0;
  if (!opt.expect.empty()) {
    reference.push_back(io::SafetensorsFile::open(opt.expect).get("output"));
    compared_with = opt.expect;
  } else {
    runtime::Bindings full = weights;
    for (auto& [k, v] : inputs) full[k] = v;
    auto single = runtime::launch({&model}, {full}, lo);
    reference = single[0].outputs;
    single_ms = single[0].stats.seconds * 1e3;
    compared_with = "single-device run";
  }
  nlohmann::json j;
  j["model"] = opt.model;
  j["plan"] = opt.plan;
  j["mesh"] = mesh.str();
  j["ranks"] = mesh.size();
  j["compared_with"] = compared_with;
  bool match = true;
  double max_abs = 0, max_rel = 0;
  nlohmann::json outs = nlohmann::json::array();
  for (size_t k = 0; k < reference.size() && k < outputs.size(); ++k) {
    DiffReport d = compare(outputs[k], reference[k], opt.rtol, opt.atol);
    const bool ok = d.shapes_match && d.mismatches == 0;
    match = match && ok;
    max_abs = std::max(max_abs, d.max_abs_diff);
    max_rel = std::max(max_rel, d.max_rel_diff);
    outs.push_back({{"name", model.outputs()[k]->name}, {"max_abs_diff", d.max_abs_diff}, {"match", ok}});
  }
  j["outputs"] = outs;
  j["max_abs_diff"] = max_abs;
  j["max_rel_diff"] = max_rel;
  j["match"] = match;
  j["rtol"] = opt.rtol;
  j["atol"] = opt.atol;
  double time_ms = 0;
  nlohmann::json per_rank = nlohmann::json::array();
  std::map<std::string, int> kinds;
  for (size_t i = 0; i < c.ranks.size(); ++i) {
    const int r = c.ranks[i];
    sharding::CollectiveStats s = sharding::collective_stats(c.programs[i], r);
    const auto& st = results[size_t(r)].stats;
    time_ms = std::max(time_ms, st.seconds * 1e3);
    if (i == 0) kinds = s.count;
    per_rank.push_back({{"rank", r},
                        {"time_ms", st.seconds * 1e3},
                        {"peak_bytes", st.peak_bytes},
                        {"param_bytes", sharding::param_bytes(c.programs[i])},
                        {"bytes_sent", s.total_bytes},
                        {"collectives", s.total}});
  }
  j["time_ms"] = time_ms;
  if (single_ms > 0) j["single_device_time_ms"] = single_ms;
  j["collectives_per_kind"] = kinds;
  j["per_rank"] = per_rank;
  j["compile_ms"] = c.propagate_ms + c.partition_ms;

  if (opt.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return match;
  }
  std::printf("model %s with plan %s on mesh %s (%lld ranks, threads backend): %.3f ms", opt.model.c_str(),
              opt.plan.c_str(), mesh.str().c_str(), (long long)mesh.size(), time_ms);
  if (single_ms > 0) std::printf(" (single device %.3f ms)", single_ms);
  std::printf(", compile %.3f ms\n", c.propagate_ms + c.partition_ms);
  std::string kinds_text;
  for (const auto& [k, n] : kinds) kinds_text += fmt::format("{}{} {}", kinds_text.empty() ? "" : ", ", n, k);
  std::printf("collectives per rank: %s\n", kinds_text.empty() ? "none" : kinds_text.c_str());
  for (const auto& r : per_rank)
    std::printf("  rank %d: %.3f ms, peak %.2f MiB, parameters %.1f KiB, sends %lld bytes\n", r["rank"].get<int>(),
                r["time_ms"].get<double>(), r["peak_bytes"].get<double>() / (1 << 20),
                r["param_bytes"].get<double>() / 1024, (long long)r["bytes_sent"].get<int64_t>());
  std::printf("compared with %s: max_abs_diff %.3g, max_rel_diff %.3g (rtol %g, atol %g): %s\n", compared_with.c_str(),
              max_abs, max_rel, opt.rtol, opt.atol, match ? "match" : "MISMATCH");
  return match;
}

}  // namespace dt::tools
