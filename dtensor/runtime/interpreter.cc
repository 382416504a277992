#include "dtensor/runtime/interpreter.h"

#include <algorithm>
#include <array>
#include <unordered_map>

#include "dtensor/comm/collectives.h"
#include "dtensor/core/error.h"
#include "dtensor/io/tensor_binding.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/printer.h"
#include "dtensor/ir/use_lists.h"
#include "dtensor/kernels/ops_grad.h"
#include "dtensor/passes/buffer_planner.h"

namespace dt::runtime {
namespace {

// Runs one node's kernel `f`. A user error it throws (`gather: index 256 is out of range for a dim
// of size 256`) gains the node: its place in the text when the graph was parsed, and its statement
// (`node %12 = gather(%wpe.weight, %11) {dim = 0} : f32[1, 300, 32]: `), so that a run of an
// imported model says which of its gathers failed. The error keeps its type.
template <class F>
void run_kernel_of(const ir::Graph& g, const ir::Node& n, size_t index, F&& f) {
  try {
    f();
  } catch (Error& e) {
    // A node with a large inline constant prints long: its statement is cut (the location or the
    // result name already identify it).
    constexpr size_t kMaxStatement = 160;
    std::string statement = ir::print_node(n);
    if (statement.size() > kMaxStatement) statement = statement.substr(0, kMaxStatement) + " ...";
    // A node made from an imported model's node names that node too (SourceLoc::origin).
    const std::string origin = n.loc.origin ? std::string(" (") + n.loc.origin + ")" : std::string();
    const std::string context = n.loc.line > 0
                                    ? "node " + statement + origin + ": "
                                    : "graph " + g.name() + ", node " + std::to_string(index) + " " + statement + origin + ": ";
    e.locate(g.source().empty() ? "<input>" : g.source(), n.loc.line, n.loc.col, context);
    throw;
  }
}

// Pending collectives of one run, by the value they produce.
class RunCommContext : public ir::CommContext {
 public:
  explicit RunCommContext(const GroupMap& groups) : groups_(groups) {}

  ProcessGroup& group(const std::string& name) override {
    auto it = groups_.find(name);
    if (it == groups_.end() || !it->second)
      DT_THROW(CommError) << "this rank has no process group " << name << " (not a member, or not created)";
    return *it->second;
  }
  void issue(const ir::Value* result, WorkPtr work, std::vector<Tensor> keep_alive) override {
    pending_[result] = Pending{std::move(work), std::move(keep_alive)};
  }
  void wait(const ir::Value* result) override {
    auto it = pending_.find(result);
    DT_CHECK(it != pending_.end()) << "wait on %" << result->name << " which was not issued";
    it->second.work->wait();
    pending_.erase(it);  // only now may the collective's buffers go
  }
  // Waits for anything still in flight (a verified graph leaves nothing).
  void drain() {
    for (auto& [v, p] : pending_) p.work->wait();
    pending_.clear();
  }

 private:
  struct Pending {
    WorkPtr work;
    std::vector<Tensor> keep_alive;
  };
  const GroupMap& groups_;
  std::unordered_map<const ir::Value*, Pending> pending_;
};

// Live bytes of node results, counted once per storage (views share their base's storage).
class MemoryMeter {
 public:
  void exclude(const Tensor& t) {
    if (t.defined()) external_.emplace(t.storage().get(), 0);
  }
  void acquire(const Tensor& t) {
    if (!t.defined()) return;
    Storage* s = t.storage().get();
    if (external_.count(s)) return;
    auto [it, inserted] = live_.emplace(s, 0);
    if (inserted) {
      live_bytes_ += s->nbytes();
      peak_ = std::max(peak_, live_bytes_);
    }
    ++it->second;
  }
  void release(const Tensor& t) {
    if (!t.defined()) return;
    auto it = live_.find(t.storage().get());
    if (it == live_.end()) return;
    if (--it->second == 0) {
      live_bytes_ -= it->first->nbytes();
      live_.erase(it);
    }
  }
  size_t peak() const { return peak_; }
  bool external(const Tensor& t) const { return t.defined() && external_.count(t.storage().get()); }

 private:
  std::unordered_map<const Storage*, int> external_;
  std::unordered_map<const Storage*, int> live_;
  size_t live_bytes_ = 0;
  size_t peak_ = 0;
};

// Per node, the index in `fusions` of the fusion whose `nodes_of(fusion)` names it, or -1: how the
// run loop finds, at each node, the fusion that node heads, ends or skips.
template <class Fusion, class NodesOf>
std::vector<int> index_by_node(size_t node_count, const std::vector<Fusion>& fusions, NodesOf nodes_of) {
  std::vector<int> index(node_count, -1);
  for (size_t f = 0; f < fusions.size(); ++f)
    for (int node : nodes_of(fusions[f])) index[size_t(node)] = int(f);
  return index;
}

}  // namespace

Interpreter::Interpreter(const ir::Graph& graph) : g_(graph), packed_(graph) {
  const auto& nodes = g_.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    // Collectives, blocking ones included, and ops that read their group's size (the in-place
    // gather's copy-in) need the communication context.
    const ir::OpDef& def = ir::op_def(nodes[i]->op);
    if (def.is_collective()) has_collectives_ = true;
    for (const ir::AttrSpec& a : def.attrs)
      if (a.kind == ir::AttrKind::group) has_collectives_ = true;
  }
  arena_bytes_ = passes::check_comm_buffer_plan(g_);
  arena_offset_.assign(nodes.size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i) arena_offset_[i] = ir::arena_offset(*nodes[i]);
  const FusionAnalysis analysis(g_, arena_offset_);
  fusions_ = find_epilogue_fusions(analysis);
  fusion_of_head_ = index_by_node(nodes.size(), fusions_, [](const EpilogueFusion& f) { return std::array{f.head}; });
  fusion_of_tail_ = index_by_node(nodes.size(), fusions_, [](const EpilogueFusion& f) { return std::array{f.tail}; });
  rotary_ = find_rotary_fusions(analysis);
  rotary_of_tail_ = index_by_node(nodes.size(), rotary_, [](const RotaryFusion& f) { return std::array{f.tail}; });
  for (const RotaryFusion& f : rotary_)
    for (int m : f.members) fusion_of_tail_[size_t(m)] = kRotaryMember;
  // A fused rotary chain reads x, cos and sin at its add node: they live at least until then.
  std::unordered_map<int, size_t> read_by_rotary;
  for (const RotaryFusion& f : rotary_)
    for (const ir::Value* v : {f.x, f.cos, f.sin}) read_by_rotary[v->id] = std::max(read_by_rotary[v->id], size_t(f.tail));
  activation_grads_ = find_activation_grad_fusions(analysis);
  activation_grad_forward_ =
      index_by_node(nodes.size(), activation_grads_, [](const ActivationGradFusion& f) { return std::array{f.forward}; });
  activation_grad_backward_ =
      index_by_node(nodes.size(), activation_grads_, [](const ActivationGradFusion& f) { return std::array{f.backward}; });
  gather_joins_ = find_gather_joins(analysis);
  gather_join_of_ = index_by_node(nodes.size(), gather_joins_,
                                  [](const GatherJoin& j) { return std::array{j.gather, j.wait, j.view, j.permute, j.join}; });
  release_after_.assign(nodes.size(), {});
  // A result is released after its last reader (a result nobody reads, right after its node).
  const ir::UseLists& uses = analysis.uses;
  const ir::NodePositions& position = analysis.position;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const ir::Value* r : nodes[i]->results) {
      if (uses.is_output(r)) continue;  // returned
      const auto readers = uses.users(r);
      size_t last = readers.empty() ? i : position(readers.back());
      if (auto it = read_by_rotary.find(r->id); it != read_by_rotary.end()) last = std::max(last, it->second);
      release_after_[last].push_back(r->id);
    }
  for (auto& ids : release_after_) std::sort(ids.begin(), ids.end());  // by value id, as they were created
}

void Interpreter::set_comm_arena(std::shared_ptr<SymmetricArena> arena, int arena_rank) {
  if (arena) {
    if (arena_rank < 0 || arena_rank >= arena->world_size())
      DT_THROW(ValueError) << "arena rank " << arena_rank << " out of range for an arena of " << arena->world_size()
                           << " ranks";
    if (arena->capacity() < arena_bytes_)
      DT_THROW(ValueError) << "symmetric arena of " << arena->capacity() << " bytes per rank is smaller than the "
                           << arena_bytes_ << " bytes the program's comm buffers need";
  }
  arena_ = std::move(arena);
  arena_rank_ = arena_rank;
}

std::vector<Tensor> Interpreter::run(const Bindings& bindings, const GroupMap& groups, RunStats* stats) {
  const Clock::time_point start = Clock::now();
  std::vector<Tensor> env(g_.num_values());
  MemoryMeter meter;
  auto bind = [&](const ir::Value* v) {
    auto it = bindings.find(v->name);
    if (it == bindings.end())
      DT_THROW(IoError) << "no tensor bound to " << (v->kind == ir::ValueKind::param ? "parameter " : "input ") << v->name;
    io::check_binding(*v, it->second, "the bindings");
    env[size_t(v->id)] = it->second;
    meter.exclude(it->second);
  };
  for (const ir::Value* v : g_.inputs()) bind(v);
  for (const ir::Value* v : g_.params()) bind(v);

  RunCommContext comm(groups);
  std::unordered_map<const ir::Value*, Tensor> gathering;  // gather joins in flight, by the gather's result
  std::vector<Tensor> kept_derivative(activation_grads_.size());  // by activation grad fusion
  std::vector<Tensor> in, out;
  const auto& nodes = g_.nodes();
  const bool use_arena = arena_ && arena_bytes_ > 0;
  if (use_arena) arena_->begin_iteration(arena_rank_);
  placements_.clear();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& n = *nodes[i];
    const Clock::time_point t0 = hook_ ? Clock::now() : Clock::time_point{};
    in.clear();
    for (const ir::Value* v : n.operands) in.push_back(env[size_t(v->id)]);
    out.assign(n.results.size(), Tensor());
    void* placed = nullptr;
    if (use_arena && arena_offset_[i] >= 0) {
      const ir::TensorType& t = n.result()->type;
      const size_t offset = arena_->place(arena_rank_, size_t(arena_offset_[i]), t.nbytes());
      out[0] = arena_->tensor(arena_rank_, offset, t.dtype, t.shape);
      placed = out[0].raw_data();
      placements_.emplace_back(n.result(), offset);
    }
    const int head_of = fuse_ ? fusion_of_head_[i] : -1;
    // A node whose result another node's kernel binds: drop its operands, release what ends here.
    auto skip_node = [&] {
      in.clear();
      for (int id : release_after_[i]) {
        meter.release(env[size_t(id)]);
        env[size_t(id)] = Tensor();
      }
      if (hook_) hook_(n, i, t0, Clock::now());
    };
    if (fuse_ && fusion_of_tail_[i] != -1) {
      // Computed by its linear's kernel (the result is already bound and counted), or a member of
      // a rotary chain that its add computes (the result is never bound).
      skip_node();
      continue;
    }
    if (fuse_ && gather_join_of_[i] >= 0) {
      const GatherJoin& j = gather_joins_[size_t(gather_join_of_[i])];
      const ir::Value* joined = nodes[size_t(j.join)]->result();
      if (int(i) == j.gather) {
        run_kernel_of(g_, n, i, [&] {
          Tensor x = in[0].contiguous();
          Tensor dst = Tensor::uninitialized(joined->type.shape, joined->type.dtype);
          comm.issue(n.result(), dt::all_gather_into_tensor(comm.group(n.attr_str("group")), dst, x, j.dim), {x, dst});
          gathering[n.result()] = std::move(dst);
        });
      } else if (int(i) == j.wait) {
        comm.wait(n.operands[0]);
        auto it = gathering.find(n.operands[0]);
        meter.acquire(it->second);
        env[size_t(joined->id)] = std::move(it->second);
        gathering.erase(it);
      }
      skip_node();  // the view, permute and join nodes: their results are the gathered one
      continue;
    }
    if (fuse_ && rotary_of_tail_[i] >= 0) {
      const RotaryFusion& f = rotary_[size_t(rotary_of_tail_[i])];
      run_kernel_of(g_, n, i, [&] {
        out[0] = dt::rotary_embedding(env[size_t(f.x->id)], env[size_t(f.cos->id)], env[size_t(f.sin->id)]);
      });
    } else if (fuse_ && activation_grad_forward_[i] >= 0) {
      const int f = activation_grad_forward_[i];
      run_kernel_of(g_, n, i, [&] {
        // x's last use but the backward's, which reads the derivative instead: when only env and
        // `in` hold its storage, the derivative is written over it (peak memory as unfused).
        const bool owned = in[0].storage().use_count() == 2;
        ActivationAndGrad r = dt::gelu_and_grad(in[0], n.attr_str("approximate"), /*overwrite_x=*/owned);
        out[0] = std::move(r.value);
        kept_derivative[size_t(f)] = std::move(r.derivative);
      });
      meter.acquire(kept_derivative[size_t(f)]);
    } else if (fuse_ && activation_grad_backward_[i] >= 0) {
      Tensor& d = kept_derivative[size_t(activation_grad_backward_[i])];
      run_kernel_of(g_, n, i, [&] { out[0] = dt::mul(in[0], d); });
      meter.release(d);
      d = Tensor();
    } else if (head_of >= 0) {
      const EpilogueFusion& f = fusions_[size_t(head_of)];
      run_kernel_of(g_, n, i, [&] {
        const PackedWeight* packed = packed_.get(i, in[1]);
        const Tensor bias = in.size() == 3 ? in[2] : Tensor();
        out[0] = f.other ? dt::linear_binary(in[0], in[1], bias, f.other_op, env[size_t(f.other->id)], packed)
                         : dt::linear_act(in[0], in[1], bias, f.act, packed);
      });
      const ir::Value* tail = nodes[size_t(f.tail)]->result();
      DT_CHECK(out[0].shape() == tail->type.shape && out[0].dtype() == tail->type.dtype)
          << "fused linear produced " << out[0].str() << " for %" << tail->name << " of type " << ir::type_str(tail->type);
      // The pre-activation value is never read (the activation is its only reader): both values
      // name the one buffer, counted once by the meter.
      meter.acquire(out[0]);
      env[size_t(tail->id)] = out[0];
    } else {
      const ir::OpDef& def = ir::op_def(n.op);
      // A buffer the caller owns is written only when handed over (set_update_params_in_place)
      // and not read-only (a file's bytes, tensor.h); else the program goes on with a copy of it,
      // counted as its own.
      for (size_t k = 0; def.in_place && k < n.results.size(); ++k) {
        const int j = def.written_operand(k);
        const ir::Value* w = j >= 0 ? n.operands[size_t(j)] : nullptr;
        if (!w || !meter.external(in[size_t(j)]) ||
            (update_params_ && w->kind == ir::ValueKind::param && !in[size_t(j)].storage()->read_only()))
          continue;
        in[size_t(j)] = in[size_t(j)].clone();
        env[size_t(w->id)] = in[size_t(j)];
        if (w->kind == ir::ValueKind::result) meter.acquire(in[size_t(j)]);  // released as w
      }
      run_kernel_of(g_, n, i, [&] {
        // An op reading a packed weight (packed_weights.h) gets its packed copy.
        const PackedWeight* packed = def.packs_weight ? packed_.get(i, in[1]) : nullptr;
        def.kernel(ir::KernelArgs{n, in, out, has_collectives_ ? &comm : nullptr, packed});
      });
    }
    DT_CHECK(!placed || (out[0].defined() && out[0].raw_data() == placed))
        << ir::op_name(n.op) << " kernel did not write into its arena buffer";
    for (size_t k = 0; k < out.size(); ++k) {
      const ir::TensorType& want = n.results[k]->type;
      DT_CHECK(out[k].defined() && out[k].shape() == want.shape && out[k].dtype() == want.dtype)
          << ir::op_name(n.op) << " kernel produced " << (out[k].defined() ? out[k].str() : "nothing") << " for %"
          << n.results[k]->name << " of type " << ir::type_str(want);
      meter.acquire(out[k]);
      env[size_t(n.results[k]->id)] = std::move(out[k]);
    }
    in.clear();  // drop references before releasing
    for (int id : release_after_[i]) {
      meter.release(env[size_t(id)]);
      env[size_t(id)] = Tensor();
    }
    if (fuse_ && activation_grad_forward_[i] >= 0) {
      // x's other reader, the backward node, reads the kept derivative instead.
      Tensor& x = env[size_t(activation_grads_[size_t(activation_grad_forward_[i])].x->id)];
      meter.release(x);
      x = Tensor();
    }
    if (hook_) hook_(n, i, t0, Clock::now());
  }
  comm.drain();
  std::vector<Tensor> results;
  for (const ir::Value* v : g_.outputs()) results.push_back(env[size_t(v->id)]);
  if (stats) {
    stats->seconds = std::chrono::duration<double>(Clock::now() - start).count();
    stats->peak_bytes = meter.peak();
    stats->nodes = nodes.size();
    stats->arena_bytes = use_arena ? arena_bytes_ : 0;
    stats->arena_buffers = placements_.size();
  }
  return results;
}

GroupMap make_groups(const ir::Graph& graph, ProcessGroup& world) {
  GroupMap groups;
  const int me = world.global_ranks()[size_t(world.rank())];
  for (const ir::GroupDecl& decl : graph.groups()) {
    if (decl.ranks == world.global_ranks()) {
      // Non-owning: the world outlives the run.
      groups[decl.name] = std::shared_ptr<ProcessGroup>(std::shared_ptr<ProcessGroup>(), &world);
      continue;
    }
    for (int r : decl.ranks) {
      if (r < 0 || r >= world.size())
        DT_THROW(ValueError) << "group " << decl.name << " names rank " << r << " but the world has "
                             << world.size() << " ranks";
    }
    bool member = std::find(decl.ranks.begin(), decl.ranks.end(), me) != decl.ranks.end();
    if (member) groups[decl.name] = world.new_group(decl.ranks);
  }
  return groups;
}

}  // namespace dt::runtime
