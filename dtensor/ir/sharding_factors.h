// Op sharding rules as data, in the style of Shardy's OpShardingRule: every operand and result dim
// is mapped onto factors (named iteration-space sizes), and a factor's kind says what sharding it
// does to the result.
//
//   linear(x [B, S, k], w [o, k], b [o]) -> y [B, S, o]
//     factors: B, S, o (pass-through), k (reduction)
//     x dims -> (B)(S)(k), w dims -> (o)(k), b dims -> (o), y dims -> (B)(S)(o)
//
// A strategy shards factors on mesh dims. Sharding pass-through factor f on mesh dim m makes every
// dim mapped to f (first factor of its dim) S(that dim) on m, in operands and results; operands
// without f are R on m. Sharding a reduction factor leaves the result P(sum) on m. A dim with no
// factor (empty list) must be replicated: normalised dims of layer_norm, the sequence dim of causal
// attention, a broadcast size-1 dim.
//
// A dim that a view merges or splits maps to several factors, major first ([B, S, H] ->
// [B, S, heads, D]: H -> (heads, D)). Only its first factor can be sharded, and only when that
// factor divides evenly by the mesh dims sharding it (otherwise the torch.chunk boundaries of the
// dim and of the factor differ).
//
// Partial operands: an op that is linear in all its operands jointly (add, sub, view, transpose,
// sum, cat, ...) maps P(op) operands to a P(op) result when every operand is P(op) on that mesh dim
// (`partial_all`); an op linear in each operand separately (mul, matmul, linear, the v of
// attention) maps one P(sum) operand, the others R, to a P(sum) result (`partial_one_of`, a bit
// per operand). `added_once` names an operand added to the result (linear's bias): when the result
// is P(sum) on a mesh dim, only group index 0 of that dim adds it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/ir/graph.h"
#include "dtensor/ir/op_kind.h"

// These types live in ir, beside the ops, because a rule reads nothing but the node (shapes,
// attributes): every op family registers its rule with its OpDef (sharding_<family>.cc, added by
// ops_<family>.cc), and dtensor/sharding reads OpDef::sharding_rule. Nothing here knows meshes or
// placements; propagation (dtensor/sharding) turns factors into placements.
namespace dt::ir {

// pass_through: sharded in the operands, sharded in the result. reduction: sharding it leaves a
// P(sum) result. expanded: the op can run with it sharded although the result does not have it
// (stays replicated): the partitioner expands the node into a sharded form with its own
// collectives (cross_entropy on class-sharded logits: loss parallel, see ir/ops/loss.cc).
enum class FactorKind : uint8_t { pass_through, reduction, expanded };

inline constexpr int kMaxDimFactors = 8;

// The factors of one tensor dim, major first; empty: the dim must be replicated.
struct DimFactors {
  int8_t count = 0;
  std::array<int8_t, kMaxDimFactors> factor{};
  int first() const { return count > 0 ? factor[0] : -1; }
};

// The factors of one operand or result: one DimFactors per tensor dim.
using TensorFactors = std::vector<DimFactors>;

struct OpShardingRule {
  std::vector<FactorKind> factor_kinds;
  std::vector<int64_t> factor_sizes;
  std::vector<TensorFactors> operands;  // one per node operand
  std::vector<TensorFactors> results;   // one per node result
  bool partial_all = false;
  uint32_t partial_one_of = 0;
  int added_once = -1;
  // A result dim may be sharded on a factor other than its first, which makes it a blocked shard
  // S(d,blocks=b) (layout/placement.h); propagation allows it only for the gradient of a value laid
  // out that way (cat of the pieces of a fused projection's output in the backward).
  bool minor_results = false;
  // Results that read no factor (a bit per result): they stay replicated whatever the factors'
  // placements. AdamW's step counter, computed from the replicated scalar step, is one: without
  // the bit, a result lacking a pass-through factor would make every sharded strategy invalid and
  // the update would run on gathered parameters, gradients and state.
  uint32_t replicated_results = 0;
  // The mapping keeps its partial_one_of operand partial past an op that would otherwise reduce it
  // first (add's P(sum) + R: the R operand added once). Free only when that operand has no other
  // reader: one that needs it reduced would reduce it anyway, and the result would be reduced
  // again later. Propagation takes such a mapping only for a sole reader.
  bool defers_reduction = false;

  // Other factor mappings of the same op, each complete (factors, operands, results, partial
  // fields), for an op whose operands can be split in ways one mapping cannot state: grouped-query
  // attention shards heads either grouped (q and k/v together, when the mesh divides the k/v
  // heads) or by q heads alone with k/v whole (sliced locally by the op's `expand`). Propagation
  // evaluates every mapping's strategies and keeps the cheapest; ties go to this one, then to the
  // alternatives in order.
  std::vector<OpShardingRule> alternatives;

  // Adds a factor and returns its id.
  int add_factor(int64_t size, FactorKind kind = FactorKind::pass_through);
  int num_factors() const { return int(factor_kinds.size()); }
  // Returns "x[(B)(S)(k)] w[(o)(k)] -> [(B)(S)(o)]" with factor letters for debugging and tests.
  std::string str() const;
};

// Returns a DimFactors holding one factor (or none for f < 0).
DimFactors dim_of(int factor);

// Computes the rule of one node (its operands, attributes and types are set).
using RuleFn = OpShardingRule (*)(const Node& node);

// Writes a node's local form when it is not the op itself (OpDef::expand, op_registry.h).
struct ExpandContext;
using ExpandFn = Value* (*)(ExpandContext& ctx);

// Whether a node's result is the mean over operand 0's rows (dim 0) of a per-row value
// (OpDef::row_mean, op_registry.h).
using RowMeanFn = bool (*)(const Node& node);

// A family's rule table entry: ops_<family>.cc hands its table to OpTable::set_sharding_rules.
struct RuleEntry {
  OpKind op;
  RuleFn rule;
  ExpandFn expand = nullptr;     // the few ops that have one (loss parallel)
  RowMeanFn row_mean = nullptr;  // the losses that are a mean over rows (cross_entropy)
};

// The family tables, one per ops_<family>.cc (sharding_<family>.cc beside it).
std::vector<RuleEntry> attention_sharding_rules();
// scaled_dot_product_attention_backward's rule, beside the forward's (sharding_attention.cc);
// grad_sharding_rules lists it.
OpShardingRule attention_backward_rule(const Node& node);
// Its local form in the grouped-query alternative mapping (q heads sharded, k/v whole).
Value* expand_grouped_attention_backward(ExpandContext& ctx);
// cross_entropy_backward's loss-parallel expansion, beside the forward's (sharding_loss.cc);
// grad_sharding_rules lists it.
Value* expand_cross_entropy_backward(ExpandContext& ctx);
std::vector<RuleEntry> elementwise_sharding_rules();
std::vector<RuleEntry> grad_sharding_rules();   // ops_grad.cc
std::vector<RuleEntry> index_sharding_rules();
std::vector<RuleEntry> optim_sharding_rules();  // ops_optim.cc
std::vector<RuleEntry> linear_sharding_rules();
std::vector<RuleEntry> loss_sharding_rules();
std::vector<RuleEntry> norm_sharding_rules();
std::vector<RuleEntry> reduce_sharding_rules();
std::vector<RuleEntry> shape_sharding_rules();
std::vector<RuleEntry> conv_sharding_rules();

// Shared builders for the rule files.
namespace rule_util {
// Returns the factors of elementwise operands broadcast (numpy rules) to `result`: one
// pass-through factor per result dim; operand dims of size 1 against a larger result dim get none.
void broadcast_factors(OpShardingRule& rule, const std::vector<const Shape*>& operands, const Shape& result);
// Returns factors for x -> view(x, out): groups of dims with equal products share factors.
void view_factors(OpShardingRule& rule, const Shape& in, const Shape& out);
// Returns one pass-through factor per dim of `shape`, except `replicated` dims (none).
TensorFactors pass_through_dims(OpShardingRule& rule, const Shape& shape, const std::vector<bool>& replicated = {});
// The same with dim `dim` (negative: from the end) replicated: the dim a softmax normalises or a
// slice cuts.
TensorFactors pass_through_except(OpShardingRule& rule, const Shape& shape, int64_t dim);
// The same with the last `trailing` dims replicated: the dims a norm normalises, or the sequence
// and head dims of attention, which the caller may then give factors of its own.
TensorFactors pass_through_leading(OpShardingRule& rule, const Shape& shape, size_t trailing);
// Appends `t` as the factors of the next operand and of the next result: an op whose result is laid
// out like that operand (unary ops, softmax, the norms' x).
void operand_and_result(OpShardingRule& rule, const TensorFactors& t);
// Returns the rule an einsum-style spec states for the node's operands and result 0, as PyTorch's
// DTensor writes the rules of mm/bmm/addmm: "bmk,bkn->bmn", "...k,ok,o->...o". A letter is one
// factor: pass-through when the result has it, a reduction when only operands do. "..." stands
// for the leading dims, aligned from the right against the result's (numpy broadcasting). A dim of
// size 1 where the factor is larger (a broadcast dim) gets no factor, nor does a '_' (a dim that
// must stay replicated: a conv's spatial dims, whose windows read their neighbours); factors are
// numbered in the order the spec first names them, the leading dims first. Throws InternalError
// when the spec does not fit the node's ranks (a rule-file bug). Partial fields are the caller's.
OpShardingRule einsum(const Node& node, std::string_view spec);
}  // namespace rule_util

}  // namespace dt::ir
