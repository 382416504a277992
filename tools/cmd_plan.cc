// `dtensor plan`: the cheapest redistribution between two placement lists, as a table or JSON,
// optionally executed on the threads backend and checked against the reference chunks.
//
//   dtensor plan --mesh 2x4 --shape 1023x517 --dtype f32 --from 'S(0),S(1)' --to 'S(1),S(0)'
//   dtensor plan ... --json        {"steps": [...], "total_bytes": ..., "collectives": {...}}
//   dtensor plan ... --verify      also run it on 8 threads with random data ("verified": true)
//   dtensor plan ... --backward    plan the gradient's redistribution instead
//   dtensor plan ... --machine M   price collectives with a machine file (dtensor calibrate)
//   dtensor plan --from-mesh 2x2 --to-mesh 4 --shape 10x6 --from 'S(0),R' --to 'S(1)' [--verify]
//                                  a cross-mesh transfer: the source mesh holds ranks 0..a-1, the
//                                  destination the next b ranks (pipeline stages); point-to-point
//                                  pieces instead of collectives
#include <charconv>
#include <cmath>
#include <mutex>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dtensor/autoplan/machine.h"
#include "dtensor/core/error.h"
#include "dtensor/eager/plan_check.h"
#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/redistribute/backward.h"
#include "dtensor/redistribute/cross_mesh.h"
#include "dtensor/redistribute/planner.h"
#include "dtensor/redistribute/pytorch_greedy.h"
#include "tools/command.h"

namespace dt::tools {
namespace {

struct PlanOptions {
  std::string mesh, from_mesh, to_mesh, shape, dtype = "f32", from, to;
  std::string machine;  // a machine file (autoplan/machine.h): its collective α–β replace --alpha-us/--beta-gbs
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

// Returns rank r's block of `full` under `spec`.
Tensor block_of(const Tensor& full, const DTensorSpec& spec, int r) {
  Shape offset = spec.global_offset(r), shape = spec.local_shape(r);
  Tensor v = full;
  for (size_t d = 0; d < shape.size(); ++d) v = v.narrow(int64_t(d), offset[d], shape[d]);
  return v.contiguous();
}

// Runs `plan` on the threads backend from seeded random data; returns "" when every destination
// rank holds its block and the bytes moved are the planned bytes, else what differs.
std::string verify_cross_mesh(const CrossMeshPlan& plan, int world_size, uint64_t seed) {
  Tensor full = exact_random(plan.from.shape(), plan.from.dtype(), seed);
  std::mutex mu;
  std::string error;
  int64_t sent = 0;
  run_ranks(world_size, [&](ProcessGroup& world) {
    const int me = world.rank();
    Tensor mine = plan.from.mesh().contains(me) ? block_of(full, plan.from, me) : Tensor();
    CrossMeshResult r = execute_cross_mesh(plan, mine, world);
    std::lock_guard<std::mutex> lock(mu);
    sent += r.bytes_sent;
    if (plan.to.mesh().contains(me) && error.empty() &&
        r.local.to_doubles() != block_of(full, plan.to, me).to_doubles())
      error = fmt::format("rank {} does not hold its block of {}", me, plan.to.str());
  });
  if (error.empty() && sent != plan.bytes())
    error = fmt::format("{} bytes moved but {} planned", sent, plan.bytes());
  return error;
}

void run_cross_mesh_plan(const PlanOptions& opt) {
  DeviceMesh a = DeviceMesh::parse(opt.from_mesh), b = DeviceMesh::parse(opt.to_mesh);
  std::vector<int> dst_ranks;
  for (int r = 0; r < int(b.size()); ++r) dst_ranks.push_back(int(a.size()) + r);
  DeviceMesh to_mesh(b.shape(), dst_ranks);
  Shape shape = parse_shape(opt.shape);
  DType dtype = parse_dtype(opt.dtype);
  DTensorSpec from(a, parse_placements(opt.from), shape, dtype), to(to_mesh, parse_placements(opt.to), shape, dtype);
  CrossMeshPlan plan = plan_cross_mesh(from, to);
  constexpr double kMaxVerifyBytes = double(1 << 30);
  if (opt.verify && double(itemsize(dtype)) * double(numel(shape)) > kMaxVerifyBytes)
    DT_THROW(ValueError) << "--verify runs the transfer on random data in memory: " << shape_str(shape)
                         << " is more than the limit of 1 GiB";
  std::string verify_error;
  if (opt.verify) {
    verify_error = verify_cross_mesh(plan, int(a.size() + b.size()), opt.seed);
    if (!verify_error.empty()) command_exit_code() = 1;
  }
  if (opt.json) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const CrossMeshPiece& p : plan.pieces)
      pieces.push_back({{"src", p.src}, {"dst", p.dst}, {"begin", p.begin}, {"end", p.end},
                        {"bytes", p.numel() * int64_t(itemsize(dtype))}});
    nlohmann::json j = {{"from", from.str()}, {"to", to.str()}, {"pieces", pieces}, {"total_bytes", plan.bytes()}};
    if (opt.verify) {
      j["verified"] = verify_error.empty();
      if (!verify_error.empty()) j["verify_error"] = verify_error;
    }
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print("{} -> {}\n", from.str(), to.str());
  fmt::print("{:>5} {:>5}  {:<24} {:>12}\n", "src", "dst", "box", "bytes");
  for (const CrossMeshPiece& p : plan.pieces) {
    std::string box = "[";
    for (size_t d = 0; d < p.begin.size(); ++d) box += fmt::format("{}{}:{}", d ? ", " : "", p.begin[d], p.end[d]);
    fmt::print("{:>5} {:>5}  {:<24} {:>12}\n", p.src, p.dst, box + "]", p.numel() * int64_t(itemsize(dtype)));
  }
  fmt::print("total: {} pieces, {} bytes\n", plan.pieces.size(), plan.bytes());
  if (opt.verify) {
    if (verify_error.empty())
      fmt::print("verified: true ({} ranks on the threads backend hold their blocks)\n", a.size() + b.size());
    else
      fmt::print("verified: false: {}\n", verify_error);
  }
}

void run_plan(const PlanOptions& opt) {
  if (!(opt.alpha_us >= 0) || !std::isfinite(opt.alpha_us) || !(opt.beta_gbs > 0) || !std::isfinite(opt.beta_gbs))
    DT_THROW(ValueError) << "cost model needs a finite --alpha-us >= 0 and --beta-gbs > 0, got " << opt.alpha_us << " and "
                         << opt.beta_gbs;
  DeviceMesh mesh = DeviceMesh::parse(opt.mesh);
  Shape shape = parse_shape(opt.shape);
  DType dtype = parse_dtype(opt.dtype);
  Placements from = parse_placements(opt.from), to = parse_placements(opt.to);
  CostModel model{opt.alpha_us, opt.beta_gbs};
  if (!opt.machine.empty()) model = autoplan::load_machine(opt.machine).comm;
  RedistributePlanner planner(model);
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
    j["cost_model"] = {{"alpha_us", model.alpha_us}, {"beta_gbs", model.beta_gbs}};
    if (!opt.machine.empty()) j["cost_model"]["machine"] = opt.machine;
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
  cmd->add_option("--mesh", opt->mesh, "Mesh shape, e.g. 2x4");
  cmd->add_option("--from-mesh", opt->from_mesh, "Cross-mesh transfer: the source mesh (ranks 0..), e.g. 2x2");
  cmd->add_option("--to-mesh", opt->to_mesh, "Cross-mesh transfer: the destination mesh (the next ranks), e.g. 4");
  cmd->add_option("--shape", opt->shape, "Global tensor shape, e.g. 1023x517")->required();
  cmd->add_option("--dtype", opt->dtype, "Element type")->capture_default_str();
  cmd->add_option("--from", opt->from, "Source placements, e.g. 'S(0),S(1)'")->required();
  cmd->add_option("--to", opt->to, "Target placements, e.g. 'S(1),S(0)'")->required();
  cmd->add_flag("--json", opt->json, "Print JSON");
  cmd->add_flag("--verify", opt->verify, "Execute on the threads backend and check every rank (exit 1 if wrong)");
  cmd->add_flag("--backward", opt->backward, "Plan the gradient's redistribution (--to back to --from)");
  cmd->add_option("--alpha-us", opt->alpha_us, "Latency per collective (us)")->capture_default_str();
  cmd->add_option("--beta-gbs", opt->beta_gbs, "Bandwidth per rank (GB/s)")->capture_default_str();
  cmd->add_option("--machine", opt->machine,
                  "Price collectives with a machine file's α–β per kind and group size (dtensor calibrate)");
  cmd->add_option("--seed", opt->seed, "Seed of the --verify data")->capture_default_str();
  cmd->callback([opt, cmd] {
    refuse_unless(cmd, opt->verify, {"--seed"}, "seeds the --verify data: add --verify");
    refuse_unless(cmd, opt->machine.empty(), {"--alpha-us", "--beta-gbs"}, "is replaced by --machine: drop one");
    const bool cross = !opt->from_mesh.empty() || !opt->to_mesh.empty();
    if (cross) {
      if (opt->from_mesh.empty() || opt->to_mesh.empty())
        DT_THROW(ValueError) << "a cross-mesh transfer needs both --from-mesh and --to-mesh";
      refuse_unless(cmd, false, {"--mesh"}, "is for a redistribution on one mesh, not with --from-mesh/--to-mesh");
      refuse_unless(cmd, false, {"--backward", "--alpha-us", "--beta-gbs", "--machine"},
                    "applies to a redistribution on one mesh");
      run_cross_mesh_plan(*opt);
      return;
    }
    if (opt->mesh.empty()) DT_THROW(ValueError) << "--mesh is required (or --from-mesh and --to-mesh)";
    run_plan(*opt);
  });
});

}  // namespace
}  // namespace dt::tools
