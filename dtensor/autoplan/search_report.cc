// The search result as a person reads it (`plan-search --explain`) and as a program does (`--json`).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "dtensor/autoplan/search.h"
#include "dtensor/core/byte_units.h"

namespace dt::autoplan {

std::string explain(const SearchResult& r) {
  std::string out;
  const Estimate& e = r.estimate;
  out += fmt::format("roles: {}\n", fmt::join(r.plan.mesh_dims, " x "));
  out += fmt::format("estimated step: {:.1f} us (compute {:.1f} us", e.step_us, e.compute_us);
  for (const auto& [k, us] : e.comm_us) out += fmt::format(", {} {:.1f} us", k, us);
  out += fmt::format("); lower bound {:.1f} us\n", r.lower_bound_us);
  if (e.peak_bytes >= 0)
    out += fmt::format("per-rank memory: {} (parameters {}, activations {}; after the passes, memory budget {})\n",
                       bytes_text(e.peak_bytes), bytes_text(e.param_bytes), bytes_text(e.activation_bytes),
                       bytes_text(int64_t(r.pass_options.memory_budget_bytes)));
  out += fmt::format("candidates costed: {} (method {}: {})\n", r.evaluated, r.method,
                     r.method == "exact"      ? "every plan of the search space: the optimum under the cost model"
                     : r.method == "chain-dp" ? "dynamic program over the chain of modules: the optimum under the cost model"
                                              : "coordinate descent: a local optimum, judge it by the lower bound");
  out += "mesh roles tried:\n";
  for (const auto& [label, a] : r.role_alternatives)
    out += fmt::format("  {:<12} {} ({})\n", label,
                       a.rejected.empty() ? fmt::format("{:.1f} us", a.step_us) : "rejected: " + a.rejected,
                       a.method.empty() ? "not searched" : a.method);
  out += "decisions (module, mesh dim: chosen; alternatives with the plan's step time):\n";
  for (const ModuleDecision& d : r.decisions) {
    out += fmt::format("  {} on {}: {}\n", d.pattern, d.mesh_dim, d.chosen);
    for (const Alternative& a : d.alternatives) {
      out += fmt::format("      {:<10} ", a.style);
      if (!a.rejected.empty() && a.step_us == 0) out += "rejected: " + a.rejected;
      else {
        out += fmt::format("{:.1f} us", a.step_us);
        if (a.peak_bytes >= 0) out += ", " + bytes_text(a.peak_bytes);
        if (!a.rejected.empty()) out += " (" + a.rejected + ")";
      }
      out += "\n";
    }
  }
  return out;
}

std::string to_json(const SearchResult& r) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["plan"] = ordered_json::parse(r.plan.to_json());
  const Estimate& e = r.estimate;
  ordered_json est;
  est["estimated_step_us"] = e.step_us;
  est["compute_us"] = e.compute_us;
  est["comm_us"] = e.comm_us;
  if (e.peak_bytes >= 0) {
    est["estimated_peak_bytes"] = e.peak_bytes;
    est["param_bytes"] = e.param_bytes;
    est["activation_bytes"] = e.activation_bytes;
    est["pass_memory_budget_bytes"] = r.pass_options.memory_budget_bytes;
  }
  est["lower_bound_us"] = r.lower_bound_us;
  j["estimate"] = est;
  j["candidates_costed"] = r.evaluated;
  j["exact"] = r.exact;
  j["method"] = r.method;
  ordered_json roles = ordered_json::array();
  for (const auto& [label, a] : r.role_alternatives) {
    ordered_json x;
    x["mesh_dims"] = label;
    if (!a.method.empty()) x["method"] = a.method;
    if (a.rejected.empty()) x["step_us"] = a.step_us;
    else x["rejected"] = a.rejected;
    roles.push_back(x);
  }
  j["roles_tried"] = roles;
  ordered_json ds = ordered_json::array();
  for (const ModuleDecision& d : r.decisions) {
    ordered_json x;
    x["pattern"] = d.pattern;
    x["mesh_dim"] = d.mesh_dim;
    x["chosen"] = d.chosen;
    ordered_json alts = ordered_json::array();
    for (const Alternative& a : d.alternatives) {
      ordered_json y;
      y["style"] = a.style;
      y["step_us"] = a.step_us;
      if (a.peak_bytes >= 0) y["peak_bytes"] = a.peak_bytes;
      if (!a.rejected.empty()) y["rejected"] = a.rejected;
      alts.push_back(y);
    }
    x["alternatives"] = alts;
    ds.push_back(x);
  }
  j["decisions"] = ds;
  return j.dump(2) + "\n";
}

}  // namespace dt::autoplan
