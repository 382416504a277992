#include "dtensor/passes/pass_manager.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>

#include "dtensor/core/error.h"
#include "dtensor/ir/printer.h"
#include "dtensor/ir/verifier.h"

namespace dt::passes {
namespace {

class FunctionPass final : public Pass {
 public:
  FunctionPass(std::string_view name, std::string_view summary, std::function<bool(ir::Graph&)> run)
      : name_(name), summary_(summary), run_(std::move(run)) {}
  std::string_view name() const override { return name_; }
  std::string_view summary() const override { return summary_; }
  bool run(ir::Graph& graph) override { return run_(graph); }

 private:
  std::string_view name_, summary_;
  std::function<bool(ir::Graph&)> run_;
};

PassPtr wait_placement(const PassOptions&) { return make_wait_placement_pass(); }
PassPtr dce(const PassOptions&) { return make_dce_pass(); }
PassPtr cse(const PassOptions&) { return make_cse_pass(); }
PassPtr plan_comm_buffers(const PassOptions&) { return make_plan_comm_buffers_pass(); }
PassPtr reshard_after_forward(const PassOptions&) { return make_reshard_after_forward_pass(); }

}  // namespace

PassPtr make_pass(std::string_view name, std::string_view summary, std::function<bool(ir::Graph&)> run) {
  return std::make_unique<FunctionPass>(name, summary, std::move(run));
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

const std::vector<PassInfo>& registered_passes() {
  // Each pass declares its name and summary once, in its own class; the registry reads them from
  // an instance (the literals they return live as long as the program).
  static const std::vector<PassInfo> passes = [] {
    const std::vector<PassPtr (*)(const PassOptions&)> factories = {
        cse, dce, reshard_after_forward, make_bucket_all_gather_pass, make_bucket_reduce_scatter_pass, make_bucket_all_reduce_pass,
        make_tp_overlap_pass, make_overlap_scheduling_pass, wait_placement, make_comm_lowering_pass, plan_comm_buffers};
    std::vector<PassInfo> out;
    for (auto make : factories) {
      PassPtr pass = make(PassOptions{});
      out.push_back({pass->name(), pass->summary(), make});
    }
    return out;
  }();
  return passes;
}

const std::vector<std::string_view>& default_pipeline() {
  static const std::vector<std::string_view> names = {
      "cse", "dce", "reshard-after-forward", "bucket-all-gather", "bucket-reduce-scatter", "bucket-all-reduce",
      "tp-overlap", "overlap-scheduling", "wait-placement", "comm-lowering", "dce", "plan-comm-buffers"};
  return names;
}

std::vector<PassPtr> parse_pipeline(std::string_view spec, const PassOptions& options) {
  std::vector<PassPtr> out;
  spec = trim(spec);
  if (spec == "none") return out;
  std::vector<std::string_view> names;
  if (spec == "default") {
    names = default_pipeline();
  } else {
    size_t start = 0;
    while (true) {
      size_t comma = spec.find(',', start);
      std::string_view name = trim(spec.substr(start, comma == std::string_view::npos ? spec.npos : comma - start));
      if (name.empty()) DT_THROW(ValueError) << "empty pass name in pipeline '" << spec << "'";
      names.push_back(name);
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
  }
  for (std::string_view name : names) {
    const PassInfo* found = nullptr;
    for (const PassInfo& info : registered_passes())
      if (info.name == name) found = &info;
    if (!found) {
      std::string known;
      for (const PassInfo& info : registered_passes()) known += fmt::format("{}{}", known.empty() ? "" : ", ", info.name);
      DT_THROW(ValueError) << "unknown pass '" << name << "' (known passes: " << known << "; or default, none)";
    }
    out.push_back(found->make(options));
  }
  return out;
}

void PassManager::add(std::vector<PassPtr> passes) {
  for (PassPtr& p : passes) passes_.push_back(std::move(p));
}

PassTiming PassManager::run_one(Pass& pass, ir::Graph& graph) {
  auto t0 = std::chrono::steady_clock::now();
  bool changed = pass.run(graph);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The verifier blames the pass itself (InternalError naming it): nothing here re-wraps an error.
  if (verify_each_) ir::verify(graph, {.after_pass = pass.name()});
  if (print_to_) *print_to_ << "// -----// IR after " << pass.name() << " //----- //\n" << ir::print(graph);
  return {std::string(pass.name()), s, changed};
}

std::vector<PassTiming> PassManager::run(ir::Graph& graph) {
  std::vector<PassTiming> timings;
  for (PassPtr& pass : passes_) timings.push_back(run_one(*pass, graph));
  return timings;
}

void PassManager::run_all(std::span<ir::Graph* const> programs, std::span<const std::string> headers,
                          const std::function<void(std::string_view)>& after_each) {
  for (PassPtr& pass : passes_) {
    for (size_t i = 0; i < programs.size(); ++i) {
      if (print_to_ && i < headers.size()) *print_to_ << headers[i];
      run_one(*pass, *programs[i]);
    }
    if (after_each) after_each(pass->name());
  }
}

std::vector<double> parse_bucket_caps(std::string_view text) {
  std::vector<double> caps;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string item(trim(text.substr(start, comma == std::string_view::npos ? text.npos : comma - start)));
    char* end = nullptr;
    double v = item.empty() ? 0 : std::strtod(item.c_str(), &end);
    // At most 1 TiB: larger (inf, 1e30) would overflow the byte count and act as the smallest cap.
    if (item.empty() || !end || *end != '\0' || !(v > 0) || !(v <= kMaxBucketCapMb))
      DT_THROW(ValueError) << "bucket cap '" << item << "' in '" << text << "' is not a number of MiB in (0, "
                           << fmt::format("{}", kMaxBucketCapMb) << "]";
    caps.push_back(v);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return caps;
}

}  // namespace dt::passes
