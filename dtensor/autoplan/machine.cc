#include "dtensor/autoplan/machine.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "dtensor/core/error.h"
#include "dtensor/core/json_text.h"
#include "dtensor/core/input_file.h"

namespace dt::autoplan {
namespace {

using nlohmann::json;

const char* const kKinds[] = {"all_gather", "all_reduce", "reduce_scatter", "all_to_all"};

void only_keys(const json& j, std::initializer_list<const char*> keys, const std::string& where) {
  if (!j.is_object()) DT_THROW(ValueError) << where << ": expected a json object";
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const char* k : keys) known |= key == k;
    if (!known) {
      std::string list;
      for (const char* k : keys) list += std::string(list.empty() ? "" : ", ") + k;
      DT_THROW(ValueError) << where << ": unknown key '" << key << "' (expected " << list << ")";
    }
  }
}

// A rate or latency: a finite number, > 0 (or >= 0 for latencies).
double number(const json& j, const char* key, const std::string& where, bool zero_ok, double fallback) {
  if (!j.contains(key)) return fallback;
  const json& v = j[key];
  const double x = v.is_number() ? v.get<double>() : NAN;
  if (!std::isfinite(x) || x < 0 || (!zero_ok && x == 0))
    DT_THROW(ValueError) << where << ": '" << key << "' must be a " << (zero_ok ? "non-negative" : "positive")
                         << " finite number, got " << v.dump();
  return x;
}

AlphaBeta alpha_beta(const json& j, const std::string& where, AlphaBeta fallback) {
  return {number(j, "alpha_us", where, true, fallback.alpha_us), number(j, "beta_gbs", where, false, fallback.beta_gbs)};
}

}  // namespace

MachineModel parse_machine(const std::string& text, const std::string& source) {
  json j = parse_json_text(text, source);
  only_keys(j, {"format", "gemm_gflops", "mem_gbs", "alpha_us", "beta_gbs", "collectives", "cluster", "calibration"},
            source);
  if (!j.contains("format") || j["format"] != kMachineFormat)
    DT_THROW(ValueError) << source << ": not a machine file: \"format\" must be \"" << kMachineFormat << "\"";
  MachineModel m;
  m.gemm_gflops = number(j, "gemm_gflops", source, false, m.gemm_gflops);
  m.mem_gbs = number(j, "mem_gbs", source, false, m.mem_gbs);
  const AlphaBeta base = alpha_beta(j, source, {m.comm.alpha_us, m.comm.beta_gbs});
  m.comm.alpha_us = base.alpha_us;
  m.comm.beta_gbs = base.beta_gbs;
  if (j.contains("collectives")) {
    const std::string where = source + ": collectives";
    only_keys(j["collectives"], {kKinds[0], kKinds[1], kKinds[2], kKinds[3]}, where);
    for (const auto& [kind, rows] : j["collectives"].items()) {
      const std::string at = where + "." + kind;
      if (!rows.is_array()) DT_THROW(ValueError) << at << ": expected a list of {group_size, alpha_us, beta_gbs}";
      for (const json& row : rows) {
        only_keys(row, {"group_size", "alpha_us", "beta_gbs"}, at);
        const json& g = row.contains("group_size") ? row["group_size"] : json();
        if (!g.is_number_integer() || g.get<int64_t>() < 2)
          DT_THROW(ValueError) << at << ": 'group_size' must be an integer >= 2, got " << g.dump();
        if (!row.contains("alpha_us") || !row.contains("beta_gbs"))
          DT_THROW(ValueError) << at << ": group size " << g.get<int64_t>() << " needs alpha_us and beta_gbs";
        auto [it, fresh] = m.comm.measured[kind].emplace(g.get<int64_t>(), alpha_beta(row, at, {}));
        if (!fresh) DT_THROW(ValueError) << at << ": group size " << g.get<int64_t>() << " listed twice";
      }
    }
  }
  if (j.contains("cluster")) {
    const std::string where = source + ": cluster";
    const json& c = j["cluster"];
    only_keys(c, {"ranks_per_host", "inter_host"}, where);
    const json& h = c.contains("ranks_per_host") ? c["ranks_per_host"] : json();
    if (!h.is_number_integer() || h.get<int64_t>() < 1)
      DT_THROW(ValueError) << where << ": 'ranks_per_host' must be an integer >= 1, got " << h.dump();
    if (!c.contains("inter_host")) DT_THROW(ValueError) << where << ": needs 'inter_host' {alpha_us, beta_gbs}";
    only_keys(c["inter_host"], {"alpha_us", "beta_gbs"}, where + ".inter_host");
    if (!c["inter_host"].contains("alpha_us") || !c["inter_host"].contains("beta_gbs"))
      DT_THROW(ValueError) << where << ".inter_host: needs alpha_us and beta_gbs";
    m.comm.ranks_per_host = h.get<int64_t>();
    m.comm.inter_host = alpha_beta(c["inter_host"], where + ".inter_host", {});
  }
  return m;
}

MachineModel load_machine(const std::string& path) { return parse_machine(read_input_file(path, "machine file"), path); }

std::string machine_json(const MachineModel& m, const std::string& calibration) {
  json j = json::object();
  j["format"] = kMachineFormat;
  j["gemm_gflops"] = m.gemm_gflops;
  j["mem_gbs"] = m.mem_gbs;
  j["alpha_us"] = m.comm.alpha_us;
  j["beta_gbs"] = m.comm.beta_gbs;
  if (!m.comm.measured.empty()) {
    json c = json::object();
    for (const auto& [kind, sizes] : m.comm.measured)
      for (const auto& [g, ab] : sizes) c[kind].push_back({{"group_size", g}, {"alpha_us", ab.alpha_us}, {"beta_gbs", ab.beta_gbs}});
    j["collectives"] = c;
  }
  if (m.comm.ranks_per_host > 0)
    j["cluster"] = {{"ranks_per_host", m.comm.ranks_per_host},
                    {"inter_host", {{"alpha_us", m.comm.inter_host.alpha_us}, {"beta_gbs", m.comm.inter_host.beta_gbs}}}};
  if (!calibration.empty()) j["calibration"] = json::parse(calibration);
  return j.dump(2) + "\n";
}

}  // namespace dt::autoplan
