// Runs a verified Graph on CPU for one rank.
//
// Nodes run in order through their registry kernels. Each intermediate buffer is released right
// after its last reader (last-use indices computed once per graph), so peak memory is the largest
// set of simultaneously live results, which RunStats reports. Collectives are issued without
// blocking: the Work and the buffers it touches are kept until the matching wait_tensor, which
// blocks on it. Node hooks see the start and end time of every node (for traces).
//
// Comm buffers: a program whose nodes carry `arena_offset` attributes (the plan-comm-buffers
// pass) gets those results placed in a SymmetricArena when one is set: the kernel writes straight
// into the arena at that offset, the same on every rank and in every run. The plan is checked
// when the interpreter is built (passes/buffer_planner.h); without an arena the offsets are
// ignored and buffers are allocated as usual.
//
// Fusion: a linear whose only reader is a relu/gelu/silu runs as one kernel with it, and so does
// the rotary embedding's seven-op chain (interpreter_fusion.h says which chains and why); the
// absorbed nodes then do no work of their own (their hooks still fire, with the few nanoseconds
// they take). Results are bitwise equal to the unfused run; set_fusion(false) turns it off
// (tests, profile --no-fuse). Likewise an all_gather along a later dim followed by its join copy
// is gathered straight into the join's layout (GatherJoin).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/comm/process_group.h"
#include "dtensor/comm/symmetric_arena.h"
#include "dtensor/core/tensor.h"
#include "dtensor/ir/graph.h"
#include "dtensor/runtime/interpreter_fusion.h"
#include "dtensor/runtime/packed_weights.h"

namespace dt::runtime {

using Clock = std::chrono::steady_clock;
// Process groups of a rank by the graph's group names.
using GroupMap = std::map<std::string, std::shared_ptr<ProcessGroup>>;
// Tensors bound to graph inputs and parameters, by value name.
using Bindings = std::map<std::string, Tensor>;

struct RunStats {
  double seconds = 0;     // wall time of run()
  size_t peak_bytes = 0;  // peak bytes of live node results (views of inputs and params excluded)
  size_t nodes = 0;
  size_t arena_bytes = 0;  // bytes of the symmetric arena the program's comm buffers occupy
  size_t arena_buffers = 0;  // results placed in the arena during the run
};

// Called after every node with its index and start/end times.
using NodeHook = std::function<void(const ir::Node& node, size_t index, Clock::time_point start, Clock::time_point end)>;

class Interpreter {
 public:
  // `graph` must outlive the interpreter and satisfy verify().
  explicit Interpreter(const ir::Graph& graph);
  // It keeps a reference to the graph: a temporary one would dangle.
  explicit Interpreter(ir::Graph&&) = delete;

  void set_node_hook(NodeHook hook) { hook_ = std::move(hook); }
  // Places the program's planned comm buffers in `arena`'s region of `arena_rank` (ValueError
  // when the arena is smaller than the plan). Pass null to allocate them normally again.
  void set_comm_arena(std::shared_ptr<SymmetricArena> arena, int arena_rank);
  // Arena bytes the program's plan needs (0: no arena_offset set).
  size_t arena_bytes() const { return arena_bytes_; }
  // The (value, offset) of each comm buffer placed in the arena during the last run, in order.
  const std::vector<std::pair<const ir::Value*, size_t>>& last_placements() const { return placements_; }
  // Returns the graph outputs. Every data input and parameter must be bound with its declared
  // dtype and shape (IoError otherwise). Graphs with collectives need `groups` holding this
  // rank's group for each group its collectives name.
  std::vector<Tensor> run(const Bindings& bindings, const GroupMap& groups = {}, RunStats* stats = nullptr);

  // In-place ops (OpDef::in_place: the optimizer updates) write into a bound parameter's own
  // tensor only when this is on: the caller hands its parameter tensors over and finds them
  // updated after run() (the training loop, which owns copies of the user's weights). Off (the
  // default), such an op first copies the bound tensor, and the copy is what the program reads
  // from then on: the caller's tensors never change. Data inputs and views of bindings are always
  // copied before an in-place op writes them.
  void set_update_params_in_place(bool on) { update_params_ = on; }
  // Enables or disables the epilogue fusions (on by default).
  void set_fusion(bool on) { fuse_ = on; }
  bool fusion() const { return fuse_; }
  // The fusable pairs of the graph (used when fusion() is on), in head order.
  const std::vector<EpilogueFusion>& fusions() const { return fusions_; }
  // The rotary embedding chains of the graph (used when fusion() is on).
  const std::vector<RotaryFusion>& rotary_fusions() const { return rotary_; }
  const std::vector<ActivationGradFusion>& activation_grad_fusions() const { return activation_grads_; }
  // The all_gathers gathered straight into their join's layout (when fusion() is on).
  const std::vector<GatherJoin>& gather_joins() const { return gather_joins_; }

  // The packed copies of the constant linear weights, kept between runs (packed_weights.h).
  const PackedWeights& packed_weights() const { return packed_; }

  // Returns, per node index, the ids of the values released after it.
  const std::vector<std::vector<int>>& release_plan() const { return release_after_; }

 private:
  const ir::Graph& g_;
  std::vector<std::vector<int>> release_after_;
  bool has_collectives_ = false;
  NodeHook hook_;
  std::vector<int64_t> arena_offset_;  // per node: arena offset of result 0, or -1
  size_t arena_bytes_ = 0;
  std::shared_ptr<SymmetricArena> arena_;
  int arena_rank_ = 0;
  std::vector<std::pair<const ir::Value*, size_t>> placements_;
  std::vector<EpilogueFusion> fusions_;
  // per node: index into fusions_, or -1; fusion_of_tail_ is kRotaryMember for a rotary chain's
  // nodes other than its add
  std::vector<int> fusion_of_head_, fusion_of_tail_;
  static constexpr int kRotaryMember = -2;
  std::vector<RotaryFusion> rotary_;
  std::vector<int> rotary_of_tail_;  // per node: index into rotary_, or -1
  std::vector<ActivationGradFusion> activation_grads_;
  // per node: index into activation_grads_ of the fusion it is the forward / backward node of, or -1
  std::vector<int> activation_grad_forward_, activation_grad_backward_;
  std::vector<GatherJoin> gather_joins_;
  std::vector<int> gather_join_of_;  // per node of a gather join's chain: index into gather_joins_, or -1
  bool fuse_ = true;
  bool update_params_ = false;
  PackedWeights packed_;
};

// Returns this rank's groups for the graph's declarations: `world` itself for a group whose ranks
// are world's ranks in order, else world.new_group(ranks) for the groups that contain this rank.
GroupMap make_groups(const ir::Graph& graph, ProcessGroup& world);

}  // namespace dt::runtime
