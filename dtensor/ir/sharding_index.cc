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

// scatter_nd(data [d0, .., d(r-1)], indices [.., k], updates [.., dk, .., d(r-1)]) -> data's shape:
// the dims of data past the k indexed ones pass through, with the trailing dims of updates; the
// indexed dims and the indices' own dims stay replicated (a write may land on any rank's rows).
OpShardingRule scatter_nd_rule(const Node& n) {
  const Shape& data = n.operands[0]->type.shape;
  const Shape& idx = n.operands[1]->type.shape;
  const Shape& upd = n.operands[2]->type.shape;
  const size_t k = size_t(idx.back()), lead = idx.size() - 1;
  OpShardingRule r;
  TensorFactors d(data.size()), u(upd.size());
  for (size_t i = k; i < data.size(); ++i) {
    const int f = data[i] > 1 ? r.add_factor(data[i]) : -1;
    d[i] = dim_of(f);
    u[lead + i - k] = dim_of(f);
  }
  r.operands = {d, TensorFactors(idx.size()), u};
  r.results = {d};
  return r;
}

}  // namespace

std::vector<RuleEntry> index_sharding_rules() {
  return {{OpKind::gather, gather_forward_rule},   {OpKind::gather_backward, gather_backward_rule},
          {OpKind::gather_elements, gather_elements_rule},
          {OpKind::gather_elements_backward, gather_elements_backward_rule},
          {OpKind::argmax, arg_rule},      {OpKind::argmin, arg_rule},  {OpKind::topk, topk_rule},
          {OpKind::cumsum, cumsum_rule},   {OpKind::triu, triangle_rule},
          {OpKind::tril, triangle_rule},   {OpKind::scatter_nd, scatter_nd_rule}};
}

}  // namespace dt::ir
