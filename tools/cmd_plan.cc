// `dtensor plan`: the cheapest redistribution between two placement lists, as a table or JSON,
// optionally executed on the threads backend and checked against the reference chunks.
//
//   dtensor plan --mesh 2x4 --shape 1023x517 --dtype f32 --from 'S(0),S(1)' --to 'S(1),S(0)'
//   dtensor plan ... --json        {"steps": [...], "total_bytes": ..., "collectives": {...}}
//   dtensor plan ... --verify      also run it on 8 threads with random data ("verified": true)
//   dtensor plan ... --backward    plan the gradient's redistribution instead
#include <charconv>
#include <cmath>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dtensor/core/error.h"
#include "dtensor/eager/plan_check.h"
#include "dtensor/redistribute/backward.h"
#include "dtensor/redistribute/planner.h"
#include "dtensor/redistribute/pytorch_greedy.h"
#include "tools/command.h"

namespace dt::tools {
namespace {

struct PlanOptions {
  std::string mesh, shape, dtype = "f32", from, to;
  bool json = false, verify = false, backward = false;
  double alpha_us = CostModel{}.alpha_us, beta_gbs = CostModel{}.beta_gbs;
  uint64_t seed = 0;
};

// Parses "1023x517" (sizes may be 0; "scalar" or "" is a 0-d tensor).
Shape parse_shape(const std::string& text) {
  Shape shape;
  if (text.empty() || text == "scalar") return shape;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('x', pos);
    if (end == std::string::npos) end = text.size();
    int64_t v = -1;
    auto [p, ec] = std::from_chars(text.data() + pos, text.data() + end, v);
    if (end == pos || ec != std::errc() || p != text.data() + end || v < 0)
      DT_THROW(ValueError) << "bad shape '" << text << "': expected sizes joined by 'x' (e.g. 1023x517)";
    shape.push_back(v);
    pos = end + 1;
  }
  return shape;
}

nlohmann::json plan_json(const RedistributePlan& plan) {
  nlohmann::json steps = nlohmann::json::array();
  for (const RedistributeStep& s : plan.steps)
    steps.push_back({{"mesh_dim", s.mesh_dim},
                     {"mesh_dims", s.mesh_dims()},
                     {"kind", std::string(step_kind_name(s.kind))},
                     {"from", s.src.str()},
                     {"to", s.dst.str()},
                     {"bytes", s.bytes},
                     {"time_us", s.time_us}});
  return {{"mesh", plan.mesh_shape},
          {"shape", plan.shape},
          {"dtype", std::string(dtype_name(plan.dtype))},
          {"from", placements_str(plan.src)},
          {"to", placements_str(plan.dst)},
          {"steps", steps},
          {"total_bytes", plan.total_bytes},
          {"total_time_us", plan.total_time_us},
          {"collectives", plan.collective_counts()}};
}

void run_plan(const PlanOptions& opt) {
  if (!(opt.alpha_us >= 0) || !std::isfinite(opt.alpha_us) || !(opt.beta_gbs > 0) || !std::isfinite(opt.beta_gbs))
    DT_THROW(ValueError) << "cost model needs a finite --alpha-us >= 0 and --beta-gbs > 0, got " << opt.alpha_us << " and "
                         << opt.beta_gbs;
  DeviceMesh mesh = DeviceMesh::parse(opt.mesh);
  Shape shape = parse_shape(opt.shape);
  DType dtype = parse_dtype(opt.dtype);
  Placements from = parse_placements(opt.from), to = parse_placements(opt.to);
  RedistributePlanner planner(CostModel{opt.alpha_us, opt.beta_gbs});
  std::shared_ptr<const RedistributePlan> plan =
      opt.backward ? plan_backward(planner, mesh.shape(), from, to, shape, dtype)
                   : planner.plan(mesh.shape(), from, to, shape, dtype);
  auto greedy = pytorch_greedy_plan(mesh.shape(), plan->src, plan->dst, shape, dtype, planner.cost_model());

  std::string verify_error;
  // --verify materialises the tensor (and every rank's pieces) in this process.
  constexpr double kMaxVerifyBytes = double(1 << 30);
  if (opt.verify && double(itemsize(dtype)) * double(numel(shape)) > kMaxVerifyBytes)
    DT_THROW(ValueError) << "--verify runs the plan on random data in memory: " << shape_str(shape) << " "
                         << dtype_name(dtype) << " is " << fmt::format("{:.3g}", double(itemsize(dtype)) * double(numel(shape)) / (1 << 30))
                         << " GiB, more than the limit of 1 GiB";
  if (opt.verify) {
    verify_error = verify_plan(*plan, opt.seed);
    if (!verify_error.empty()) command_exit_code() = 1;
  }
  if (opt.json) {
    nlohmann::json j = plan_json(*plan);
    j["backward"] = opt.backward;
    j["cost_model"] = {{"alpha_us", opt.alpha_us}, {"beta_gbs", opt.beta_gbs}};
    if (greedy)
      j["pytorch_greedy"] = {{"total_bytes", greedy->total_bytes},
                             {"total_time_us", greedy->total_time_us},
                             {"collectives", greedy->collective_counts()}};
    if (opt.verify) {
      j["verified"] = verify_error.empty();
      if (!verify_error.empty()) j["verify_error"] = verify_error;
    }
    fmt::print("{}\n", j.dump(2));
    return;
  }
  if (opt.backward) fmt::print("backward: gradient laid out as {} goes back to {}\n", placements_str(plan->src),
                               placements_str(plan->dst));
  fmt::print("{}", plan->table());
  if (greedy)
    fmt::print("pytorch greedy order: {} bytes per rank, {} collective(s), {:.2f} us estimated\n", greedy->total_bytes,
               greedy->num_collectives(), greedy->total_time_us);
  if (opt.verify) {
    if (verify_error.empty())
      fmt::print("verified: true ({} ranks on the threads backend match the reference)\n", mesh.size());
    else
      fmt::print("verified: false: {}\n", verify_error);
  }
}

CommandRegistrar reg("plan", [](CLI::App& app) {
  auto opt = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand("plan", "Plan the cheapest redistribution between two placement lists");
  cmd->add_option("--mesh", opt->mesh, "Mesh shape, e.g. 2x4")->required();
  cmd->add_option("--shape", opt->shape, "Global tensor shape, e.g. 1023x517")->required();
  cmd->add_option("--dtype", opt->dtype, "Element type")->capture_default_str();
  cmd->add_option("--from", opt->from, "Source placements, e.g. 'S(0),S(1)'")->required();
  cmd->add_option("--to", opt->to, "Target placements, e.g. 'S(1),S(0)'")->required();
  cmd->add_flag("--json", opt->json, "Print JSON");
  cmd->add_flag("--verify", opt->verify, "Execute on the threads backend and check every rank (exit 1 if wrong)");
  cmd->add_flag("--backward", opt->backward, "Plan the gradient's redistribution (--to back to --from)");
  cmd->add_option("--alpha-us", opt->alpha_us, "Latency per collective (us)")->capture_default_str();
  cmd->add_option("--beta-gbs", opt->beta_gbs, "Bandwidth per rank (GB/s)")->capture_default_str();
  cmd->add_option("--seed", opt->seed, "Seed of the --verify data")->capture_default_str();
  cmd->callback([opt, cmd] {
    refuse_unless(cmd, opt->verify, {"--seed"}, "seeds the --verify data: add --verify");
    run_plan(*opt);
  });
});

}  // namespace
}  // namespace dt::tools
