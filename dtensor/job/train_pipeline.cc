#include "dtensor/job/train_pipeline.h"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>

#include "dtensor/core/error.h"
#include "dtensor/ir/verifier.h"
#include "dtensor/passes/p2p_order.h"
#include "dtensor/runtime/launcher.h"
#include "dtensor/sharding/tensor_sharding.h"

namespace dt::job {

using runtime::Bindings;

namespace {

// The plan within one stage: the pipeline dim and section dropped, only the inputs the stage reads.
sharding::ParallelPlan stage_plan(const sharding::ParallelPlan& plan, const ir::Graph& stage) {
  const std::string& pp = plan.pipeline->mesh_dim;
  sharding::ParallelPlan sub = plan;
  sub.pipeline.reset();
  sub.mesh_dims.erase(std::find(sub.mesh_dims.begin(), sub.mesh_dims.end(), pp));
  if (sub.mesh_dims.empty()) sub.mesh_dims = {"stage"};  // a one-rank sub-mesh
  sub.modules.clear();
  for (const sharding::ModuleStyle& ms : plan.modules) {
    if (ms.mesh_dim == pp)
      DT_THROW(ValueError) << plan.source << ": plan pattern '" << ms.pattern << "' names the pipeline's mesh dim '" << pp
                           << "': stages split the model on it, styles apply within a stage";
    // A pattern applies to the stages holding modules it matches (h.*.attn.q_proj: every stage).
    for (const ir::Value* p : stage.params())
      if (fnmatch(ms.pattern.c_str(), sharding::module_of(p->name).c_str(), 0) == 0) {
        sub.modules.push_back(ms);
        break;
      }
  }
  sub.inputs.clear();
  for (auto [name, by_dim] : plan.inputs) {
    const ir::Value* v = stage.find(name);
    if (!v || v->kind != ir::ValueKind::input) continue;
    by_dim.erase(pp);
    sub.inputs[name] = by_dim;
  }
  sub.outputs.clear();  // a stage's outputs are placed by compile_pipeline
  return sub;
}

// Where a rank is in a pipeline: its pipeline rank and its place (PipelinePrograms::place_of), from
// the pipeline ranks' sub-meshes.
std::pair<int, int> place_in(std::span<const DeviceMesh> sub_meshes, int rank) {
  for (size_t s = 0; s < sub_meshes.size(); ++s) {
    const DeviceMesh& sub = sub_meshes[s];
    const std::optional<std::vector<int64_t>> coord = sub.coordinate(rank);
    if (!coord) continue;
    int64_t c = 0;  // the row-major index of the coordinate: the rank's index in sub.ranks()
    for (int64_t m = 0; m < sub.ndim(); ++m) c = c * sub.size(m) + (*coord)[size_t(m)];
    return {int(s), int(c)};
  }
  return {-1, -1};
}

// The orbits of a pipeline's ranks (PipelinePrograms' comment): a rank's key is its pipeline rank
// and the stage orbits of its whole column, the ranks at its place in every stage (itself in its
// own stages, its transfer peers in the others). Its own stages alone are not enough: the deadlock
// proof by orbit (passes/p2p_order.h) needs every member of an orbit to transfer with peers of one
// orbit. With a vocabulary that tp does not divide, the last tp rank of the last stage holds the
// short shard and is an orbit of its own, while the earlier stages' tp ranks 1.. share one program;
// without the column, rank 3 of a 2x1x4 mesh shared an orbit with rank 1, and the proof ran rank
// 1's sends to rank 5 for rank 3's to rank 7 (a deadlock that could not happen). Holds what
// orbit_of needs by value (a PipelinePrograms moves).
struct PipelineOrbitSpace {
  std::vector<DeviceMesh> sub_meshes;                             // [pipeline rank]
  std::vector<std::function<int(int)>> stage_orbit_of;           // [stage]
  int stages = 1;
  std::map<std::vector<int>, int> orbit_of_key;

  std::vector<int> key(int rank) const {
    const auto [s, c] = place_in(sub_meshes, rank);
    if (s < 0) return {};
    std::vector<int> k{s};
    for (int x = 0; x < stages; ++x)
      k.push_back(stage_orbit_of[size_t(x)](sub_meshes[size_t(x) % sub_meshes.size()].ranks()[size_t(c)]));
    return k;
  }
};

ir::RankOrbits pipeline_orbits(const PipelinePrograms& pp) {
  auto space = std::make_shared<PipelineOrbitSpace>();
  space->sub_meshes.assign(pp.meshes.begin(), pp.meshes.begin() + pp.split.ranks());
  for (const sharding::CompiledModel& c : pp.compiled) space->stage_orbit_of.push_back(c.orbits.orbit_of);
  space->stages = pp.split.stages;
  // One pass over the ranks (integers only: no program is built) finds each orbit's lowest rank.
  std::map<std::vector<int>, ir::RankOrbit> found;
  for (const DeviceMesh& sub : space->sub_meshes)
    for (int r : sub.ranks()) {
      ir::RankOrbit& o = found[space->key(r)];
      o.representative = o.ranks == 0 ? r : std::min(o.representative, r);
      ++o.ranks;
    }
  std::vector<std::pair<std::vector<int>, ir::RankOrbit>> sorted(found.begin(), found.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.second.representative < b.second.representative; });
  ir::RankOrbits out;
  for (auto& [k, o] : sorted) {
    space->orbit_of_key[k] = int(out.orbits.size());
    out.orbits.push_back(std::move(o));
  }
  out.orbit_of = [space](int rank) {
    auto it = space->orbit_of_key.find(space->key(rank));
    return it == space->orbit_of_key.end() ? -1 : it->second;
  };
  return out;
}

// A parameter read in several stages is one tensor wherever they run: trained in several (tied
// weights, whose gradients the programs sum across the stages' ranks) or read by two stages of one
// rank (interleaved), its shards must be alike in each, so its placements must agree. Throws
// ValueError naming the parameter, the stages and the placements otherwise.
void check_shared_params(const PipelinePrograms& pp, const std::string& source) {
  const int p = pp.split.ranks();
  const auto readers = pipeline::stages_by_param(
      pp.split.stages, [&](int x) -> const std::vector<ir::Value*>& { return pp.graphs[size_t(x)].graph.params(); });
  auto trainers = pipeline::stages_by_param(
      pp.split.stages, [&](int x) -> const std::vector<ir::Value*>& { return pp.graphs[size_t(x)].params; });
  for (const auto& [name, stages] : readers) {
    if (stages.size() < 2) continue;
    std::set<int> ranks;  // the pipeline ranks running them: fewer than the stages when one runs two
    for (int x : stages) ranks.insert(x % p);
    const bool one_rank = ranks.size() < stages.size();
    if (!one_rank && trainers[name].size() < 2) continue;
    auto placements = [&](int x) {
      const ir::Value* v = pp.graphs[size_t(x)].graph.find(name);
      return pp.compiled[size_t(x)].sharding.values[size_t(v->id)];
    };
    for (int x : stages)
      if (placements(x) != placements(stages[0]))
        DT_THROW(ValueError) << source << ": parameter " << name << " is read in pipeline stages " << stages[0]
                             << " and " << x << " (" << (one_rank ? "on one rank" : "tied weights, trained in both")
                             << ") but the plan places it " << placements_str(placements(stages[0])) << " in one and "
                             << placements_str(placements(x))
                             << " in the other: they must agree (give both modules' parameters one style)";
  }
}

// Builds `rank`'s program (PipelinePrograms::instantiate): the stages it runs partitioned for it
// (unless compile already did), the others read from their first rank's program for the value
// counts of their messages alone. Adds the partitions it made to *partitioned when given.
pipeline::StageProgram build_program(const PipelinePrograms& pp, int rank, int64_t* partitioned = nullptr) {
  const auto [s, c] = pp.place_of(rank);
  const int n = pp.split.stages, p = pp.split.ranks();
  std::vector<ir::Graph> own;  // reserved: the works point into it
  own.reserve(size_t(n));
  std::vector<pipeline::StageWork> works;
  works.reserve(size_t(n));
  std::vector<const pipeline::StageWork*> view;
  for (int x = 0; x < n; ++x) {
    const sharding::CompiledModel& cm = pp.compiled[size_t(x)];
    const ir::Graph* program = &cm.programs.front();
    if (x % p == s) {
      const auto at = std::find(cm.ranks.begin(), cm.ranks.end(), rank);
      if (at != cm.ranks.end()) {
        program = &cm.programs[size_t(at - cm.ranks.begin())];
      } else {
        own.push_back(sharding::partition(pp.graphs[size_t(x)].graph, cm.sharding, rank));
        program = &own.back();
        if (partitioned) ++*partitioned;
      }
    }
    works.push_back(pipeline::stage_work(pp.graphs[size_t(x)], *program, pp.options.training));
    view.push_back(&works.back());
  }
  const auto rank_at = [&pp](int s, int c) { return pp.meshes[size_t(s)].ranks()[size_t(c)]; };
  pipeline::StageProgram out = pipeline::stage_program(view, s, c, rank_at, pp.split.microbatches, pp.options);
  ir::verify(out.step.graph);
  return out;
}

}  // namespace

PipelinePrograms compile_pipeline(const ir::Graph& forward, const sharding::ParallelPlan& plan, const DeviceMesh& mesh,
                                  const pipeline::ProgramOptions& options, const std::optional<std::vector<int>>& ranks) {
  DT_CHECK(plan.pipeline) << "compile_pipeline without a pipeline section";
  const sharding::PipelinePlan& pp = *plan.pipeline;
  auto it = std::find(plan.mesh_dims.begin(), plan.mesh_dims.end(), pp.mesh_dim);
  if (it == plan.mesh_dims.end()) {
    std::string dims;
    for (const auto& d : plan.mesh_dims) dims += (dims.empty() ? "" : ", ") + d;
    DT_THROW(ValueError) << plan.source << ": the pipeline runs on mesh dim '" << pp.mesh_dim
                         << "' but the plan's mesh_dims are [" << dims << "]";
  }
  if (int64_t(plan.mesh_dims.size()) != mesh.ndim())
    DT_THROW(ValueError) << plan.source << ": plan names " << plan.mesh_dims.size() << " mesh dims but mesh "
                         << mesh.str() << " has " << mesh.ndim();
  const int64_t pp_dim = it - plan.mesh_dims.begin();
  const int p = int(mesh.size(pp_dim));
  pipeline::check_schedule(pipeline::parse_schedule(pp.schedule), p, pp.microbatches, pp.virtual_stages);
  PipelinePrograms out;
  out.pp_dim = pp_dim;
  out.split = pipeline::split_stages(forward, pp, p);
  out.graphs = pipeline::build_stages(forward, out.split, options.training, options.recompute);
  // The mesh dims whose plan shards a data input on dim 0 carry the batch through every stage.
  std::vector<bool> batch_dim(size_t(mesh.ndim()), false);
  for (const auto& [name, by_dim] : plan.inputs)
    for (const auto& [dim, pl] : by_dim)
      for (size_t m = 0; m < plan.mesh_dims.size(); ++m)
        if (plan.mesh_dims[m] == dim && int64_t(m) != pp_dim && pl.is_shard(0)) batch_dim[m] = true;
  for (int s = 0; s < out.split.stages; ++s) {
    const pipeline::StageGraph& sg = out.graphs[size_t(s)];
    out.meshes.push_back(mesh.sub_mesh(pp_dim, s % p));  // stage s runs on pipeline rank s mod p
    const sharding::ParallelPlan sub = stage_plan(plan, sg.graph);
    sharding::CompileOptions co;
    // Its first rank's program (every other place's is partitioned when a rank is instantiated)
    // and its orbits.
    co.ranks = {out.meshes.back().ranks().front()};
    co.orbits = true;
    co.adjust_plan = [&](sharding::ResolvedPlan& r) {
      Placements carried;  // of the values crossing stages
      for (int64_t m = 0; m < mesh.ndim(); ++m)
        if (m != pp_dim) carried.push_back(batch_dim[size_t(m)] ? Placement::shard(0) : Placement::replicate());
      if (carried.empty()) carried.push_back(Placement::replicate());
      auto carry = [&](const ir::Value* v) { return v->type.rank() > 0 ? carried : Placements(carried.size()); };
      for (const auto* list : {&sg.inputs_from_prev, &sg.grads_from_next})
        for (const ir::Value* v : *list) r.value_placements[size_t(v->id)] = carry(v);
      const auto& outs = sg.graph.outputs();
      const size_t crossing = sg.outputs_to_next.size() + sg.grads_to_prev.size();
      for (size_t i = 0; i < crossing; ++i) r.output_placements[i] = carry(outs[i]);
      for (size_t i = 0; i < sg.param_grads.size(); ++i)  // training: a gradient sits like its parameter
        r.output_placements[crossing + i] = r.value_placements[size_t(sg.params[i]->id)];
      r.gradient_of.assign(sg.graph.num_values(), -1);
      for (const auto& [v, gv] : sg.gradient_pairs)
        if (r.gradient_of[size_t(gv)] < 0) r.gradient_of[size_t(gv)] = int(v);
    };
    out.compiled.push_back(sharding::compile(sg.graph, sub, out.meshes.back(), co));
    out.stage_programs_partitioned += int64_t(out.compiled.back().programs.size());
  }
  check_shared_params(out, plan.source);
  for (const sharding::ModuleStyle& ms : plan.modules) {
    bool used = false;
    for (const ir::Value* p : forward.params())
      used = used || fnmatch(ms.pattern.c_str(), sharding::module_of(p->name).c_str(), 0) == 0;
    if (!used) DT_THROW(ValueError) << plan.source << ": plan pattern '" << ms.pattern << "' matches no module of " << forward.name();
  }
  out.options = options;
  out.options.schedule = pipeline::parse_schedule(pp.schedule);
  out.options.virtual_stages = pp.virtual_stages;
  out.orbits = pipeline_orbits(out);
  std::vector<int> built = ranks ? *ranks : mesh.ranks();
  for (int r : built)
    if (!mesh.contains(r)) DT_THROW(ValueError) << "rank " << r << " is not in mesh " << mesh.str();
  for (const ir::RankOrbit& o : out.orbits.orbits) built.push_back(o.representative);
  std::sort(built.begin(), built.end());
  built.erase(std::unique(built.begin(), built.end()), built.end());
  for (int r : built) out.programs.push_back(build_program(out, r, &out.stage_programs_partitioned));
  // The deadlock proof reads one program per orbit, whatever the mesh size (passes/p2p_order.h).
  std::vector<const ir::Graph*> reps;
  for (const ir::RankOrbit& o : out.orbits.orbits) reps.push_back(&out.orbit_program(o.representative).step.graph);
  passes::check_p2p_order_by_orbit(reps, out.orbits, "in the pipeline's stage programs");
  return out;
}

std::pair<int, int> PipelinePrograms::place_of(int rank) const {
  const auto place = place_in(std::span<const DeviceMesh>(meshes).first(size_t(split.ranks())), rank);
  if (place.first < 0) DT_THROW(ValueError) << "rank " << rank << " is in no stage's sub-mesh of the pipeline";
  return place;
}

pipeline::StageProgram PipelinePrograms::instantiate(int rank) const { return build_program(*this, rank); }

const pipeline::StageProgram* PipelinePrograms::find(int rank) const {
  const auto it = std::lower_bound(programs.begin(), programs.end(), rank,
                                   [](const pipeline::StageProgram& sp, int r) { return sp.rank < r; });
  return it == programs.end() || it->rank != rank ? nullptr : &*it;
}

const pipeline::StageProgram& PipelinePrograms::program(int rank) const {
  const pipeline::StageProgram* sp = find(rank);
  if (!sp) DT_THROW(ValueError) << "rank " << rank << " has no pipeline stage program here";
  return *sp;
}

const pipeline::StageProgram& PipelinePrograms::orbit_program(int rank) const {
  const int o = orbits.orbit_of(rank);
  if (o < 0) DT_THROW(ValueError) << "rank " << rank << " has no pipeline stage";
  return program(orbits.orbits[size_t(o)].representative);
}

int PipelinePrograms::stage_holding(const pipeline::StageProgram& sp, const std::string& name) const {
  for (int x : sp.stages)
    if (graphs[size_t(x)].graph.find(name)) return x;
  return -1;
}

const Placements& PipelinePrograms::placements_of(const pipeline::StageProgram& sp, const std::string& name) const {
  const int x = stage_holding(sp, name);
  DT_CHECK(x >= 0) << name << " is not a value of pipeline rank " << sp.stage << "'s stages";
  return compiled[size_t(x)].sharding.values[size_t(graphs[size_t(x)].graph.find(name)->id)];
}

std::vector<const ir::Graph*> PipelinePrograms::programs_by_rank(int n) const {
  std::vector<const ir::Graph*> out(static_cast<size_t>(n), nullptr);
  for (const pipeline::StageProgram& sp : programs) out[size_t(sp.rank)] = &sp.step.graph;
  for (int r = 0; r < n; ++r)
    if (!out[size_t(r)]) DT_THROW(ValueError) << "rank " << r << " has no pipeline stage program here";
  return out;
}

std::vector<Bindings> bind_stage_params(const PipelinePrograms& pp, const ir::Graph& forward,
                                        const std::map<std::string, Tensor>& weights, LocalPrograms programs, int n) {
  std::vector<Bindings> bind(static_cast<size_t>(n));
  for (const pipeline::StageProgram* p : programs) {
    const pipeline::StageProgram& sp = *p;
    Bindings& b = bind[size_t(sp.rank)];
    const std::map<std::string, Tensor> fresh = autodiff::fresh_state(sp.step);
    for (const ir::Value* v : sp.step.graph.params()) {
      if (fresh.count(v->name)) {
        b[v->name] = fresh.at(v->name);
        continue;
      }
      auto w = weights.find(v->name);
      if (w == weights.end()) DT_THROW(ValueError) << "the weights have no parameter " << v->name;
      const ir::Value* full = forward.find(v->name);
      if (w->second.dtype() != full->type.dtype || w->second.shape() != full->type.shape)
        DT_THROW(ValueError) << "weight " << v->name << " is " << dtype_name(w->second.dtype())
                             << shape_str(w->second.shape()) << ", the model expects " << ir::type_str(full->type);
      b[v->name] = sharding::shard_tensor(w->second, pp.meshes[size_t(sp.stage)], pp.placements_of(sp, v->name), sp.rank)
                       .clone();
    }
    if (!sp.seed.empty()) b[sp.seed] = Tensor::full({}, 1.0);
  }
  return bind;
}

void bind_microbatches(const PipelinePrograms& pp, const ir::Graph& forward, const std::map<std::string, Tensor>& batch,
                       std::vector<Bindings>& bind, LocalPrograms programs) {
  const int m = pp.split.microbatches;
  for (const ir::Value* v : forward.inputs()) {
    auto it = batch.find(v->name);
    if (it == batch.end()) DT_THROW(ValueError) << "the data has no tensor " << v->name << " (a data input of the model)";
    const int64_t rows = v->type.rank() > 0 ? v->type.shape[0] / m : 0;
    for (const pipeline::StageProgram* p : programs)
      if (const pipeline::StageProgram& sp = *p; std::find(sp.data.begin(), sp.data.end(), v->name) != sp.data.end())
        for (int k = 0; k < m; ++k) {
          const Tensor micro = v->type.rank() > 0 ? it->second.narrow(0, k * rows, rows) : it->second;
          bind[size_t(sp.rank)][pipeline::microbatch_input(v->name, k)] =
              sharding::shard_tensor(micro, pp.meshes[size_t(sp.stage)], pp.placements_of(sp, v->name), sp.rank);
        }
  }
}

namespace {

// Where a pipeline's ranks run: every rank as a thread of this process (world null), or, under
// mpi, this process's rank of `world` alone, with what every process must know exchanged.
struct StageRanks {
  const PipelinePrograms& pp;
  int n = 0;
  ProcessGroup* world = nullptr;
  std::optional<pipeline::StageProgram> own;  // mpi: this process's rank's program, built here
  std::vector<const pipeline::StageProgram*> local;  // the programs run here

  // Threads: every rank's program (compiled); mpi: this process's rank's alone, built from the
  // compiled orbits (PipelinePrograms::instantiate), whatever the mesh size.
  StageRanks(const PipelinePrograms& pp, int n, ProcessGroup* world) : pp(pp), n(n), world(world) {
    if (!world) {
      pp.programs_by_rank(n);  // every rank has one
      for (const pipeline::StageProgram& sp : pp.programs) local.push_back(&sp);
      return;
    }
    own = pp.instantiate(world->rank());
    local = {&*own};
  }
  StageRanks(const StageRanks&) = delete;

  int me() const { return world ? world->rank() : -1; }  // -1: every rank is here
  bool here(int rank) const { return !world || world->rank() == rank; }
  // The first rank of the last stage: it holds the loss and the model's outputs.
  int last_stage_rank() const { return pp.meshes.back().ranks().front(); }
  // Runs every rank here (threads: all of them; mpi: this process's; the others' results empty).
  std::vector<runtime::RankResult> run(const std::vector<Bindings>& bind, const runtime::LaunchOptions& lo) const {
    if (!world) return runtime::launch(pp.programs_by_rank(n), bind, lo);
    std::vector<runtime::RankResult> res(static_cast<size_t>(n));
    const int r = world->rank();
    res[size_t(r)] = runtime::run_rank(own->step.graph, bind[size_t(r)], *world, lo);
    return res;
  }
  // Returns every rank's row(rank) (as f64, equal lengths): under mpi each process computes its
  // own and all_gathers them.
  std::vector<std::vector<double>> rows(const std::function<std::vector<double>(int rank)>& row) const {
    std::vector<std::vector<double>> out(static_cast<size_t>(n));
    if (!world) {
      for (int r = 0; r < n; ++r) out[size_t(r)] = row(r);
      return out;
    }
    const std::vector<double> mine = row(world->rank());
    std::vector<double> all(mine.size() * size_t(n));
    world->all_gather(mine.data(), all.data(), mine.size(), DType::f64)->wait();
    for (int r = 0; r < n; ++r)
      out[size_t(r)].assign(all.begin() + std::ptrdiff_t(size_t(r) * mine.size()),
                            all.begin() + std::ptrdiff_t(size_t(r + 1) * mine.size()));
    return out;
  }
  // Under mpi: `root`'s tensors of `types` (known to every process) broadcast to every process.
  void broadcast(std::vector<Tensor>& tensors, const std::vector<ir::TensorType>& types, int root) const {
    if (!world) return;
    if (world->rank() != root) {
      tensors.clear();
      for (const ir::TensorType& t : types) tensors.push_back(Tensor::uninitialized(t.shape, t.dtype));
    }
    for (Tensor& t : tensors) {
      t = t.contiguous();
      if (t.numel() > 0) world->broadcast(t.raw_data(), size_t(t.numel()), t.dtype(), root)->wait();
    }
  }
  // Under mpi: rank 0 receives every other rank's tensors named by names_of(its program) into
  // by_rank[rank] (types from the programs, which every process has; point to point, rank by rank).
  using Named = std::vector<std::pair<std::string, ir::TensorType>>;
  void gather_to_root(std::vector<std::map<std::string, Tensor>>& by_rank,
                      const std::function<Named(const pipeline::StageProgram&)>& names_of) const {
    if (!world) return;
    const int me = world->rank();
    for (int r = 1; r < n; ++r) {
      if (me != 0 && me != r) continue;
      // Every rank of an orbit has its program's names and types (rank 0 built the orbits' only).
      for (const auto& [name, type] : names_of(pp.orbit_program(r))) {
        Tensor t = me == 0 ? Tensor::uninitialized(type.shape, type.dtype) : by_rank[size_t(me)].at(name).contiguous();
        if (t.numel() > 0) {
          if (me == 0) world->recv(t.raw_data(), size_t(t.numel()), t.dtype(), r)->wait();
          else world->send(t.raw_data(), size_t(t.numel()), t.dtype(), 0)->wait();
        }
        if (me == 0) by_rank[size_t(r)][name] = t;
      }
    }
  }
};

runtime::LaunchOptions launch_options(const JobOptions& job) {
  runtime::LaunchOptions lo;
  lo.comm = job.comm;
  lo.comm_arena = job.comm_arena;
  return lo;
}

}  // namespace

RunResult run_pipeline(const PipelinePrograms& pp, const ir::Graph& forward, const std::map<std::string, Tensor>& weights,
                       const TensorMap& inputs, const JobOptions& job, const RunOptions& run, ProcessGroup* world) {
  const StageRanks ranks(pp, int(job.mesh.size()), world);
  std::vector<Bindings> bind = bind_stage_params(pp, forward, weights, ranks.local, ranks.n);
  bind_microbatches(pp, forward, std::map<std::string, Tensor>(inputs.begin(), inputs.end()), bind, ranks.local);
  runtime::LaunchOptions lo = launch_options(job);
  lo.repeat = run.repeat;
  lo.node_hook = run.node_hook;
  const std::vector<runtime::RankResult> res = ranks.run(bind, lo);
  const int last = ranks.last_stage_rank();
  RunResult out;
  out.root = ranks.me() <= 0;
  out.outputs = res[size_t(last)].outputs;
  std::vector<ir::TensorType> types;
  for (const ir::Value* v : pp.orbit_program(last).step.graph.outputs()) types.push_back(v->type);
  ranks.broadcast(out.outputs, types, last);
  const auto rows = ranks.rows([&](int r) {
    const runtime::RunStats& s = res[size_t(r)].stats;
    return std::vector<double>{s.seconds * 1e3, double(s.peak_bytes)};
  });
  for (int r = 0; r < ranks.n; ++r) out.ranks.push_back({r, rows[size_t(r)][0], size_t(rows[size_t(r)][1]), 0, 0, 0});
  return out;
}

TrainResult train_pipeline(ir::Graph forward, const std::map<std::string, Tensor>& weights,
                           const std::map<std::string, Tensor>& data, const TrainOptions& options,
                           const ShardedTrainOptions& sharded) {
  if (options.steps < 1) DT_THROW(ValueError) << "steps must be >= 1, got " << options.steps;
  autodiff::validate(options.optimizer);
  pipeline::ProgramOptions po;
  po.training = true;
  po.optimizer = options.optimizer;
  po.with_grads = options.keep_first_grads;
  po.recompute = options.recompute;
  // On threads every rank's program; under mpi the orbits' alone (each process builds its own).
  const bool mpi = sharded.job.backend == runtime::Backend::mpi;
  const PipelinePrograms pp = compile_pipeline(forward, sharded.job.plan, sharded.job.mesh, po,
                                               mpi ? std::optional(std::vector<int>{}) : std::nullopt);
  const int n = int(sharded.job.mesh.size());
  for (int r = 0; r < n; ++r) pp.orbit_program(r);  // every rank has a stage
  const std::vector<std::string>& dims = sharded.job.plan.mesh_dims;
  const int64_t pp_dim = std::find(dims.begin(), dims.end(), sharded.job.plan.pipeline->mesh_dim) - dims.begin();
  for (const ir::Value* v : forward.inputs())
    if (!data.count(v->name)) DT_THROW(ValueError) << "the data has no tensor " << v->name << " (a data input of the model)";
  TrainResult result;
  auto train = [&](ProcessGroup* world) {
    const StageRanks ranks(pp, n, world);
    std::vector<Bindings> bind = bind_stage_params(pp, forward, weights, ranks.local, n);
    runtime::LaunchOptions lo = launch_options(sharded.job);
    lo.update_params_in_place = true;
    const int loss_rank = ranks.last_stage_rank();
    std::vector<std::map<std::string, Tensor>> grads(static_cast<size_t>(n));  // the first step's, by rank
    for (int s = 0; s < options.steps; ++s) {
      std::map<std::string, Tensor> batch;
      for (const ir::Value* v : forward.inputs()) batch[v->name] = batch_for_step(*v, data.at(v->name), s);
      bind_microbatches(pp, forward, batch, bind, ranks.local);
      const std::vector<runtime::RankResult> res = ranks.run(bind, lo);
      const auto rows = ranks.rows([&](int r) {
        const runtime::RankResult& rr = res[size_t(r)];
        return std::vector<double>{r == loss_rank ? rr.outputs[0].item() : 0.0, rr.stats.seconds * 1e3,
                                   double(rr.stats.peak_bytes)};
      });
      const double loss = rows[size_t(loss_rank)][0];
      result.losses.push_back(loss);
      if (!std::isfinite(loss) && options.stop_on_non_finite) {  // every rank stops at the same step
        result.non_finite_step = s + 1;  // the updates below are not applied
        break;
      }
      double ms = 0;
      for (const std::vector<double>& row : rows) {
        ms = std::max(ms, row[1]);
        result.peak_bytes = std::max(result.peak_bytes, size_t(row[2]));
      }
      result.step_ms.push_back(ms);
      for (const pipeline::StageProgram* p : ranks.local) {
        const pipeline::StageProgram& sp = *p;
        const std::vector<Tensor>& outs = res[size_t(sp.rank)].outputs;
        for (size_t k = 0; k < sp.step.updates.size(); ++k) bind[size_t(sp.rank)][sp.step.updates[k]] = outs[sp.first_update + k];
        if (s == 0 && options.keep_first_grads)
          for (size_t i = 0; i < sp.step.params.size(); ++i) grads[size_t(sp.rank)][sp.step.params[i]] = outs[sp.step.grads_begin + i];
      }
      if (options.on_step && ranks.me() <= 0) options.on_step(s + 1, loss, ms);
    }
    result.root = ranks.me() <= 0;
    std::vector<std::map<std::string, Tensor>> state(static_cast<size_t>(n));
    for (const pipeline::StageProgram* sp : ranks.local)
      for (const ir::Value* v : sp->step.graph.params()) state[size_t(sp->rank)][v->name] = bind[size_t(sp->rank)].at(v->name);
    const bool want_state = !world || sharded.gather_state, want_grads = options.keep_first_grads;
    if (want_state)
      ranks.gather_to_root(state, [](const pipeline::StageProgram& sp) {
        StageRanks::Named out;
        for (const ir::Value* v : sp.step.graph.params()) out.emplace_back(v->name, v->type);
        return out;
      });
    if (want_grads)
      ranks.gather_to_root(grads, [](const pipeline::StageProgram& sp) {
        StageRanks::Named out;
        for (size_t i = 0; i < sp.step.params.size(); ++i)
          out.emplace_back(sp.step.params[i], sp.step.graph.outputs()[sp.step.grads_begin + i]->type);
        return out;
      });
    if (!result.root) return;
    // The trained values: each rank's shards and the full tensors assembled from each stage's.
    std::map<std::string, const pipeline::StageProgram*> owner;
    for (const pipeline::StageProgram& sp : pp.programs)
      for (const ir::Value* v : sp.step.graph.params()) owner[v->name] = &sp;
    auto assemble = [&](const std::vector<std::map<std::string, Tensor>>& by_rank, std::map<std::string, Tensor>& full) {
      std::map<std::string, std::vector<Tensor>> locals;
      for (int r = 0; r < n; ++r)
        for (const auto& [name, t] : by_rank[size_t(r)]) {
          locals[name].resize(static_cast<size_t>(n));
          locals[name][size_t(r)] = t;
        }
      for (const auto& [name, shards] : locals) {
        const pipeline::StageProgram& sp = *owner.at(name);
        // State tensors sit like their parameter (adamw's scalar step: replicated).
        const std::string param = pp.stage_holding(sp, name) >= 0 ? name : name.substr(0, name.rfind('.'));
        const ir::Value* v = sp.step.graph.find(name);
        Shape shape = forward.find(param)->type.shape;
        Placements placements = pp.placements_of(sp, param);
        if (v->type.rank() == 0) {
          shape = {};
          placements = Placements(placements.size());
        }
        result.placements[name] = placements_str(placements);
        result.sub_meshes[name] = {pp_dim, sp.stage};
        full[name] = sharding::assemble_tensor(shards, pp.meshes[size_t(sp.stage)], placements, shape);
      }
    };
    if (want_state) {
      result.rank_state = state;
      assemble(state, result.state);
    }
    if (want_grads) assemble(grads, result.first_grads);
  };
  if (sharded.job.backend != runtime::Backend::mpi) {
    train(nullptr);
    return result;
  }
  runtime::run_world(runtime::Backend::mpi, n, [&](ProcessGroup& world) { train(&world); }, sharded.job.comm);
  return result;
}

}  // namespace dt::job
