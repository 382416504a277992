#include "dtensor/autoplan/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <cstdio>

#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/passes/pass_manager.h"
#include "dtensor/passes/rank_pipeline.h"
#include "dtensor/sharding/train_step_placement.h"

namespace dt::autoplan {
namespace {

constexpr int kMaxSweeps = 4;
using sharding::Style;

// The styles a role offers, in the order tried (replicate first: the starting point).
const std::vector<Style>& role_styles(const std::string& role) {
  static const std::vector<Style> dp = {Style::replicate, Style::fsdp};
  static const std::vector<Style> tp = {Style::replicate, Style::colwise, Style::rowwise, Style::sequence,
                                        Style::fsdp};
  return role == "tp" ? tp : dp;
}

int fsdp_index(const std::string& role) {
  const auto& st = role_styles(role);
  return int(std::find(st.begin(), st.end(), Style::fsdp) - st.begin());
}

// Shell glob with `*` crossing dots (the plan's pattern language).
bool glob_match(std::string_view pat, std::string_view s) {
  size_t p = 0, i = 0, star = std::string_view::npos, mark = 0;
  while (i < s.size()) {
    if (p < pat.size() && pat[p] != '*' && pat[p] == s[i]) { ++p; ++i; }
    else if (p < pat.size() && pat[p] == '*') { star = p++; mark = i; }
    else if (star != std::string_view::npos) { p = star + 1; i = ++mark; }
    else return false;
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
}

// A module name with every all-digit component replaced by `*` (h.3.attn -> h.*.attn).
std::string block_pattern(const std::string& module) {
  std::string out, part;
  auto flush = [&] {
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    out += digits ? "*" : part;
    part.clear();
  };
  for (char c : module) {
    if (c == '.') { flush(); out += '.'; }
    else part += c;
  }
  flush();
  return out;
}

// Module classes: modules of repeated blocks with identical parameters, decided once.
struct ModuleClass {
  std::string pattern;
  std::vector<std::string> modules;
};

std::vector<ModuleClass> module_classes(const ir::Graph& g) {
  std::vector<std::string> order;                            // modules, first appearance
  std::map<std::string, std::string> signature;              // module -> its params' suffixes and types
  for (const ir::Value* p : g.params()) {
    const std::string m = sharding::module_of(p->name);
    if (!signature.count(m)) order.push_back(m);
    signature[m] += p->name.substr(m.size()) + ":" + ir::type_str(p->type) + ";";
  }
  std::vector<ModuleClass> classes;
  std::map<std::string, size_t> by_key;
  for (const std::string& m : order) {
    const std::string key = block_pattern(m) + "|" + signature[m];
    auto [it, fresh] = by_key.emplace(key, classes.size());
    if (fresh) classes.push_back({block_pattern(m), {}});
    classes[it->second].modules.push_back(m);
  }
  // A glob that also matches modules outside its class (different shapes, or another block
  // layout) is replaced by the class's names, one entry each.
  std::vector<ModuleClass> out;
  for (ModuleClass& c : classes) {
    bool exact = true;
    for (const std::string& m : order)
      if (glob_match(c.pattern, m) && std::find(c.modules.begin(), c.modules.end(), m) == c.modules.end()) exact = false;
    if (c.pattern.find('*') == std::string::npos || exact) {
      out.push_back(std::move(c));
      continue;
    }
    for (const std::string& m : c.modules) out.push_back({m, {m}});
  }
  return out;
}

struct Eval {
  bool ok = false;
  std::string why;  // rejected: the reason
  Estimate est;
  int64_t excess = 0;  // bytes over the memory limit
  size_t budget = 0;   // the passes' memory budget the memory was estimated under
};

bool better(const Eval& a, const Eval& b) {
  if (a.ok != b.ok) return a.ok;
  if (a.excess != b.excess) return a.excess < b.excess;
  return a.est.step_us < b.est.step_us - 1e-9;
}

std::string bytes_str(int64_t b) {
  if (b >= (int64_t(1) << 30)) return fmt::format("{:.2f} GiB", double(b) / double(int64_t(1) << 30));
  if (b >= (int64_t(1) << 20)) return fmt::format("{:.2f} MiB", double(b) / double(1 << 20));
  if (b >= (int64_t(1) << 10)) return fmt::format("{:.1f} KiB", double(b) / 1024.0);
  return fmt::format("{} B", b);
}

class Searcher {
 public:
  Searcher(const ir::Graph& forward, const DeviceMesh& mesh, const SearchOptions& opt)
      : forward_(forward), mesh_(mesh), opt_(opt), classes_(module_classes(forward)), planner_(opt.machine.comm) {
    if (opt.train) {
      step_.emplace(autodiff::make_train_step(forward.clone(), opt.optimizer));
      graph_ = &step_->graph;
    } else {
      graph_ = &forward_;
    }
    for (const ir::Value* v : graph_->inputs())
      if (v->type.rank() >= 1) data_inputs_.push_back(v);
  }

  SearchResult run();

 private:
  using State = std::vector<std::vector<int>>;  // [class][mesh dim] -> index into role_styles

  sharding::ParallelPlan plan_of(const State& s) const {
    sharding::ParallelPlan p;
    p.mesh_dims = names_;
    p.source = "<auto plan>";
    for (size_t m = 0; m < roles_.size(); ++m) {
      if (roles_[m] != "dp" || mesh_.size(int64_t(m)) == 1) continue;
      for (const ir::Value* v : data_inputs_) p.inputs[v->name][names_[m]] = Placement::shard(0);
    }
    for (size_t m = 0; m < roles_.size(); ++m)
      for (size_t c = 0; c < classes_.size(); ++c) {
        const Style st = role_styles(roles_[m])[size_t(s[c][m])];
        if (st == Style::replicate) continue;
        p.modules.push_back({classes_[c].pattern, st, names_[m], 1});
      }
    return p;
  }

  void adjust(sharding::ResolvedPlan& r) const {
    if (step_) sharding::place_like_params(*step_, r);
  }

  // Every sharded parameter keeps at least one element per rank (job::check_mesh_fits_model).
  std::string fits(const sharding::ResolvedPlan& r) const {
    for (const ir::Value* p : graph_->params()) {
      const Placements& pl = r.value_placements[size_t(p->id)];
      for (size_t m = 0; m < pl.size(); ++m)
        if (pl[m].is_shard() && p->type.shape[size_t(pl[m].dim())] < mesh_.size(int64_t(m)))
          return fmt::format("{} has fewer than {} rows on dim {}", p->name, mesh_.size(int64_t(m)), pl[m].dim());
    }
    return "";
  }

  const Eval& eval(const State& s) {
    std::string key;
    for (const auto& row : s)
      for (int x : row) key += char('0' + x);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    Eval e;
    ++evaluated_;
    try {
      const sharding::ParallelPlan plan = plan_of(s);
      sharding::ResolvedPlan r = sharding::resolve_plan(plan, *graph_, mesh_);
      adjust(r);
      e.why = fits(r);
      if (e.why.empty()) {
        sharding::Sharding sh = sharding::propagate(*graph_, mesh_, r, planner_);
        if (new_warning(sh)) {
          e.why = "propagation falls back: " + sh.warnings.back();
        } else {
          e.est = estimate_time(*graph_, sh, opt_.machine, planner_);
          e.ok = true;
          if (opt_.max_memory_per_rank > 0) {
            e.budget = add_memory_after_passes(plan, e.est);
            e.excess = std::max<int64_t>(0, e.est.peak_bytes - opt_.max_memory_per_rank);
            smallest_ = std::min(smallest_, e.est.peak_bytes);
          }
        }
      }
    } catch (const dt::Error& err) {
      e.why = err.what();
    }
    return cache_.emplace(key, std::move(e)).first->second;
  }

  // The memory of the programs the job will run for `plan`: rank 0's and one per orbit (the job's
  // report takes the largest of the same programs), after the pass pipeline. Returns the passes'
  // memory budget used: the caller's, or the limit less the largest per-rank parameters (at least
  // 1 byte: a plan whose parameters alone pass the limit gets no prefetch at all).
  size_t add_memory_after_passes(const sharding::ParallelPlan& plan, Estimate& est) {
    sharding::CompileOptions co;
    co.ranks = {0};
    co.orbits = true;
    co.verify = false;
    co.adjust_plan = [this](sharding::ResolvedPlan& rp) { adjust(rp); };
    sharding::CompiledModel cm = sharding::compile(*graph_, plan, mesh_, co, planner_);
    passes::PassOptions po = opt_.pass_options;
    if (po.memory_budget_bytes == 0) {
      int64_t params = 0;
      for (const ir::Graph& p : cm.programs) params = std::max(params, sharding::param_bytes(p));
      po.memory_budget_bytes = size_t(std::max<int64_t>(1, opt_.max_memory_per_rank - params));
    }
    passes::PassManager pm;
    pm.add(passes::parse_pipeline(opt_.pipeline, po));
    passes::RankPipelineOptions ro;
    // The same proof the job runs: a candidate whose programs stop matching across ranks after a
    // pass is a bug, raised here (InternalError) rather than returned as a plan that cannot compile.
    ro.check_ranks = true;
    ro.orbits = &cm.orbits;
    passes::run_rank_pipelines(pm, cm.programs, cm.ranks, ro);
    for (const ir::Graph& p : cm.programs) add_memory(p, est);
    return po.memory_budget_bytes;
  }

  // Forward programs: any warning the unsharded program does not have rejects the plan (an op
  // with no rule, or a shard no strategy of a reader can keep). Training steps: only ops with no
  // rule do; the optimizer updates give up gradient shards even under the hand plans (the
  // redistribution is priced like any other).
  static size_t fallbacks(const sharding::Sharding& sh) {
    return size_t(std::count_if(sh.nodes.begin(), sh.nodes.end(), [](const auto& n) { return n.fallback; }));
  }
  bool new_warning(const sharding::Sharding& sh) const {
    return opt_.train ? fallbacks(sh) > base_fallbacks_ : sh.warnings.size() > base_warnings_;
  }

  // Coordinate descent for the current roles; returns the final state.
  State descend(State s) {
    Eval cur = eval(s);
    for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
      bool improved = false;
      for (size_t c = 0; c < classes_.size(); ++c)
        for (size_t m = 0; m < roles_.size(); ++m) {
          if (mesh_.size(int64_t(m)) == 1) continue;
          const int n = int(role_styles(roles_[m]).size());
          for (int o = 0; o < n; ++o) {
            if (o == s[c][m]) continue;
            State t = s;
            t[c][m] = o;
            const Eval& e = eval(t);
            if (better(e, cur)) {
              cur = e;
              s = std::move(t);
              improved = true;
            }
          }
        }
      if (!improved) break;
    }
    return s;
  }

  // Every state of the current roles in a fixed order (mixed radix over (class, mesh dim), the last
  // digit fastest) when there are at most SearchOptions::exact_max_states of them: the best (the
  // first on ties). nullopt when there are more (the caller descends instead).
  std::optional<State> enumerate() {
    std::vector<std::pair<size_t, size_t>> digits;  // (class, mesh dim) with a choice
    double states = 1;
    for (size_t c = 0; c < classes_.size(); ++c)
      for (size_t m = 0; m < roles_.size(); ++m)
        if (mesh_.size(int64_t(m)) > 1) {
          digits.emplace_back(c, m);
          states *= double(role_styles(roles_[m]).size());
        }
    if (states > double(opt_.exact_max_states)) return std::nullopt;
    State s(classes_.size(), std::vector<int>(roles_.size(), 0)), best = s;
    Eval cur = eval(s);
    while (true) {
      size_t k = digits.size();
      while (k > 0) {  // next state: increment the last digit, carrying
        auto [c, m] = digits[k - 1];
        if (++s[c][m] < int(role_styles(roles_[m]).size())) break;
        s[c][m] = 0;
        --k;
      }
      if (k == 0) return best;
      const Eval& e = eval(s);
      if (better(e, cur)) {
        cur = e;
        best = s;
      }
    }
  }

  std::vector<std::vector<std::string>> role_assignments() const {
    std::vector<std::vector<std::string>> out;
    const size_t n = size_t(mesh_.ndim());
    for (uint32_t bits = 0; bits < (1u << n); ++bits) {  // bit m: mesh dim m is tp
      if (std::popcount(bits) > 1) continue;  // one tensor-parallel dim (nested TP adds nothing here)
      std::vector<std::string> r(n);
      for (size_t m = 0; m < n; ++m) r[m] = (bits >> m) & 1 ? "tp" : "dp";
      out.push_back(r);
    }
    // tp first: on a 1-d mesh the Megatron plan, then data parallel.
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
      return std::count(a.begin(), a.end(), "tp") > std::count(b.begin(), b.end(), "tp");
    });
    return out;
  }

  void set_roles(const std::vector<std::string>& roles) {
    roles_ = roles;
    names_.clear();
    for (size_t m = 0; m < roles.size(); ++m) {
      const auto k = std::count(roles.begin(), roles.end(), roles[m]);
      names_.push_back(k > 1 ? fmt::format("{}{}", roles[m], m) : roles[m]);
    }
    cache_.clear();
  }

  // The data inputs' batch dims hold at least one row per rank of the dp dims.
  bool dp_fits() const {
    int64_t ranks = 1;
    for (size_t m = 0; m < roles_.size(); ++m)
      if (roles_[m] == "dp") ranks *= mesh_.size(int64_t(m));
    for (const ir::Value* v : data_inputs_)
      if (v->type.shape[0] < ranks) return false;
    return true;
  }

  const ir::Graph& forward_;
  const DeviceMesh& mesh_;
  const SearchOptions& opt_;
  std::vector<ModuleClass> classes_;
  std::optional<autodiff::TrainStep> step_;
  const ir::Graph* graph_ = nullptr;
  std::vector<const ir::Value*> data_inputs_;
  std::vector<std::string> roles_, names_;
  std::map<std::string, Eval> cache_;
  RedistributePlanner planner_;
  size_t base_warnings_ = 0, base_fallbacks_ = 0;
  int evaluated_ = 0;
  int64_t smallest_ = std::numeric_limits<int64_t>::max();
};

SearchResult Searcher::run() {
  SearchResult best;
  std::optional<Eval> best_eval;
  State best_state;
  std::vector<std::string> best_roles;
  // Fallback warnings of the unsharded program (ops without a rule): not the plan's doing.
  {
    sharding::ResolvedPlan r = sharding::resolve_plan(sharding::ParallelPlan{}, *graph_, DeviceMesh(Shape{1}));
    adjust(r);
    const sharding::Sharding sh = sharding::propagate(*graph_, DeviceMesh(Shape{1}), r, planner_);
    base_warnings_ = sh.warnings.size();
    base_fallbacks_ = fallbacks(sh);
  }
  for (const auto& roles : role_assignments()) {
    set_roles(roles);
    std::string label;
    for (size_t m = 0; m < roles.size(); ++m) label += (m ? "," : "") + names_[m];
    Alternative alt{label, 0, -1, ""};
    if (!dp_fits()) {
      alt.rejected = "the batch has fewer rows than the data-parallel ranks";
      best.role_alternatives.emplace_back(label, alt);
      continue;
    }
    State s;
    if (std::optional<State> all = enumerate()) {
      s = std::move(*all);
    } else {
      // Two starts: nothing sharded, and every module fsdp on every mesh dim (the least parameter
      // memory, from where a tight limit is met first); the better end wins (the first on ties).
      best.exact = false;
      s = descend(State(classes_.size(), std::vector<int>(roles_.size(), 0)));
      State all_fsdp(classes_.size(), std::vector<int>(roles_.size(), 0));
      for (auto& row : all_fsdp)
        for (size_t m = 0; m < roles.size(); ++m) row[m] = fsdp_index(roles[m]);
      State t = descend(all_fsdp);
      if (better(eval(t), eval(s))) s = t;
    }
    const Eval e = eval(s);
    alt.step_us = e.est.step_us;
    alt.peak_bytes = e.est.peak_bytes;
    if (!e.ok) alt.rejected = e.why;
    else if (e.excess > 0) alt.rejected = "over the memory limit";
    best.role_alternatives.emplace_back(label, alt);
    if (!best_eval || better(e, *best_eval)) {
      best_eval = e;
      best_state = s;
      best_roles = roles;
    }
  }
  if (!best_eval || !best_eval->ok)
    DT_THROW(ValueError) << "--plan auto found no plan for mesh " << mesh_.str()
                         << (best_eval ? ": " + best_eval->why : std::string());
  if (best_eval->excess > 0)
    DT_THROW(ValueError) << "no plan fits --max-memory-per-rank " << bytes_str(opt_.max_memory_per_rank) << " ("
                         << opt_.max_memory_per_rank << " bytes) on mesh " << mesh_.str()
                         << ": the smallest per-rank memory found is " << bytes_str(smallest_) << " (" << smallest_
                         << " bytes)";
  // Rebuild the winner's context and record each decision's alternatives.
  set_roles(best_roles);
  best.roles = best_roles;
  best.plan = plan_of(best_state);
  best.estimate = eval(best_state).est;
  best.pass_options = opt_.pass_options;
  if (opt_.max_memory_per_rank > 0) best.pass_options.memory_budget_bytes = eval(best_state).budget;
  for (size_t m = 0; m < roles_.size(); ++m) {
    if (mesh_.size(int64_t(m)) == 1) continue;
    for (size_t c = 0; c < classes_.size(); ++c) {
      ModuleDecision d{classes_[c].pattern, names_[m],
                       std::string(sharding::style_name(role_styles(roles_[m])[size_t(best_state[c][m])])), {}};
      for (size_t o = 0; o < role_styles(roles_[m]).size(); ++o) {
        State t = best_state;
        t[c][m] = int(o);
        const Eval& e = eval(t);
        Alternative a{std::string(sharding::style_name(role_styles(roles_[m])[o])), e.est.step_us, e.est.peak_bytes,
                      e.ok ? (e.excess > 0 ? "over the memory limit" : "") : e.why};
        d.alternatives.push_back(a);
      }
      best.decisions.push_back(std::move(d));
    }
  }
  best.lower_bound_us = lower_bound_us(*graph_, mesh_.size(), opt_.machine);
  best.evaluated = evaluated_;
  return best;
}

}  // namespace

SearchResult search(const ir::Graph& forward, const DeviceMesh& mesh, const SearchOptions& options) {
  Searcher s(forward, mesh, options);
  return s.run();
}

std::string explain(const SearchResult& r) {
  std::string out;
  const Estimate& e = r.estimate;
  out += fmt::format("roles: {}\n", fmt::join(r.plan.mesh_dims, " x "));
  out += fmt::format("estimated step: {:.1f} us (compute {:.1f} us", e.step_us, e.compute_us);
  for (const auto& [k, us] : e.comm_us) out += fmt::format(", {} {:.1f} us", k, us);
  out += fmt::format("); lower bound {:.1f} us\n", r.lower_bound_us);
  if (e.peak_bytes >= 0)
    out += fmt::format("per-rank memory: {} (parameters {}, activations {}; after the passes, memory budget {})\n",
                       bytes_str(e.peak_bytes), bytes_str(e.param_bytes), bytes_str(e.activation_bytes),
                       bytes_str(int64_t(r.pass_options.memory_budget_bytes)));
  out += fmt::format("candidates costed: {} ({})\n", r.evaluated,
                     r.exact ? "every plan of the search space: the optimum under the cost model"
                             : "coordinate descent: a local optimum, judge it by the lower bound");
  out += "mesh roles tried:\n";
  for (const auto& [label, a] : r.role_alternatives)
    out += fmt::format("  {:<12} {}\n", label,
                       a.rejected.empty() ? fmt::format("{:.1f} us", a.step_us) : "rejected: " + a.rejected);
  out += "decisions (module, mesh dim: chosen; alternatives with the plan's step time):\n";
  for (const ModuleDecision& d : r.decisions) {
    out += fmt::format("  {} on {}: {}\n", d.pattern, d.mesh_dim, d.chosen);
    for (const Alternative& a : d.alternatives) {
      out += fmt::format("      {:<10} ", a.style);
      if (!a.rejected.empty() && a.step_us == 0) out += "rejected: " + a.rejected;
      else {
        out += fmt::format("{:.1f} us", a.step_us);
        if (a.peak_bytes >= 0) out += ", " + bytes_str(a.peak_bytes);
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
  ordered_json roles = ordered_json::array();
  for (const auto& [label, a] : r.role_alternatives) {
    ordered_json x;
    x["mesh_dims"] = label;
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
