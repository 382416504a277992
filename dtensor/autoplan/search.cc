#include "dtensor/autoplan/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <cstdio>

#include "dtensor/autoplan/chain_dp.h"
#include "dtensor/autoplan/module_classes.h"
#include "dtensor/core/byte_units.h"
#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/printer.h"
#include "dtensor/passes/pass_manager.h"
#include "dtensor/passes/rank_pipeline.h"
#include "dtensor/sharding/train_step_placement.h"

namespace dt::autoplan {
namespace {

constexpr int kMaxSweeps = 4;
using sharding::Style;

// The styles a role offers, in the order tried (replicate first: the starting point).
const std::vector<Style>& default_styles(const std::string& role) {
  static const std::vector<Style> dp = {Style::replicate, Style::fsdp};
  static const std::vector<Style> tp = {Style::replicate, Style::colwise, Style::rowwise, Style::sequence,
                                        Style::fsdp};
  return role == "tp" ? tp : dp;
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

class Searcher {
 public:
  Searcher(const ir::Graph& forward, const DeviceMesh& mesh, const SearchOptions& opt)
      : forward_(forward), mesh_(mesh), opt_(opt), classes_(module_classes(forward, opt.group_blocks)),
        planner_(opt.machine.comm) {
    for (const ModuleClass& c : classes_) {
      class_units_.emplace_back();
      for (const std::string& m : c.modules) {
        class_units_.back().push_back(units_.size());
        class_of_.push_back(class_units_.size() - 1);
        units_.push_back(m);
      }
    }
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
  // [unit][mesh dim] -> index into role_styles: a unit is one module; the modules of a class take
  // the same style (exact enumeration, descent) or each its own (the chain DP).
  using State = std::vector<std::vector<int>>;

  const std::vector<Style>& role_styles(const std::string& role) const {
    const std::vector<Style>& own = role == "tp" ? opt_.tp_styles : opt_.dp_styles;
    return own.empty() ? default_styles(role) : own;
  }
  int fsdp_index(const std::string& role) const {
    const auto& st = role_styles(role);
    const auto it = std::find(st.begin(), st.end(), Style::fsdp);
    return it == st.end() ? 0 : int(it - st.begin());
  }
  State uniform(int style_of_dp, int style_of_tp) const {
    std::vector<int> row(roles_.size());
    for (size_t m = 0; m < roles_.size(); ++m) row[m] = roles_[m] == "tp" ? style_of_tp : style_of_dp;
    return State(units_.size(), row);
  }
  // The class's style on mesh dim m (its first module's: uniform outside the chain DP).
  int at(const State& s, size_t c, size_t m) const { return s[class_units_[c][0]][m]; }
  void set(State& s, size_t c, size_t m, int o) const {
    for (size_t u : class_units_[c]) s[u][m] = o;
  }

  // One entry per class and mesh dim where its modules agree (the glob), else one per module.
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
        const std::vector<size_t>& us = class_units_[c];
        const bool same = std::all_of(us.begin(), us.end(), [&](size_t u) { return s[u][m] == s[us[0]][m]; });
        for (size_t u : us) {
          const Style st = role_styles(roles_[m])[size_t(s[u][m])];
          if (st != Style::replicate) p.modules.push_back({same ? classes_[c].pattern : units_[u], st, names_[m], 1});
          if (same) break;
        }
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

  static std::string digits(const std::vector<int>& row) {
    std::string key;
    for (int x : row) key += char('0' + x);
    return key;
  }

  // Resolves and propagates the plan of s: "" and the sharding, or why it is rejected (a style
  // resolve_plan refuses throws).
  std::string propagate_state(const sharding::ParallelPlan& plan, std::optional<sharding::Sharding>& sh) {
    sharding::ResolvedPlan r = sharding::resolve_plan(plan, *graph_, mesh_);
    adjust(r);
    std::string why = fits(r);
    if (why.empty()) sh.emplace(sharding::propagate(*graph_, mesh_, r, planner_));
    return why;
  }

  const Eval& eval(const State& s) {
    std::string key;
    key.reserve(s.size() * roles_.size());
    for (const auto& row : s)
      for (int x : row) key += char('0' + x);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    Eval e;
    ++evaluated_;
    try {
      const sharding::ParallelPlan plan = plan_of(s);
      std::optional<sharding::Sharding> shp;
      e.why = propagate_state(plan, shp);
      if (e.why.empty()) {
        const sharding::Sharding& sh = *shp;
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
            if (o == at(s, c, m)) continue;
            State t = s;
            set(t, c, m, o);
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
  std::optional<State> enumerate(bool any_size) {
    std::vector<std::pair<size_t, size_t>> digits;  // (class, mesh dim) with a choice
    double states = 1;
    for (size_t c = 0; c < classes_.size(); ++c)
      for (size_t m = 0; m < roles_.size(); ++m)
        if (mesh_.size(int64_t(m)) > 1) {
          digits.emplace_back(c, m);
          states *= double(role_styles(roles_[m]).size());
        }
    if (states > double(opt_.exact_max_states) && !any_size) return std::nullopt;
    State s = uniform(0, 0), best = s;
    Eval cur = eval(s);
    while (true) {
      size_t k = digits.size();
      while (k > 0) {  // next state: increment the last digit, carrying
        auto [c, m] = digits[k - 1];
        set(s, c, m, at(s, c, m) + 1);
        if (at(s, c, m) < int(role_styles(roles_[m]).size())) break;
        set(s, c, m, 0);
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

  // The class's style on mesh dim m; when the chain DP gave its modules different ones, each
  // module's ("h.0.mlp.fc_in=colwise h.1.mlp.fc_in=replicate").
  std::string chosen(const State& s, size_t c, size_t m) const {
    auto name = [&](size_t u) { return std::string(sharding::style_name(role_styles(roles_[m])[size_t(s[u][m])])); };
    const std::vector<size_t>& us = class_units_[c];
    if (std::all_of(us.begin(), us.end(), [&](size_t u) { return s[u][m] == s[us[0]][m]; })) return name(us[0]);
    std::string out;
    for (size_t u : us) out += (out.empty() ? "" : " ") + units_[u] + "=" + name(u);
    return out;
  }

  std::optional<State> chain();
  void prepare_chain();

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

  // Why the data inputs' batch dims cannot hold a row per rank of the dp dims ("" when they can).
  std::string dp_misfit() const {
    int64_t ranks = 1;
    for (size_t m = 0; m < roles_.size(); ++m)
      if (roles_[m] == "dp") ranks *= mesh_.size(int64_t(m));
    for (const ir::Value* v : data_inputs_)
      if (v->type.shape[0] < ranks)
        return fmt::format("the batch has fewer rows than the data-parallel ranks ({} rows of input {}, {} ranks)",
                           v->type.shape[0], v->name, ranks);
    return "";
  }

  const ir::Graph& forward_;
  const DeviceMesh& mesh_;
  const SearchOptions& opt_;
  std::vector<ModuleClass> classes_;
  std::vector<std::string> units_;                // module names
  std::vector<std::vector<size_t>> class_units_;  // per class: its units
  // The chain DP's view of the graph (role-independent, prepare_chain): the units in the order
  // the nodes first read their parameters, where each one's segment of nodes starts, the values
  // crossing the cut before each next segment, and each node by its first result's name.
  bool chain_ready_ = false;
  std::vector<size_t> chain_units_, seg_start_;
  std::vector<std::vector<const ir::Value*>> cut_;
  std::map<std::string, size_t, std::less<>> node_of_result_;
  std::vector<int> base_, sig_;      // per step: its module's first parameter id, its segment's signature
  std::vector<size_t> class_of_;     // by unit
  std::map<int, size_t> unit_of_param_;  // by Value::id
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
    Alternative alt{label, 0, -1, "", ""};
    if (std::string why = dp_misfit(); !why.empty()) {
      alt.rejected = std::move(why);
      best.role_alternatives.emplace_back(label, alt);
      continue;
    }
    State s;
    const std::string& want = opt_.method;
    std::optional<State> found;
    if (want == "auto" || want == "exact") found = enumerate(want == "exact");
    if (found) alt.method = "exact";
    if (!found && (want == "auto" || want == "chain-dp") && (found = chain())) alt.method = "chain-dp";
    if (found) {
      s = std::move(*found);
    } else {
      // Two starts: nothing sharded, and every module fsdp on every mesh dim (the least parameter
      // memory, from where a tight limit is met first); the better end wins (the first on ties).
      alt.method = "descent";
      best.exact = false;
      s = descend(uniform(0, 0));
      State t = descend(uniform(fsdp_index("dp"), fsdp_index("tp")));
      if (better(eval(t), eval(s))) s = t;
    }
    if (alt.method == "descent" || best.method == "exact") best.method = alt.method;
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
  if (!best_eval || !best_eval->ok) {
    // Every assignment of roles to the mesh dims, and why it failed: the user's way out (a smaller
    // mesh, a larger batch) is in the numbers.
    std::string why;
    for (const auto& [label, alt] : best.role_alternatives)
      why += fmt::format("{}{} {}: {}", why.empty() ? "" : "; ", names_.size() > 1 ? "mesh dims" : "mesh dim", label,
                         alt.rejected.empty() ? "no feasible plan" : alt.rejected);
    DT_THROW(ValueError) << "--plan auto found no plan for mesh " << mesh_.str() << " (" << why << ")";
  }
  if (best_eval->excess > 0)
    DT_THROW(ValueError) << "no plan fits --max-memory-per-rank " << bytes_text(opt_.max_memory_per_rank) << " ("
                         << opt_.max_memory_per_rank << " bytes) on mesh " << mesh_.str()
                         << ": the smallest per-rank memory found is " << bytes_text(smallest_) << " (" << smallest_
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
      ModuleDecision d{classes_[c].pattern, names_[m], chosen(best_state, c, m), {}};
      for (size_t o = 0; o < role_styles(roles_[m]).size(); ++o) {
        State t = best_state;
        set(t, c, m, int(o));
        const Eval& e = eval(t);
        Alternative a{std::string(sharding::style_name(role_styles(roles_[m])[o])), e.est.step_us, e.est.peak_bytes,
                      e.ok ? (e.excess > 0 ? "over the memory limit" : "") : e.why, ""};
        d.alternatives.push_back(a);
      }
      best.decisions.push_back(std::move(d));
    }
  }
  best.lower_bound_us = lower_bound_us(*graph_, mesh_.size(), opt_.machine);
  best.evaluated = evaluated_;
  return best;
}

// The chain: a unit's segment is the nodes from the first one reading its parameters to the next
// unit's first reader (the first segment also holds the nodes before it, the last one the rest
// and the graph outputs). Propagation visits nodes in order and each node decides from its
// operands' placements and the plan's entries for the parameters it reads (and its first
// operand's producer from that reader's entry), so a segment's nodes
// are placed, and priced (estimate_time's per-node share), by the units before it and its own
// unit alone, through the values crossing the cut: the DP state. Those are the placements (and
// the after-production reads) of every value made before the cut and read after it, and for a
// parameter read after it the styles of its module.
void Searcher::prepare_chain() {
  if (chain_ready_) return;
  chain_ready_ = true;
  std::map<std::string, size_t> unit_of;
  for (size_t u = 0; u < units_.size(); ++u) unit_of[units_[u]] = u;
  const std::vector<ir::Node*>& nodes = graph_->nodes();
  const size_t n = nodes.size();
  std::vector<size_t> first(units_.size(), n);
  std::map<int, size_t> made_at, last_read;  // by Value::id: producing node, last reading node
  for (const ir::Value* p : graph_->params()) unit_of_param_[p->id] = unit_of.at(sharding::module_of(p->name));
  for (size_t i = 0; i < n; ++i) {
    // Propagation's one look ahead: a node's forced first operand (a `sequence` norm's) is what its
    // producer prefers to make, so that producer belongs to the segment of the reader's module too.
    const ir::Value* x = nodes[i]->operands.empty() ? nullptr : nodes[i]->operands[0];
    const auto made0 = x ? made_at.find(x->id) : made_at.end();
    for (const ir::Value* v : nodes[i]->operands) {
      last_read[v->id] = i;
      if (auto it = unit_of_param_.find(v->id); it != unit_of_param_.end())
        first[it->second] = std::min({first[it->second], i, made0 == made_at.end() ? i : made0->second});
    }
    for (const ir::Value* r : nodes[i]->results) made_at[r->id] = i;
    if (!nodes[i]->results.empty()) node_of_result_.emplace(nodes[i]->results[0]->name, i);
  }
  for (const ir::Value* v : graph_->outputs()) last_read[v->id] = n;
  for (size_t u = 0; u < units_.size(); ++u)
    if (first[u] < n) chain_units_.push_back(u);  // a module nothing reads costs no time
  std::stable_sort(chain_units_.begin(), chain_units_.end(), [&](size_t a, size_t b) { return first[a] < first[b]; });
  for (size_t k = 0; k < chain_units_.size(); ++k) seg_start_.push_back(k == 0 ? 0 : first[chain_units_[k]]);
  std::vector<const ir::Value*> values(graph_->inputs().begin(), graph_->inputs().end());
  values.insert(values.end(), graph_->params().begin(), graph_->params().end());
  for (const ir::Node* node : nodes) values.insert(values.end(), node->results.begin(), node->results.end());
  std::vector<size_t> step_of(units_.size(), chain_units_.size());
  for (size_t k = 0; k < chain_units_.size(); ++k) step_of[chain_units_[k]] = k;
  for (size_t k = 0; k < chain_units_.size(); ++k) {
    const size_t cut = k + 1 < chain_units_.size() ? seg_start_[k + 1] : n + 1;  // after the last: nothing
    cut_.emplace_back();
    for (const ir::Value* v : values) {
      const auto made = made_at.find(v->id);
      const auto read = last_read.find(v->id);
      const auto unit = unit_of_param_.find(v->id);  // a parameter of a module not decided yet: not state
      if (read != last_read.end() && read->second >= cut && (made == made_at.end() || made->second < cut) &&
          (unit == unit_of_param_.end() || step_of[unit->second] <= k))
        cut_.back().push_back(v);
    }
  }
  // Signatures: segments of repeated blocks that are the same text once every value is named by its
  // id less the segment's base (its module's first parameter id) get one signature, so a step
  // costed in one block is reused in the others (the costs are local: the same incoming state and
  // choice give the same cost and outgoing state).
  std::map<std::string, const ir::Value*, std::less<>> by_name;
  for (const ir::Value* v : values) by_name.emplace(v->name, v);
  for (size_t u : chain_units_) {
    int b = std::numeric_limits<int>::max();
    for (const auto& [id, unit] : unit_of_param_)
      if (unit == u) b = std::min(b, id);
    base_.push_back(b);
  }
  auto relative = [&](const std::string& text, int base) {
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
      const size_t end = text[i] == '%' ? text.find_first_of(",() :=[]", i + 1) : i;
      const auto it = end > i + 1 ? by_name.find(std::string_view(text).substr(i + 1, end - i - 1)) : by_name.end();
      if (it == by_name.end()) {
        out += text[i];
        continue;
      }
      out += fmt::format("#{}", it->second->id - base);
      i = end - 1;
    }
    return out;
  };
  std::map<std::string, int> interned;
  for (size_t k = 0; k < chain_units_.size(); ++k) {
    const bool last = k + 1 == chain_units_.size();
    std::string sig = fmt::format("{}|{}|", class_of_[chain_units_[k]], last ? 0 : base_[k + 1] - base_[k]);
    for (size_t i = seg_start_[k]; i < (last ? n : seg_start_[k + 1]); ++i) sig += relative(ir::print_node(*nodes[i]), base_[k]) + "\n";
    for (size_t j = k == 0 ? 0 : k - 1; j <= k; ++j)
      for (const ir::Value* v : cut_[j]) sig += fmt::format("{}:{};", v->id - base_[k], ir::type_str(v->type));
    sig_.push_back(interned.emplace(sig, int(interned.size())).first->second);
  }
}

// The exact optimum of the current roles under the cost model when the graph is a chain of local
// costs (a forward program: a training step's backward follows the whole forward, so each
// segment's gradients would depend on every later choice), every module deciding alone (the
// modules of a class may differ). nullopt when it does not apply or would cost more than
// SearchOptions::chain_max_work, or when its plan is over the memory limit (its memory is not a
// sum over segments: a plan within the limit is the constrained optimum too, one over it is not
// an answer) or is rejected whole (a check of the locality claim, as is the DP's total against
// the plan's estimate).
std::optional<Searcher::State> Searcher::chain() {
  if (opt_.train) return std::nullopt;
  const size_t n = graph_->nodes().size();
  std::vector<size_t> dims;  // mesh dims with a choice
  double unpruned = 1;       // choices of a module before pruning
  for (size_t m = 0; m < roles_.size(); ++m)
    if (mesh_.size(int64_t(m)) > 1) {
      dims.push_back(m);
      unpruned *= double(role_styles(roles_[m]).size());
    }
  // Past the budget with one state per step and no style pruned (the 32-layer bench: 1.7x): not
  // even prepared. Pruning drops only the styles a module's shapes refuse (a norm's 2-d ones).
  if (unpruned * double(units_.size()) * double(n) > double(opt_.chain_max_work)) return std::nullopt;
  prepare_chain();
  // Per class and mesh dim, the styles resolve_plan accepts for the class alone: a style its
  // shapes cannot take is refused in any plan, so dropping it loses none.
  std::vector<std::vector<std::vector<int>>> allowed(classes_.size(), std::vector<std::vector<int>>(roles_.size()));
  for (size_t c = 0; c < classes_.size(); ++c)
    for (size_t m : dims)
      for (int o = 0; o < int(role_styles(roles_[m]).size()); ++o) {
        State t = uniform(0, 0);
        set(t, c, m, o);
        try {
          sharding::resolve_plan(plan_of(t), *graph_, mesh_);
          allowed[c][m].push_back(o);
        } catch (const dt::Error&) {
        }
      }
  std::vector<int> choices;
  double work = 0;
  for (size_t u : chain_units_) {
    int k = 1;
    for (size_t m : dims) k *= std::max<int>(1, int(allowed[class_of_[u]][m].size()));
    choices.push_back(k);
    work += double(k) * double(n);
  }
  if (chain_units_.empty() || work > double(opt_.chain_max_work)) return std::nullopt;
  auto state_of = [&](const std::vector<int>& ch) {
    State t = uniform(0, 0);
    for (size_t j = 0; j < ch.size(); ++j) {
      const size_t u = chain_units_[j];
      int x = ch[j];
      for (size_t m : dims) {
        const std::vector<int>& a = allowed[class_of_[u]][m];
        t[u][m] = a.empty() ? 0 : a[size_t(x) % a.size()];
        x /= std::max<int>(1, int(a.size()));
      }
    }
    return t;
  };
  // Keys name the cut's values relative to the next step's base, so that a repeated block's steps
  // meet the same keys; memo: by (signature, the module's styles, incoming state).
  std::map<std::string, ChainStepCost> memo;
  const ChainStepFn step = [&](const std::vector<int>& ch, const std::string& state) -> ChainStepCost {
    const State t = state_of(ch);
    const size_t k = ch.size() - 1, end = k + 1 < chain_units_.size() ? seg_start_[k + 1] : n;
    const int next_base = k + 1 < chain_units_.size() ? base_[k + 1] : 0;
    const std::string memo_key = fmt::format("{}|{}|{}", sig_[k], digits(t[chain_units_[k]]), state);
    if (auto it = memo.find(memo_key); it != memo.end()) return it->second;
    ChainStepCost& out = memo[memo_key];
    ++evaluated_;
    try {
      std::optional<sharding::Sharding> sh;
      if (!propagate_state(plan_of(t), sh).empty()) return {};
      // A shard given up in this segment rejects the choice (later segments' warnings are theirs).
      for (const std::string& w : sh->warnings) {
        if (w.empty() || w[0] != '%') continue;  // an op without a rule: also unsharded
        const auto it = node_of_result_.find(std::string_view(w).substr(1, w.find(" (") - 1));
        if (it == node_of_result_.end() || it->second < end) return {};
      }
      std::vector<double> node_us;
      estimate_time(*graph_, *sh, opt_.machine, planner_, &node_us);
      out.ok = true;
      for (size_t i = seg_start_[k]; i < end; ++i) out.cost += node_us[i];
      if (end == n) out.cost += node_us[n];
      for (const ir::Value* v : cut_[k]) {
        out.key += fmt::format("{}:{}", v->id - next_base, placements_str(sh->values[size_t(v->id)]));
        if (size_t(v->id) < sh->reads.size()) out.key += "/" + placements_str(sh->reads[size_t(v->id)]);
        if (auto p = unit_of_param_.find(v->id); p != unit_of_param_.end()) out.key += "=" + digits(t[p->second]);
        out.key += ";";
      }
      return out;
    } catch (const dt::Error&) {
      return {};
    }
  };
  const std::optional<ChainResult> r = chain_dp(choices, step, opt_.chain_max_work / int64_t(std::max<size_t>(n, 1)));
  if (!r) return std::nullopt;
  State s = state_of(r->choices);
  const Eval& e = eval(s);
  if (!e.ok || e.excess > 0 || std::abs(e.est.step_us - r->cost) > 1e-6 * std::max(1.0, r->cost)) return std::nullopt;
  return s;
}

}  // namespace

SearchResult search(const ir::Graph& forward, const DeviceMesh& mesh) {
  static const SearchOptions defaults;
  return search(forward, mesh, defaults);
}

SearchResult search(const ir::Graph& forward, const DeviceMesh& mesh, const SearchOptions& options) {
  Searcher s(forward, mesh, options);
  return s.run();
}

}  // namespace dt::autoplan
