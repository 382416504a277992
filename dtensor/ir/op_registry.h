// The op registry: for every OpKind, its schema (operands and typed attributes with defaults),
// its shape/dtype inference and its CPU kernel, registered together per op family
// (ops_linear.cc, ops_elementwise.cc, ops_norm.cc, ops_shape.cc, ops_attention.cc, ops_reduce.cc,
// ops_loss.cc, ops_collective.cc, ops_collective_variants.cc, ops_bucketing.cc, ops_index.cc). op_def(kind) is a
// table lookup; the table is complete (every OpKind registered exactly once, checked when the
// registry is first built).
//
// The sharding rule is typed (sharding_factors.h: factors of the node's dims, which need only its
// shapes and attributes) and registered by the op family's register_* function from its
// sharding_<family>.cc table, so nothing has to install it at run time.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dtensor/comm/process_group_fwd.h"
#include "dtensor/comm/reduce_op.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/core/tensor.h"
#include "dtensor/ir/attr.h"
#include "dtensor/ir/graph.h"
#include "dtensor/ir/op_kind.h"
#include "dtensor/ir/sharding_factors.h"

namespace dt::ir {

struct OperandSpec {
  std::string_view name;
  bool optional = false;  // may be omitted (only trailing operands)
  bool variadic = false;  // one or more (only the last operand, e.g. cat's inputs)
};

// Communication state collective kernels need; the interpreter implements it.
class CommContext {
 public:
  virtual ~CommContext() = default;
  // Returns this rank's process group for the declared group `name` (CommError when the rank is
  // not a member).
  virtual ProcessGroup& group(const std::string& name) = 0;
  // Records an issued collective producing `result`: `keep_alive` holds its input and output
  // buffers until the matching wait.
  virtual void issue(const Value* result, WorkPtr work, std::vector<Tensor> keep_alive) = 0;
  // Blocks until the collective that produced `result` completes.
  virtual void wait(const Value* result) = 0;
};

// Arguments of one kernel call: the node, its operand tensors, its result slots (to be filled).
// A result slot the caller already holds a tensor in is a preallocated destination (a comm buffer
// in the symmetric arena): kernels of ops with OpDef::writes_preallocated_out write into it
// (output_buffer() below) instead of allocating.
struct KernelArgs {
  const Node& node;
  std::span<const Tensor> in;
  std::span<Tensor> out;
  CommContext* comm = nullptr;  // null when the graph has no collectives
  // Ops with OpDef::packs_weight: the packed copy of operand 1 the interpreter keeps between runs
  // (runtime/packed_weights.h), or null (not packed, or f32 GEMMs take the blas path).
  const PackedWeight* packed = nullptr;
};

// Appends the result types of `node` (operands and attributes already set) to `out`; throws a
// dt::Error subclass whose message says what is wrong (the verifier adds file:line:col).
using InferFn = void (*)(const Node& node, const Graph& graph, std::vector<TensorType>& out);
using KernelFn = void (*)(const KernelArgs& args);
// What a per-rank partitioner knows when it copies a node into one rank's program: the global
// node, the local result types, and where this rank's block of an operand dim starts (nullopt when
// the dim is not sharded). dtensor/sharding fills it from the placements; ir sees no placements.
struct LocalizeContext {
  const Node& node;
  const std::vector<TensorType>& local_results;
  std::function<std::optional<int64_t>(int operand, int dim)> shard_start;
};
// Rewrites attributes holding sizes of sharded dims to their local values, and the op when its
// local form differs (a vocabulary-parallel embedding becomes masked_embedding). `op` and
// `attrs` start as the node's.
using LocalizeFn = void (*)(const LocalizeContext& ctx, OpKind& op, std::vector<Attr>& attrs);
// Attributes by name, as builders and expansions give them (complete_attrs fills in defaults).
using NamedAttrs = std::vector<std::pair<std::string_view, Attr>>;

// What a per-rank partitioner offers an op whose local form is several nodes (OpDef::expand): the
// global node, its operands on this rank, where this rank's block of an operand dim starts
// (nullopt when the dim is not sharded), and ways to add nodes to the rank's program. dtensor/
// sharding fills it from the placements; ir sees no placements.
struct ExpandContext {
  const Node& node;
  std::span<Value* const> operands;  // the node's operands on this rank
  TensorType local_result;           // the type of the node's (one) result on this rank
  std::function<std::optional<int64_t>(int operand, int dim)> shard_start;
  // Appends `op` (attributes completed) with one result of `type`, named after the node's result:
  // that name itself for suffix "", else a fresh name built from it and `suffix`.
  std::function<Value*(OpKind op, std::vector<Value*> operands, const NamedAttrs& attrs, const TensorType& type,
                       const std::string& suffix)>
      append;
  // Ops with several results (the attention backward): each result's type on this rank
  // (local_result is the first's), and the local values of results 1.. that the expansion leaves
  // here (it returns result 0's).
  std::vector<TensorType> local_results;
  std::vector<Value*> other_results;
  // As append, with a result per entry of `types`: result j named after the node's result
  // names[j].first, with suffix names[j].second (the same rule).
  std::function<std::vector<Value*>(OpKind op, std::vector<Value*> operands, const NamedAttrs& attrs,
                                    const std::vector<TensorType>& types,
                                    const std::vector<std::pair<int, std::string>>& names)>
      append_results;
  // `local` is a statistic per row of operand `operand` (shape [its local dim 0]) computed from
  // this rank's block of that operand's dim `dim`: returns it reduced with `op` over the mesh dims
  // sharding that dim (the rows stay sharded as the operand's dim 0 is).
  std::function<Value*(Value* local, ReduceOp op, int operand, int dim)> reduce_over;
  // Values an expansion leaves for a later one, by a local value (the loss's row statistics for
  // the backward of the same local logits); one map for the whole rank's program.
  std::unordered_map<const Value*, std::vector<Value*>>& kept;
};

// Records the ops computing the node's operand gradients (grad_rule.h).
class GradContext;
using GradFn = void (*)(GradContext& ctx);

// The GEMMs of a matmul-like node: `batch` products of [m, k] x [k, n].
struct GemmShape {
  int64_t batch = 1, m = 0, k = 0, n = 0;
  double flops() const { return 2.0 * double(batch) * double(m) * double(k) * double(n); }
};

struct OpDef {
  OpKind kind = OpKind::count;
  std::vector<OperandSpec> operands;
  std::vector<AttrSpec> attrs;
  InferFn infer = nullptr;
  KernelFn kernel = nullptr;
  // Issues asynchronously: its result must go through wait_tensor before any reader. (The
  // blocking one_shot_all_reduce communicates but needs no wait: is_collective() is the test for
  // "communicates".)
  bool needs_wait = false;
  // Collectives only (null for every other op): the bytes a rank with index `index` in a group
  // of `group_size` sends when it runs the node. Reports, the cross-rank check and the tests use
  // it; a node is a collective exactly when its op has this.
  int64_t (*bytes_sent)(const Node& node, int64_t group_size, int64_t index) = nullptr;
  // A point-to-point transfer (send, recv): it pairs with one peer's counterpart instead of
  // every member's, so the cross-rank check orders it by the deadlock proof (passes/p2p_order.h)
  // rather than the per-group collective sequence; its effect is seen by another rank, so passes
  // never merge (CSE) or drop (DCE) it or its wait_tensor.
  bool point_to_point = false;
  // Writes its results into operand buffers (in_place_operands): the in-place collectives
  // (all_reduce_, the in-place all_gather) into operand 0, the optimizer updates into the
  // parameter and its state. A reader of such a buffer placed after it reads the result, one
  // placed before it the old contents, so passes keep such readers on their side of it and never
  // pull it.
  bool in_place = false;
  // In-place ops: result k is written into the buffer of operand in_place_operands[k] (empty:
  // result 0 into operand 0, the collectives). The optimizer updates write the parameter and
  // its state tensors (ops_optim.cc).
  std::vector<int> in_place_operands = {};
  // Result 0 is a buffer of its own that no other value aliases (a kernel output, not a view):
  // comm lowering may reduce into it in place when nothing else reads it.
  bool fresh_result = false;
  // Exists to feed one collective (a bucket copy-in, a chunk-cat, a clone before an in-place
  // collective): overlap scheduling moves it together with that collective.
  bool comm_prep = false;
  // The kernel writes result 0 into a preallocated out[0] when given one (comm buffers; only
  // these ops carry the `arena_offset` attribute).
  bool writes_preallocated_out = false;
  // Results may share operand 0's storage (views, waits, in-place collectives): the buffer
  // planner follows these to find how long a comm buffer is read.
  bool result_aliases_operand = false;
  // Result 0 is operand 0's buffer itself, whole (wait_tensor hands on its collective's output,
  // not a copy or a view of part of it): the memory estimate counts the two as one buffer.
  bool result_is_operand = false;
  // Reads parameters as they are stored: an optimizer update works on each rank's fsdp shard of
  // parameter, gradient and state, so propagation offers a stored-only (fsdp) shard to it, where
  // every other reader gets the gathered parameter.
  bool reads_stored = false;
  // An optimizer step of one parameter (sgd_update, adamw_update): the training step places it as
  // soon as its gradient is complete, and profiles count it as the optimizer phase.
  bool optimizer_update = false;
  // Activations a linear's fused epilogue can apply (kernels/ops.h): the activation this node
  // computes, or Activation::none when its attributes ask for one the epilogue lacks. Null: not
  // an activation the epilogue knows.
  Activation (*fusable_activation)(const Node& node) = nullptr;
  // Ops reading a 2-d weight parameter that the colwise / rowwise styles shard (linear: weight
  // [out, in]; embedding: weight [num, dim]): the weight's dim indexing the op's output features.
  // colwise shards that dim, rowwise the other (sharding/parallel_plan.cc). Any other reader of a
  // weight is taken as a linear's (0).
  int weight_output_dim = 0;
  // The rank of such a weight: 2, or -1 for any rank >= 2 whose dims 0 and 1 are the output and
  // input channels (conv's [O, C/groups, *kernel]: colwise shards the output channels).
  int weight_rank = 2;
  // Reads operand 1 as a linear's weight [out, in] and multiplies by its packed copy when given
  // one (KernelArgs::packed): the interpreter packs such a weight once if it is a parameter
  // nothing writes (runtime/packed_weights.h). linear and all_gather_linear_in.
  bool packs_weight = false;
  // Matmul-like ops only (linear, matmul, bmm): the GEMMs the node performs, from its operand and
  // result types (`dtensor profile` times a plain GEMM of each shape against the node).
  GemmShape (*gemm_shape)(const Node& node) = nullptr;
  // Floating-point operations of one run of the node where counted (the matmul-like ops and
  // attention, which count multiply and add as two); null elsewhere.
  double (*flops)(const Node& node) = nullptr;
  // How the op's dims shard (sharding_<family>.cc); null: no rule, propagation replicates every
  // operand (and says so in a warning).
  RuleFn sharding_rule = nullptr;
  // Null for ops whose attributes hold no sizes of shardable dims (copied as they are).
  LocalizeFn localize_attrs = nullptr;
  // Ops whose local form on some shardings is not the op itself (cross_entropy on class-sharded
  // logits is loss parallel: row statistics, all-reduced, then combined; sharding_loss.cc, where
  // its rule declares the class dim `expanded`): writes that form and returns the local result,
  // or returns null where the op runs as it is. Set with the sharding rule (RuleEntry).
  ExpandFn expand = nullptr;
  // Ops whose result may be the mean over operand 0's rows of a per-row value (cross_entropy's
  // default reduction); says whether this node's is. On logits sharded on their rows a rank's
  // local op gives the mean of its own rows: the partitioner weights it by the rank's share of
  // the rows (uneven shards too), so the ranks' results are a partial sum of the loss. Set with
  // the sharding rule (RuleEntry), whose rows factor is a reduction.
  RowMeanFn row_mean = nullptr;
  // The gradient rule (grad_rule.h); null for ops no gradient flows through (collectives, the
  // backward and optimizer ops themselves, integer-valued ops): autodiff names the op when a
  // gradient must flow through one.
  GradFn grad = nullptr;

  std::string_view name() const { return op_name(kind); }
  // The operand whose buffer result k is written into, or -1 (not an in-place op).
  int written_operand(size_t result) const {
    if (!in_place) return -1;
    if (in_place_operands.empty()) return result == 0 ? 0 : -1;
    return result < in_place_operands.size() ? in_place_operands[result] : -1;
  }
  // The operand whose buffer result k is (result_is_operand, or written into by an in-place op),
  // or -1: a buffer of its own.
  int buffer_operand(size_t result) const { return result_is_operand && result == 0 ? 0 : written_operand(result); }
  // Communicates with the other members of its `group` (bytes_sent is defined).
  bool is_collective() const { return bytes_sent != nullptr; }
  int min_operands() const;
  int max_operands() const;  // -1: unbounded (variadic)
  // Returns the index of attribute `name` in `attrs`, or -1.
  int attr_index(std::string_view name) const;
  // Returns "x, weight, bias?" for error messages.
  std::string operand_signature() const;
};

// Returns the definition of `op` (the registry is built on first use, thread-safe).
const OpDef& op_def(OpKind op);
// Tests only (the fallback for an op without a rule): replaces the sharding rule of `op` and
// returns the previous one. Not thread-safe against concurrent readers.
RuleFn replace_sharding_rule_for_test(OpKind op, RuleFn rule);

// Registration, used only by the ops_*.cc files and the registry itself.
class OpTable {
 public:
  void add(OpDef def);
  OpDef& at(OpKind op) { return defs_[size_t(op)]; }
  // Sets the sharding rule of each listed op, already added, that has none yet.
  void set_sharding_rules(const std::vector<RuleEntry>& rules);

 private:
  friend const OpDef& op_def(OpKind);
  friend RuleFn replace_sharding_rule_for_test(OpKind, RuleFn);
  OpDef defs_[kNumOps];
};
void register_linear_ops(OpTable& table);
void register_elementwise_ops(OpTable& table);
void register_norm_ops(OpTable& table);
void register_shape_ops(OpTable& table);
void register_attention_ops(OpTable& table);
void register_reduce_ops(OpTable& table);
void register_loss_ops(OpTable& table);
void register_collective_ops(OpTable& table);
void register_collective_variant_ops(OpTable& table);
void register_bucketing_ops(OpTable& table);
void register_grad_ops(OpTable& table);
void register_optim_ops(OpTable& table);
void register_index_ops(OpTable& table);
void register_conv_ops(OpTable& table);
void register_p2p_ops(OpTable& table);

// Helpers shared by the ops_*.cc files.

// `arena_offset`: byte offset of the op's result in the rank's symmetric arena, set by the
// plan-comm-buffers pass (-1: allocate normally). Last attribute of every op with
// writes_preallocated_out.
AttrSpec arena_offset_attr();
// `group` (required) and `op = sum`, the attributes every collective spells the same way.
AttrSpec group_attr();
AttrSpec reduce_op_attr();
// Returns this rank's process group for the node's `group` (kernels of collectives).
ProcessGroup& kernel_group(const KernelArgs& args);
// Returns the node's arena_offset, or -1 for ops without one (not writes_preallocated_out).
int64_t arena_offset(const Node& node);
// Returns out[k] when the interpreter preallocated it (checking dtype and shape against the
// node's result type), else a new uninitialized tensor of the result's type: kernels using it
// write every element.
Tensor output_buffer(const KernelArgs& args, size_t k = 0);

// bytes_sent of the collectives, by algorithm family (s: the bytes of all operands, n: group size):
namespace comm_bytes {
int64_t gather(const Node& node, int64_t n, int64_t index);          // (n-1)·s: s is this rank's block
int64_t gather_inplace(const Node& node, int64_t n, int64_t index);  // (n-1)/n·s: s is the whole buffer
int64_t reduce(const Node& node, int64_t n, int64_t index);          // 2(n-1)/n·s (reduce-scatter + gather)
int64_t reduce_scatter(const Node& node, int64_t n, int64_t index);  // (n-1)/n·s
int64_t broadcast(const Node& node, int64_t n, int64_t index);       // s on the root, else 0
int64_t all_to_all(const Node& node, int64_t n, int64_t index);      // all but its own split
int64_t point_to_point(const Node& node, int64_t n, int64_t index);  // s for a send, 0 for a recv
}  // namespace comm_bytes

namespace localize_util {
// localize_attrs of ops whose `shape` attribute is their result's shape (view, reshape, expand,
// full, slice_backward): the local result's shape.
void shape_attr(const LocalizeContext& ctx, OpKind& op, std::vector<Attr>& attrs);
}  // namespace localize_util

namespace infer_util {
// Throws DTypeError unless every operand has the same dtype.
void require_same_dtype(const Node& node);
// Throws DTypeError unless operand i is floating.
void require_floating(const Node& node, int i);
// Throws ShapeError "<op> expects operand <name> of rank <r>, got <type>".
void require_rank(const Node& node, int i, int64_t rank);
// Returns the size of the node's `group`; throws ValueError when it is undeclared or empty.
int group_size(const Node& node, const Graph& graph);
// Throws ValueError unless the node's arena_offset is -1 or a non-negative multiple of 64.
void check_arena_offset(const Node& node);
}  // namespace infer_util

}  // namespace dt::ir
