// Sharding rules of the ops indexed by position along one dim (ops_index.cc). The indexed dim
// needs every position (a gathered row may live on any shard, a running sum or an argmax runs the
// whole dim), so it is replicated; every other dim passes through.
//   gather: x's other dims and the indices' dims pass through to the result (batch-sharded ids
//     give batch-sharded rows); linear in x, so a P(sum) table gives a P(sum) result.
//   gather_backward: the indices' dims become reduction factors (each shard of the ids adds its
//     rows into the whole table: P(sum)), linear in grad.
//   gather_elements (and its backward): see elements_rule.
//   argmax/argmin: integer results, nothing partial. cumsum, triu, tril: linear (P → P).
//   triu/tril keep their last two dims replicated (the mask depends on the global row and column).
//   scatter_nd, gather_nd and its backward: see nd_factors.
#include <optional>

#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/sharding_factors.h"

namespace dt::ir {
namespace {

// x [outer..., L, inner...] with indices [I...]: the factors of x, indices and the gathered shape
// [outer..., I..., inner...]; the index factors are of `index_kind`.
void gather_factors(OpShardingRule& r, const Shape& x, const Shape& idx, int64_t d, FactorKind index_kind,
                    TensorFactors& xf, TensorFactors& idxf, TensorFactors& gathered) {
  xf.assign(x.size(), DimFactors{});
  for (int64_t i = 0; i < d; ++i) {
    xf[size_t(i)] = dim_of(r.add_factor(x[size_t(i)]));
    gathered.push_back(xf[size_t(i)]);
  }
  for (int64_t s : idx) {
    idxf.push_back(dim_of(r.add_factor(s, index_kind)));
    gathered.push_back(idxf.back());
  }
  for (size_t i = size_t(d) + 1; i < x.size(); ++i) {
    xf[i] = dim_of(r.add_factor(x[i]));
    gathered.push_back(xf[i]);
  }
}

// gather(x, indices) reads the table x; gather_backward(grad, indices) writes a table of x's
// shape, where the index factors are reductions (every shard of the ids adds into the whole table).
OpShardingRule gather_rule(const Node& n, const Shape& x, bool backward) {
  OpShardingRule r;
  TensorFactors xf, idxf, gathered;
  gather_factors(r, x, n.operands[1]->type.shape, normalize_dim(n.attr_int("dim"), int64_t(x.size())),
                 backward ? FactorKind::reduction : FactorKind::pass_through, xf, idxf, gathered);
  if (backward) {
    r.operands = {std::move(gathered), std::move(idxf)};
    r.results = {std::move(xf)};
  } else {
    r.operands = {std::move(xf), std::move(idxf)};
    r.results = {std::move(gathered)};
  }
  r.partial_one_of = 0b01;
  return r;
}

// gather_elements(x, indices) -> [indices' shape]: off dim, a dim where x and indices have one
// size is shared by x, indices and result (a smaller index dim reads x at other coordinates, so it
// stays replicated); the indices' dim passes through to the result (they hold global positions
// into a whole x dim). In the backward, that dim is a reduction factor of grad and indices.
OpShardingRule elements_rule(const Node& n, const Shape& x, bool backward) {
  OpShardingRule r;
  const Shape& idx = n.operands[1]->type.shape;
  const int64_t d = normalize_dim(n.attr_int("dim"), int64_t(x.size()));
  TensorFactors xf(x.size()), idxf(idx.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (int64_t(i) == d) idxf[i] = dim_of(r.add_factor(idx[i], backward ? FactorKind::reduction : FactorKind::pass_through));
    else if (x[i] == idx[i]) xf[i] = idxf[i] = dim_of(r.add_factor(x[i]));
  }
  if (backward) {
    r.operands = {idxf, idxf};
    r.results = {std::move(xf)};
  } else {
    r.operands = {std::move(xf), idxf};
    r.results = {idxf};
  }
  r.partial_one_of = 0b01;
  return r;
}
OpShardingRule gather_forward_rule(const Node& n) { return gather_rule(n, n.operands[0]->type.shape, false); }
OpShardingRule gather_backward_rule(const Node& n) { return gather_rule(n, n.result()->type.shape, true); }
OpShardingRule gather_elements_rule(const Node& n) { return elements_rule(n, n.operands[0]->type.shape, false); }
OpShardingRule gather_elements_backward_rule(const Node& n) { return elements_rule(n, n.result()->type.shape, true); }

// One dim (or the last two) replicated, the rest passing through.
OpShardingRule along_dims_rule(const Node& n, const std::vector<int64_t>& dims, bool linear) {
  OpShardingRule r;
  const Shape& x = n.operands[0]->type.shape;
  std::vector<bool> rep(x.size(), false);
  for (int64_t d : dims) rep[size_t(normalize_dim(d, int64_t(x.size())))] = true;
  TensorFactors t = rule_util::pass_through_dims(r, x, rep);
  r.operands.push_back(t);
  r.results.push_back(std::move(t));
  r.partial_all = linear;
  return r;
}

OpShardingRule arg_rule(const Node& n) {
  OpShardingRule r = along_dims_rule(n, {n.attr_int("dim")}, false);
  if (!n.attr_bool("keepdim"))
    r.results[0].erase(r.results[0].begin() + normalize_dim(n.attr_int("dim"), n.operands[0]->type.rank()));
  return r;
}

// topk: the dim it selects along replicated, the rest passing through to both results.
OpShardingRule topk_rule(const Node& n) {
  OpShardingRule r = along_dims_rule(n, {n.attr_int("dim")}, false);
  r.results.push_back(r.results[0]);
  return r;
}

OpShardingRule cumsum_rule(const Node& n) { return along_dims_rule(n, {n.attr_int("dim")}, true); }
OpShardingRule triangle_rule(const Node& n) { return along_dims_rule(n, {-2, -1}, true); }

// The nd ops: data [d0, .., d(r-1)], indices [i0, .., i(q-2), k], slices [i0, .., i(q-2), dk, ..,
// d(r-1)]. The dims of data past the k indexed ones are shared with the slices' trailing dims (a
// size-1 dim gets no factor); the indexed dims stay replicated (a tuple may name any rank's rows),
// as does the tuple dim k. The tuples' leading dims, shared by indices and slices, get factors of
// `lead` (none: replicated).
void nd_factors(OpShardingRule& r, const Shape& data, const Shape& idx, std::optional<FactorKind> lead,
                TensorFactors& dataf, TensorFactors& idxf, TensorFactors& slicef) {
  const size_t k = size_t(idx.back()), q = idx.size() - 1;
  dataf.assign(data.size(), DimFactors{});
  idxf.assign(idx.size(), DimFactors{});
  slicef.assign(q + data.size() - k, DimFactors{});
  for (size_t i = 0; lead && i < q; ++i)
    if (idx[i] > 1) slicef[i] = idxf[i] = dim_of(r.add_factor(idx[i], *lead));
  for (size_t i = k; i < data.size(); ++i)
    if (data[i] > 1) slicef[q + i - k] = dataf[i] = dim_of(r.add_factor(data[i]));
}

// scatter_nd(data, indices, updates) -> data's shape: the trailing dims pass through; the tuples'
// dims stay replicated (every rank writes every update, so no partial result either).
OpShardingRule scatter_nd_rule(const Node& n) {
  OpShardingRule r;
  TensorFactors d, i, u;
  nd_factors(r, n.operands[0]->type.shape, n.operands[1]->type.shape, std::nullopt, d, i, u);
  r.operands = {d, i, u};
  r.results = {d};
  return r;
}

// gather_nd(data, indices) -> slices: as gather, the tuples' dims pass through to the slices
// (batch-sharded indices give batch-sharded slices) and the op is linear in data (P → P).
// gather_nd_backward(grad, indices) {shape} -> data's shape: the tuples' dims are reductions (each
// shard of the tuples adds its slices into the whole data: P(sum)), linear in grad.
OpShardingRule gather_nd_rule(const Node& n, const Shape& data, bool backward) {
  OpShardingRule r;
  TensorFactors d, i, s;
  nd_factors(r, data, n.operands[1]->type.shape, backward ? FactorKind::reduction : FactorKind::pass_through, d, i, s);
  r.operands = {backward ? s : d, i};
  r.results = {backward ? d : s};
  r.partial_one_of = 0b01;
  return r;
}
OpShardingRule gather_nd_forward_rule(const Node& n) { return gather_nd_rule(n, n.operands[0]->type.shape, false); }
OpShardingRule gather_nd_backward_rule(const Node& n) { return gather_nd_rule(n, n.result()->type.shape, true); }

}  // namespace

std::vector<RuleEntry> index_sharding_rules() {
  return {{OpKind::gather, gather_forward_rule},   {OpKind::gather_backward, gather_backward_rule},
          {OpKind::gather_elements, gather_elements_rule},
          {OpKind::gather_elements_backward, gather_elements_backward_rule},
          {OpKind::argmax, arg_rule},      {OpKind::argmin, arg_rule},  {OpKind::topk, topk_rule},
          {OpKind::cumsum, cumsum_rule},   {OpKind::triu, triangle_rule},
          {OpKind::tril, triangle_rule},   {OpKind::scatter_nd, scatter_nd_rule},
          {OpKind::gather_nd, gather_nd_forward_rule}, {OpKind::gather_nd_backward, gather_nd_backward_rule}};
}

}  // namespace dt::ir
