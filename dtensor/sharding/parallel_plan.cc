#include "dtensor/sharding/parallel_plan.h"

#include <fnmatch.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dtensor/core/error.h"
#include "dtensor/core/json_text.h"
#include "dtensor/core/input_file.h"
#include "dtensor/ir/op_kind.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/use_lists.h"

namespace dt::sharding {
namespace {

using nlohmann::json;

Style parse_style(const std::string& text, const std::string& where) {
  for (Style s : {Style::colwise, Style::rowwise, Style::sequence, Style::fsdp, Style::replicate})
    if (style_name(s) == text) return s;
  DT_THROW(ValueError) << where << ": unknown style '" << text
                       << "' (expected colwise, rowwise, sequence, fsdp or replicate)";
}

// Reads {"dp": "S(0)"} or "S(0),R" (one per mesh dim, in order) into mesh dim name -> placement.
std::map<std::string, Placement> parse_io_placements(const json& j, const std::vector<std::string>& dims,
                                                     const std::string& where) {
  std::map<std::string, Placement> out;
  try {
    if (j.is_string()) {
      Placements ps = parse_placements(j.get<std::string>());
      if (!dims.empty() && ps.size() != dims.size())
        DT_THROW(ValueError) << where << ": " << ps.size() << " placements for " << dims.size() << " mesh dims";
      // Without mesh_dims, the default names of resolve_plan: "tp" for a 1-d mesh, else "mesh<m>".
      for (size_t m = 0; m < ps.size(); ++m)
        out[m < dims.size() ? dims[m] : ps.size() == 1 ? "tp" : "mesh" + std::to_string(m)] = ps[m];
    } else if (j.is_object()) {
      for (auto& [dim, p] : j.items()) out[dim] = Placement::parse(p.get<std::string>());
    } else {
      DT_THROW(ValueError) << where << ": expected a placement string or an object of mesh dim -> placement";
    }
  } catch (const json::exception& e) {
    DT_THROW(ValueError) << where << ": " << e.what();
  }
  return out;
}

// Returns the optional integer `key` of `j`, which must lie in [lo, hi].
int bounded_int(const json& j, const char* key, int lo, int hi, int fallback, const std::string& where) {
  if (!j.contains(key)) return fallback;
  const json& v = j[key];
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    DT_THROW(ValueError) << where << ": " << key << " is " << v.dump() << ", expected an integer in [" << lo << ", " << hi
                         << "]";
  return v.get<int>();
}

PipelinePlan parse_pipeline(const json& j, const std::string& source) {
  const std::string where = source + ": pipeline";
  if (!j.is_object()) DT_THROW(ValueError) << where << " is a json object";
  for (auto& [key, value] : j.items())
    if (key != "split_before" && key != "stages" && key != "microbatches" && key != "schedule" && key != "mesh_dim" &&
        key != "virtual_stages")
      DT_THROW(ValueError) << where << " has unknown key '" << key
                           << "' (expected split_before or stages, microbatches, schedule, virtual_stages, mesh_dim)";
  PipelinePlan p;
  if (j.contains("mesh_dim")) p.mesh_dim = j["mesh_dim"].get<std::string>();
  if (j.contains("split_before")) p.split_before = j["split_before"].get<std::vector<std::string>>();
  p.stages = bounded_int(j, "stages", 1, 1 << 16, 0, where);
  p.microbatches = bounded_int(j, "microbatches", 1, 1 << 16, 1, where);
  if (j.contains("schedule")) p.schedule = j["schedule"].get<std::string>();
  if (p.schedule != "gpipe" && p.schedule != "1f1b" && p.schedule != "interleaved-1f1b")
    DT_THROW(ValueError) << where << ": unknown schedule '" << p.schedule
                         << "' (expected gpipe, 1f1b or interleaved-1f1b)";
  p.virtual_stages = bounded_int(j, "virtual_stages", 1, 1 << 10, 1, where);
  if (p.virtual_stages > 1 && p.schedule != "interleaved-1f1b")
    DT_THROW(ValueError) << where << " has virtual_stages " << p.virtual_stages << " but schedule '" << p.schedule
                         << "': only interleaved-1f1b runs several stages per rank";
  if (p.stages > 0 && !p.split_before.empty())
    DT_THROW(ValueError) << where << " has both stages and split_before: give one";
  if (p.stages == 0 && p.split_before.empty())
    DT_THROW(ValueError) << where << " needs split_before (module names) or stages (a count)";
  return p;
}

// Returns the index of mesh dim `name`, throwing for a pattern that names one that does not exist.
int64_t mesh_dim_index(const ResolvedPlan& r, const std::string& name, const std::string& what) {
  for (size_t m = 0; m < r.mesh_dim_names.size(); ++m)
    if (r.mesh_dim_names[m] == name) return int64_t(m);
  std::string dims;
  for (const auto& d : r.mesh_dim_names) dims += (dims.empty() ? "" : ", ") + d;
  DT_THROW(ValueError) << what << " names mesh dim '" << name << "' but the mesh dims are [" << dims << "]";
}

}  // namespace

std::string_view style_name(Style style) {
  switch (style) {
    case Style::colwise: return "colwise";
    case Style::rowwise: return "rowwise";
    case Style::sequence: return "sequence";
    case Style::fsdp: return "fsdp";
    case Style::replicate: return "replicate";
  }
  return "?";
}

bool pattern_matches(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

std::string module_of(const std::string& param_name) {
  size_t dot = param_name.rfind('.');
  return dot == std::string::npos ? std::string() : param_name.substr(0, dot);
}

ParallelPlan ParallelPlan::parse(const std::string& text, const std::string& source) {
  ParallelPlan plan;
  plan.source = source;
  json j = parse_json_text(text, source);
  if (!j.is_object()) DT_THROW(ValueError) << source << ": a plan is a json object";
  for (auto& [key, value] : j.items())
    if (key != "mesh_dims" && key != "modules" && key != "inputs" && key != "outputs" && key != "description" &&
        key != "pipeline")
      DT_THROW(ValueError) << source << ": unknown key '" << key << "'";
  try {
    if (j.contains("mesh_dims")) plan.mesh_dims = j["mesh_dims"].get<std::vector<std::string>>();
    if (j.contains("modules")) {
      for (const json& m : j["modules"]) {
        ModuleStyle ms;
        ms.pattern = m.at("pattern").get<std::string>();
        const std::string where = source + ": plan pattern '" + ms.pattern + "'";
        ms.style = parse_style(m.at("style").get<std::string>(), where);
        if (m.contains("mesh_dim")) ms.mesh_dim = m["mesh_dim"].get<std::string>();
        else if (plan.mesh_dims.size() == 1) ms.mesh_dim = plan.mesh_dims[0];
        else if (plan.mesh_dims.empty()) ms.mesh_dim = "tp";  // the default name of a 1-d mesh
        else DT_THROW(ValueError) << where << " needs a mesh_dim";
        if (m.contains("dim")) {
          // Checked first: a number past int64 parses as a float, whose conversion would overflow.
          if (!m["dim"].is_number_integer() || (m["dim"].is_number_unsigned() && m["dim"].get<uint64_t>() > 64))
            DT_THROW(ValueError) << where << " has dim " << m["dim"].dump() << ": expected a small integer";
          ms.dim = m["dim"].get<int64_t>();
        }
        if (m.contains("blocks")) {
          if (!m["blocks"].is_number_integer() || m["blocks"].get<int64_t>() < 1 || m["blocks"].get<int64_t>() > 64)
            DT_THROW(ValueError) << where << " has blocks " << m["blocks"].dump() << ": expected an integer in [1, 64]";
          if (ms.style != Style::colwise)
            DT_THROW(ValueError) << where << " has blocks but is " << style_name(ms.style) << ": only colwise takes blocks";
          ms.blocks = m["blocks"].get<int64_t>();
        }
        for (auto& [key, value] : m.items())
          if (key != "pattern" && key != "style" && key != "mesh_dim" && key != "dim" && key != "blocks")
            DT_THROW(ValueError) << where << " has unknown key '" << key << "'";
        plan.modules.push_back(std::move(ms));
      }
    }
    if (j.contains("pipeline")) plan.pipeline = parse_pipeline(j["pipeline"], source);
    for (const char* io : {"inputs", "outputs"}) {
      if (!j.contains(io)) continue;
      auto& target = std::string(io) == "inputs" ? plan.inputs : plan.outputs;
      for (auto& [name, value] : j[io].items())
        target[name] = parse_io_placements(value, plan.mesh_dims, source + ": " + io + " '" + name + "'");
    }
  } catch (const json::exception& e) {
    DT_THROW(ValueError) << source << ": " << e.what();
  }
  return plan;
}

ParallelPlan ParallelPlan::load(const std::string& path) {
  return parse(read_input_file(path, "plan"), path);
}

std::string ParallelPlan::to_json() const {
  json j;
  j["mesh_dims"] = mesh_dims;
  j["modules"] = json::array();
  for (const ModuleStyle& m : modules) {
    json e = {{"pattern", m.pattern}, {"style", std::string(style_name(m.style))}, {"mesh_dim", m.mesh_dim}};
    if (m.style == Style::sequence) e["dim"] = m.dim;
    if (m.blocks > 1) e["blocks"] = m.blocks;
    j["modules"].push_back(e);
  }
  for (auto [key, map] : {std::pair{"inputs", &inputs}, {"outputs", &outputs}}) {
    json o = json::object();
    for (const auto& [name, ps] : *map) {
      json p = json::object();
      for (const auto& [dim, pl] : ps) p[dim] = pl.str();
      o[name] = p;
    }
    j[key] = o;
  }
  if (pipeline) {
    json p = {{"mesh_dim", pipeline->mesh_dim}, {"microbatches", pipeline->microbatches},
              {"schedule", pipeline->schedule}};
    if (pipeline->virtual_stages > 1) p["virtual_stages"] = pipeline->virtual_stages;
    if (pipeline->stages > 0) p["stages"] = pipeline->stages;
    else p["split_before"] = pipeline->split_before;
    j["pipeline"] = p;
  }
  return j.dump(2);
}

ResolvedPlan resolve_plan(const ParallelPlan& plan, const ir::Graph& graph, const DeviceMesh& mesh) {
  ResolvedPlan r;
  const size_t nd = size_t(mesh.ndim());
  r.mesh_dim_names = plan.mesh_dims;
  if (r.mesh_dim_names.empty()) {
    if (nd == 1) r.mesh_dim_names = {"tp"};
    else
      for (size_t m = 0; m < nd; ++m) r.mesh_dim_names.push_back("mesh" + std::to_string(m));
  }
  if (r.mesh_dim_names.size() != nd)
    DT_THROW(ValueError) << plan.source << ": plan names " << r.mesh_dim_names.size() << " mesh dims but mesh "
                         << mesh.str() << " has " << nd;
  const size_t nv = graph.num_values();
  r.value_placements.assign(nv, {});
  r.stored_only.assign(nv, 0);
  r.pinned.assign(nv, 0);
  r.forced_operand0_dim.assign(graph.nodes().size(), {});
  for (const ir::Value* v : graph.inputs()) r.value_placements[size_t(v->id)] = Placements(nd);
  for (const ir::Value* v : graph.params()) r.value_placements[size_t(v->id)] = Placements(nd);

  // A parameter's first reader decides its orientation (and a sequence style's forced operand).
  const ir::UseLists uses(graph);
  const ir::NodePositions position(graph);

  for (const ModuleStyle& ms : plan.modules) {
    const std::string what = plan.source + ": plan pattern '" + ms.pattern + "'";
    const int64_t m = mesh_dim_index(r, ms.mesh_dim, what);
    bool matched = false;
    for (const ir::Value* p : graph.params()) {
      const std::string module = module_of(p->name);
      if (!pattern_matches(ms.pattern, module)) continue;
      // A const (a buffer or folded constant) stays replicated unless the pattern names it whole.
      if (p->frozen && ms.pattern != module && ms.pattern != p->name) continue;
      matched = true;
      const std::string leaf = p->name.substr(module.empty() ? 0 : module.size() + 1);
      const ir::Node* u = uses.users(p).empty() ? nullptr : uses.users(p).front();
      const int64_t out_dim = u ? ir::op_def(u->op).weight_output_dim : 0;  // of a 2-d weight
      Placement& pl = r.value_placements[size_t(p->id)][size_t(m)];
      r.stored_only[size_t(p->id)] &= ~(1u << m);
      r.pinned[size_t(p->id)] &= ~(1u << m);
      switch (ms.style) {
        case Style::colwise:
        case Style::rowwise: {
          const int weight_rank = u ? ir::op_def(u->op).weight_rank : 2;
          if (leaf == "weight" && (weight_rank < 0 ? p->type.rank() < 2 : p->type.rank() != weight_rank))
            DT_THROW(ValueError) << what << " (" << style_name(ms.style) << ") needs a "
                                 << (weight_rank < 0 ? "conv weight of rank >= 2" : "2-d weight") << " but " << p->name
                                 << " is " << ir::type_str(p->type);
          const bool col = ms.style == Style::colwise;
          if (leaf == "weight") pl = Placement::shard(col ? out_dim : 1 - out_dim);
          if (leaf == "weight") r.pinned[size_t(p->id)] |= 1u << m;
          else if (leaf == "bias") pl = col ? Placement::shard(0) : Placement::replicate();
          else pl = Placement::replicate();
          if (ms.blocks > 1 && pl.is_shard()) {
            // A fused projection (qkv): each of the `blocks` equal column blocks is sharded on its
            // own, so each rank's output holds its chunk of every block (layout/placement.h).
            if (out_dim != 0)  // not a linear weight [out, in]
              DT_THROW(ValueError) << what << " (colwise, blocks " << ms.blocks << ") shards an embedding: blocks "
                                   << "are for a fused linear";
            if (p->type.rank() < 1 || p->type.shape[0] % ms.blocks != 0)
              DT_THROW(ValueError) << what << " (colwise, blocks " << ms.blocks << ") needs dim 0 of " << p->name
                                   << " to divide into " << ms.blocks << " blocks but it is " << ir::type_str(p->type);
            pl = Placement::blocked_shard(0, ms.blocks);
          }
          break;
        }
        case Style::fsdp:
          pl = p->type.rank() > 0 ? Placement::shard(0) : Placement::replicate();
          if (p->type.rank() > 0) r.stored_only[size_t(p->id)] |= 1u << m;
          break;
        case Style::replicate: pl = Placement::replicate(); break;
        case Style::sequence: {
          pl = Placement::replicate();
          if (!u) break;
          const ir::Value* x = u->operands[0];
          if (ms.dim < 0 || ms.dim >= x->type.rank())
            DT_THROW(ValueError) << what << " (sequence) shards dim " << ms.dim << " but " << ir::op_name(u->op)
                                 << " reads " << ir::type_str(x->type);
          auto& forced = r.forced_operand0_dim[position(u)];
          forced.assign(nd, -1);
          forced[size_t(m)] = ms.dim;
          break;
        }
      }
    }
    if (!matched) DT_THROW(ValueError) << what << " matches no module of " << graph.name();
  }

  // FSDP over TP: an fsdp shard on mesh dim m of a tensor dim that a later mesh dim also shards
  // (a colwise weight's rows on tp) would split it first, so gathering it over m alone would need
  // the other mesh dim's pieces too. Make it a strided shard instead: split after the tp shard, so
  // the fsdp all_gather rebuilds exactly this rank's tp shard (PyTorch's FSDP2-over-TP layout).
  for (const ir::Value* p : graph.params()) {
    Placements& ps = r.value_placements[size_t(p->id)];
    for (size_t m = 0; m < nd; ++m) {
      if (!((r.stored_only[size_t(p->id)] >> m) & 1u) || !ps[m].is_shard()) continue;
      for (size_t k = m + 1; k < nd; ++k) {
        if (!ps[k].is_shard(ps[m].dim()) || ((r.stored_only[size_t(p->id)] >> k) & 1u)) continue;
        if (ps[k].is_blocked()) {
          // A fused projection's blocked rows stay whole on every dp member: fsdp shards the
          // weight's other dim (columns) instead, whose all_gather over m rebuilds this rank's tp
          // blocks untouched; a 1-d blocked bias is small and stays replicated on m.
          if (p->type.rank() == 2 && ps[m].dim() == 0) {
            ps[m] = Placement::shard(1);
          } else {
            ps[m] = Placement::replicate();
            r.stored_only[size_t(p->id)] &= ~(1u << m);
          }
          break;
        }
        ps[m] = Placement::strided_shard(ps[m].dim());
      }
    }
  }

  auto placements_for = [&](const std::map<std::string, Placement>& by_dim, int64_t rank, const std::string& what) {
    Placements ps(nd);
    for (const auto& [dim, pl] : by_dim) {
      const int64_t m = mesh_dim_index(r, dim, what);
      if (pl.is_shard() && (pl.dim() >= rank || pl.dim() < -rank))
        DT_THROW(ValueError) << what << " shards dim " << pl.dim() << " of a tensor of rank " << rank;
      ps[size_t(m)] = pl.is_shard() ? pl.normalized(rank) : pl;
    }
    return ps;
  };
  for (const auto& [name, by_dim] : plan.inputs) {
    const ir::Value* v = graph.find(name);
    if (!v || v->kind != ir::ValueKind::input)
      DT_THROW(ValueError) << plan.source << ": plan input '" << name << "' is not a data input of " << graph.name();
    r.value_placements[size_t(v->id)] = placements_for(by_dim, v->type.rank(), plan.source + ": input '" + name + "'");
  }
  r.output_placements.assign(graph.outputs().size(), Placements(nd));
  for (const auto& [name, by_dim] : plan.outputs) {
    bool found = false;
    for (size_t i = 0; i < graph.outputs().size(); ++i) {
      const ir::Value* v = graph.outputs()[i];
      if (v->name != name && std::to_string(i) != name) continue;
      r.output_placements[i] = placements_for(by_dim, v->type.rank(), plan.source + ": output '" + name + "'");
      found = true;
    }
    if (!found) DT_THROW(ValueError) << plan.source << ": plan output '" << name << "' is not an output of " << graph.name();
  }
  return r;
}

}  // namespace dt::sharding
