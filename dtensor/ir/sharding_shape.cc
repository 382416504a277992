// Sharding rules of the shape ops. view and reshape map merged or split dims onto several factors
// (sharding_rule.h), and so do unsqueeze, squeeze and flatten; transpose and permute move factors; slice, split and cat need their dim whole
// (replicated) unless the slice keeps everything, or the pieces are equal and the whole is a
// blocked shard (a fused qkv projection: pieces_rule). All of them are linear, so partial operands pass
// through. embedding passes the index dims and the hidden dim through; its vocabulary dim is a
// reduction factor: a table sharded by rows (vocabulary parallel) gives a P(sum) result, which
// the partitioner computes with masked_embedding (rows of other shards read as zeros). arange has
// no operands and a replicated result, as have full and constant.
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/sharding_factors.h"

namespace dt::ir {
namespace {


OpShardingRule embedding_rule(const Node& n) {
  OpShardingRule r;
  TensorFactors idx = rule_util::pass_through_dims(r, n.operands[0]->type.shape);
  const int v = r.add_factor(n.operands[1]->type.shape[0], FactorKind::reduction);
  const int h = r.add_factor(n.operands[1]->type.shape[1]);
  TensorFactors out = idx;
  out.push_back(dim_of(h));
  r.operands = {std::move(idx), {dim_of(v), dim_of(h)}};
  r.results = {std::move(out)};
  r.partial_one_of = 0b10;
  return r;
}

OpShardingRule view_rule(const Node& n) {
  OpShardingRule r;
  rule_util::view_factors(r, n.operands[0]->type.shape, n.result()->type.shape);
  r.partial_all = true;
  return r;
}

OpShardingRule permute_like(const Node& n, const std::vector<int64_t>& perm) {
  OpShardingRule r;
  TensorFactors x = rule_util::pass_through_dims(r, n.operands[0]->type.shape);
  TensorFactors y(x.size());
  for (size_t i = 0; i < perm.size(); ++i) y[i] = x[size_t(perm[i])];
  r.operands = {std::move(x)};
  r.results = {std::move(y)};
  r.partial_all = true;
  return r;
}

OpShardingRule transpose_rule(const Node& n) {
  const int64_t rank = n.operands[0]->type.rank();
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) perm[size_t(i)] = i;
  std::swap(perm[size_t(normalize_dim(n.attr_int("dim0"), rank))], perm[size_t(normalize_dim(n.attr_int("dim1"), rank))]);
  return permute_like(n, perm);
}

OpShardingRule permute_rule(const Node& n) {
  const int64_t rank = n.operands[0]->type.rank();
  std::vector<int64_t> perm;
  for (int64_t d : n.attr_ints("dims")) perm.push_back(normalize_dim(d, rank));
  return permute_like(n, perm);
}

// Returns the rule of an op that keeps every dim but needs `dim` whole.
OpShardingRule along_dim_rule(const Node& n, int64_t dim, bool keep_dim_sharded) {
  OpShardingRule r;
  const Shape& x = n.operands[0]->type.shape;
  std::vector<bool> rep(x.size(), false);
  const int64_t d = normalize_dim(dim, int64_t(x.size()));
  rep[size_t(d)] = !keep_dim_sharded;
  TensorFactors t = rule_util::pass_through_dims(r, x, rep);
  for (size_t i = 0; i < n.operands.size(); ++i) r.operands.push_back(t);
  for (size_t i = 0; i < n.results.size(); ++i) r.results.push_back(t);
  r.partial_all = true;
  return r;
}

OpShardingRule slice_rule(const Node& n) {
  const Shape& x = n.operands[0]->type.shape;
  const int64_t d = normalize_dim(n.attr_int("dim"), int64_t(x.size()));
  const bool whole = n.result()->type.shape[size_t(d)] == x[size_t(d)] && n.attr_int("step") == 1;
  return along_dim_rule(n, d, whole);
}

// Returns the common size of `pieces` along dim d, or -1 when they differ or there are fewer than 2.
int64_t equal_piece(const std::vector<Value*>& pieces, size_t d) {
  if (pieces.size() < 2) return -1;
  const int64_t size = pieces[0]->type.shape[d];
  for (const Value* v : pieces)
    if (v->type.shape[d] != size) return -1;
  return size;
}

// The whole dim of a split into equal pieces (or of a cat of equal operands) as two factors
// (pieces, piece) and each piece's dim as (piece): sharding the minor factor `piece` is the fused
// qkv pattern. Its whole dim is then a blocked shard S(d,blocks=pieces) (layout/placement.h: every
// rank holds its chunk of each piece, as a fused colwise projection leaves it) and each piece a
// plain S(d), so the split runs locally on each rank's blocks. Sharding the major factor has no
// sharded form of the pieces (a warning and a gather, as before).
OpShardingRule pieces_rule(const Node& n, const std::vector<Value*>& pieces, const Value& whole, bool split) {
  OpShardingRule r = along_dim_rule(n, n.attr_int("dim"), false);
  const size_t d = size_t(normalize_dim(n.attr_int("dim"), whole.type.rank()));
  const int64_t piece = equal_piece(pieces, d);
  if (piece <= 0) return r;
  const int count = r.add_factor(int64_t(pieces.size()));
  const int each = r.add_factor(piece);
  ir::DimFactors w;
  w.count = 2;
  w.factor[0] = int8_t(count);
  w.factor[1] = int8_t(each);
  auto& wholes = split ? r.operands : r.results;
  auto& parts = split ? r.results : r.operands;
  for (TensorFactors& t : wholes) t[d] = w;
  for (TensorFactors& t : parts) t[d] = dim_of(each);
  // A cat of sharded pieces makes a blocked whole: the gradient of a fused projection's output.
  r.minor_results = !split;
  return r;
}

OpShardingRule split_rule(const Node& n) {
  if (n.results.size() == 1) return along_dim_rule(n, n.attr_int("dim"), true);
  return pieces_rule(n, n.results, *n.operands[0], /*split=*/true);
}

OpShardingRule cat_rule(const Node& n) {
  // Operands differ in the cat dim only, so they share the factors of the other dims.
  return pieces_rule(n, n.operands, *n.result(), /*split=*/false);
}

OpShardingRule arange_rule(const Node&) {
  OpShardingRule r;
  r.results = {TensorFactors(1)};
  return r;
}

// expand: broadcasting like the elementwise ops (a stretched size-1 dim may be sharded in the
// result while the operand stays replicated); linear.
OpShardingRule expand_rule(const Node& n) {
  OpShardingRule r;
  rule_util::broadcast_factors(r, {&n.operands[0]->type.shape}, n.result()->type.shape);
  r.partial_all = true;
  return r;
}

// full: a constant, replicated (its result may still be sliced by a reader's placement).
OpShardingRule full_rule(const Node& n) {
  OpShardingRule r;
  r.results.push_back(TensorFactors(n.result()->type.shape.size()));
  return r;
}

}  // namespace

std::vector<RuleEntry> shape_sharding_rules() {
  return {{OpKind::arange, arange_rule},   {OpKind::cat, cat_rule},         {OpKind::embedding, embedding_rule},
          {OpKind::permute, permute_rule}, {OpKind::reshape, view_rule},    {OpKind::slice, slice_rule},
          {OpKind::split, split_rule},     {OpKind::transpose, transpose_rule}, {OpKind::view, view_rule},
          {OpKind::expand, expand_rule},   {OpKind::full, full_rule},       {OpKind::unsqueeze, view_rule},
          {OpKind::squeeze, view_rule},    {OpKind::flatten, view_rule},    {OpKind::constant, full_rule}};
}

}  // namespace dt::ir
