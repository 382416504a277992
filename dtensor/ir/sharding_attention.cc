// Sharding rules of scaled_dot_product_attention(q [..., Hq, S, D], k [..., Hkv, Sk, D],
// v [..., Hkv, Sk, Dv], mask?) and of its backward op.
//
// The batch dims and the heads pass through, which is what tensor-parallel attention needs (heads
// split across ranks), and Dv passes through (the output is linear in v alone). D and Sk feed a
// softmax, so they must be replicated; S passes through in the forward only without the causal
// mask (the kernel builds the mask from local indices).
//
// Grouped-query k/v (Hkv < Hq, group g = Hq / Hkv): q's heads dim is the two factors (Hkv, g),
// major first, and k/v's heads dim is (Hkv). Sharding the Hkv factor splits q and k/v heads
// consistently (q head h reads kv head h / g, and a block of Hkv / n kv heads serves exactly the
// block of Hq / n q heads that reads it). Only the first factor of a dim shards, and only when the
// mesh divides it, so this mapping shards heads only when the mesh divides Hkv.
// The alternative mapping (OpShardingRule::alternatives) shards q's heads as one factor Hq with
// k/v whole: Llama with 2 kv heads on 4 ranks (k/v projections replicated) runs one q head per
// rank. Each rank's q heads read a few kv heads, which its local form (expand_grouped_attention)
// slices out of the replicated k/v: no communication, where the grouped mapping would gather q.
// Propagation picks the cheaper: the grouped one when k/v arrive sharded on their heads. The
// backward has the same two mappings; in the alternative, dk and dv are partial sums.
//
// A mask follows the scores [..., Hq, S, Sk] it broadcasts to: each of its dims takes the factors
// of the scores dim it aligns with (none where it broadcasts a size-1 dim, and none for Sk).
#include <algorithm>
#include <optional>

#include "dtensor/kernels/ops.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/sharding_factors.h"

namespace dt::ir {
namespace {

// The factors of the scores' leading dims (q's batch dims and heads), for q and for k/v.
struct Leading {
  TensorFactors q, kv;
};

// `grouped`: q's heads are (Hkv, g) and k/v's (Hkv); else q's heads are one factor of `q_heads`
// kind and k/v's heads have none (whole: the alternative mapping).
Leading leading_factors(OpShardingRule& r, const Shape& q, const Shape& k, bool grouped = true,
                        FactorKind q_heads = FactorKind::pass_through) {
  Leading l;
  const size_t rank = q.size();
  for (size_t d = 0; d + 3 < rank; ++d) {
    l.q.push_back(dim_of(r.add_factor(q[d])));
    l.kv.push_back(l.q.back());
  }
  if (rank >= 3) {
    const int64_t hq = q[rank - 3], hkv = k[rank - 3];
    if (!grouped) {
      l.q.push_back(dim_of(r.add_factor(hq, q_heads)));
      l.kv.push_back(dim_of(-1));
      return l;
    }
    const int kv_heads = r.add_factor(hkv);
    DimFactors qh = dim_of(kv_heads);
    if (hkv != hq && hkv > 0) {
      qh.factor[1] = int8_t(r.add_factor(hq / hkv));
      qh.count = 2;
    }
    l.q.push_back(qh);
    l.kv.push_back(dim_of(kv_heads));
  }
  return l;
}

// Grouped-query k/v (Hkv < Hq): q and k/v can shard their heads in two ways (file comment).
bool grouped_query(const Shape& q, const Shape& k) {
  return q.size() >= 3 && k[q.size() - 3] > 0 && k[q.size() - 3] != q[q.size() - 3];
}

// The factors of a mask broadcasting to scores [lead..., S, Sk] with leading factors `lead` and
// query factor `s` (-1: replicated).
TensorFactors mask_factors(const Shape& mask, const Shape& scores, const TensorFactors& lead, int s) {
  TensorFactors f;
  const size_t offset = scores.size() - mask.size();
  for (size_t i = 0; i < mask.size(); ++i) {
    const size_t j = offset + i;
    if (mask[i] != scores[j] || j + 1 == scores.size()) {
      f.push_back(dim_of(-1));
    } else {
      f.push_back(j + 2 == scores.size() ? dim_of(s) : lead[j]);
    }
  }
  return f;
}

TensorFactors with_last_two(TensorFactors f, DimFactors a, DimFactors b) {
  f.push_back(a);
  f.push_back(b);
  return f;
}

OpShardingRule sdpa_mapping(const Node& n, bool grouped) {
  OpShardingRule r;
  const Shape& q = n.operands[0]->type.shape;
  const Shape& k = n.operands[1]->type.shape;
  const Shape& v = n.operands[2]->type.shape;
  const size_t rank = q.size();
  const Leading lead = leading_factors(r, q, k, grouped);
  const int s = n.attr_bool("causal") ? -1 : r.add_factor(q[rank - 2]);
  const int dv = r.add_factor(v[rank - 1]);
  r.operands = {with_last_two(lead.q, dim_of(s), dim_of(-1)), with_last_two(lead.kv, dim_of(-1), dim_of(-1)),
                with_last_two(lead.kv, dim_of(-1), dim_of(dv))};
  if (n.operands.size() > 3)
    r.operands.push_back(mask_factors(n.operands[3]->type.shape, dt::attention_scores_shape(q, k), lead.q, s));
  r.results = {with_last_two(lead.q, dim_of(s), dim_of(dv))};
  r.partial_one_of = 0b100;
  return r;
}

OpShardingRule sdpa_rule(const Node& n) {
  OpShardingRule r = sdpa_mapping(n, true);
  if (grouped_query(n.operands[0]->type.shape, n.operands[1]->type.shape))
    r.alternatives.push_back(sdpa_mapping(n, false));
  return r;
}

// The local form of grouped-query attention with q sharded on its heads and k/v whole (the
// alternative mapping): this rank's h q heads, from global head q0, read kv heads q0 / g to
// (q0 + h - 1) / g; slice those out of the replicated k/v (a local view, no communication). When
// the block is a whole number of groups, or lies inside one group, the slice is grouped-query k/v
// for the local q as it is. Otherwise (e.g. 2 q heads per rank with groups of 3) each kv head is
// repeated over its group and the h heads this rank's q reads are sliced from that. The choice and
// every shape depend only on the local sizes and on q0 modulo h, which all ranks of one orbit
// share (sharding/rank_orbits.h).
struct LocalKv {
  int64_t hd = 0, g = 1, h = 0, q0 = 0;
  bool aligned = true;
  int64_t first = 0, count = 0;  // the kv heads sliced out: [first, first + count)
};

// The kv heads of this rank's q heads, or nullopt when the node is not grouped-query attention
// in the alternative mapping (heads whole, or k/v sharded with q).
std::optional<LocalKv> local_kv(const ExpandContext& ctx, int q_operand, int k_operand) {
  const Shape& q = ctx.node.operands[size_t(q_operand)]->type.shape;
  const Shape& k = ctx.node.operands[size_t(k_operand)]->type.shape;
  if (!grouped_query(q, k)) return std::nullopt;
  LocalKv l;
  l.hd = int64_t(q.size()) - 3;
  const std::optional<int64_t> q0 = ctx.shard_start(q_operand, int(l.hd));
  if (!q0 || ctx.shard_start(k_operand, int(l.hd))) return std::nullopt;
  const int64_t hkv = k[size_t(l.hd)];
  l.q0 = *q0;
  l.g = q[size_t(l.hd)] / hkv;
  l.h = ctx.operands[size_t(q_operand)]->type.shape[size_t(l.hd)];
  l.aligned = l.h == 0 || (l.q0 % l.h == 0 && (l.g % l.h == 0 || l.h % l.g == 0));
  if (l.aligned) {
    l.first = l.h == 0 ? 0 : l.q0 / l.g;
    l.count = l.h == 0 ? 0 : std::max<int64_t>(1, l.h / l.g);
  } else {
    l.count = std::min(hkv, (l.h + l.g - 2) / l.g + 1);
    l.first = std::min(l.q0 / l.g, hkv - l.count);
  }
  return l;
}

std::vector<int64_t> ints(const Shape& shape) { return std::vector<int64_t>(shape.begin(), shape.end()); }

// k or v (whole on the heads) as this rank's q heads read it.
Value* kv_for_local_q(ExpandContext& ctx, const LocalKv& l, Value* x, const std::string& suffix) {
  const size_t hd = size_t(l.hd);
  TensorType t = x->type;
  t.shape[hd] = l.count;
  x = ctx.append(OpKind::slice, {x}, {{"dim", l.hd}, {"start", l.first}, {"end", l.first + l.count}}, t, suffix);
  if (l.aligned) return x;
  t.shape.insert(t.shape.begin() + l.hd + 1, 1);
  x = ctx.append(OpKind::reshape, {x}, {{"shape", ints(t.shape)}}, t, suffix + "1");
  t.shape[hd + 1] = l.g;
  x = ctx.append(OpKind::expand, {x}, {{"shape", ints(t.shape)}}, t, suffix + "g");
  t.shape.erase(t.shape.begin() + l.hd + 1);
  t.shape[hd] = l.count * l.g;
  x = ctx.append(OpKind::reshape, {x}, {{"shape", ints(t.shape)}}, t, suffix + "r");
  t.shape[hd] = l.h;
  const int64_t start = l.q0 - l.first * l.g;
  return ctx.append(OpKind::slice, {x}, {{"dim", l.hd}, {"start", start}, {"end", start + l.h}}, t, suffix + "h");
}

// The reverse of kv_for_local_q for a gradient: d (of the sliced k/v's shape) into zeros of the
// whole k/v `whole` (a partial sum over the ranks sharding q's heads), named after the node's
// result `result`.
Value* kv_grad_to_whole(ExpandContext& ctx, const LocalKv& l, Value* d, const TensorType& whole, int result) {
  const size_t hd = size_t(l.hd);
  auto named = [&](OpKind op, Value* x, const NamedAttrs& attrs, const TensorType& t, const std::string& suffix) {
    return ctx.append_results(op, {x}, attrs, {t}, {{result, suffix}})[0];
  };
  TensorType t = d->type;
  if (!l.aligned) {  // back over the repeated heads: [.., count * g, ..], [.., count, g, ..], summed over g
    t.shape[hd] = l.count * l.g;
    const int64_t start = l.q0 - l.first * l.g;
    d = named(OpKind::slice_backward, d,
              {{"shape", ints(t.shape)}, {"dim", l.hd}, {"start", start}, {"end", start + l.h}, {"step", int64_t(1)}}, t, ".r");
    t.shape[hd] = l.count;
    t.shape.insert(t.shape.begin() + l.hd + 1, l.g);
    d = named(OpKind::reshape, d, {{"shape", ints(t.shape)}}, t, ".g");
    t.shape.erase(t.shape.begin() + l.hd + 1);
    d = named(OpKind::sum, d, {{"dims", std::vector<int64_t>{l.hd + 1}}, {"keepdim", false}}, t, ".s");
  }
  return named(OpKind::slice_backward, d,
               {{"shape", ints(whole.shape)}, {"dim", l.hd}, {"start", l.first}, {"end", l.first + l.count},
                {"step", int64_t(1)}},
               whole, "");
}

// This rank's operands with k and v (after q, operand `q_operand`) sliced for its q heads, or
// nullopt (local_kv).
std::optional<std::pair<LocalKv, std::vector<Value*>>> local_operands(ExpandContext& ctx, int q_operand) {
  const std::optional<LocalKv> l = local_kv(ctx, q_operand, q_operand + 1);
  if (!l) return std::nullopt;
  std::vector<Value*> in(ctx.operands.begin(), ctx.operands.end());
  in[size_t(q_operand) + 1] = kv_for_local_q(ctx, *l, in[size_t(q_operand) + 1], ".k");
  in[size_t(q_operand) + 2] = kv_for_local_q(ctx, *l, in[size_t(q_operand) + 2], ".v");
  return std::pair{*l, std::move(in)};
}

NamedAttrs attention_attrs(const Node& n) { return {{"causal", n.attr_bool("causal")}, {"scale", n.attr_float("scale")}}; }

Value* expand_grouped_attention(ExpandContext& ctx) {
  auto local = local_operands(ctx, 0);
  if (!local) return nullptr;
  return ctx.append(OpKind::scaled_dot_product_attention, std::move(local->second), attention_attrs(ctx.node),
                    ctx.local_result, "");
}

}  // namespace

// The attention backward in the same mapping: the backward op on this rank's q heads and the k/v
// they read (sliced as in the forward); dq (and a mask's dscores) are this rank's heads, dk and dv the
// gradients of the kv heads it read, placed into zeros of the whole k/v: partial sums over the
// ranks, which no gather precedes.
Value* expand_grouped_attention_backward(ExpandContext& ctx) {
  auto local = local_operands(ctx, 1);
  if (!local) return nullptr;
  const auto& [l, in] = *local;
  std::vector<TensorType> types = {ctx.local_results[0], in[2]->type, in[3]->type};
  std::vector<std::pair<int, std::string>> names = {{0, ""}, {1, ".local"}, {2, ".local"}};
  if (ctx.local_results.size() > 3) {
    types.push_back(ctx.local_results[3]);
    names.emplace_back(3, "");
  }
  const std::vector<Value*> r =
      ctx.append_results(OpKind::scaled_dot_product_attention_backward, in, attention_attrs(ctx.node), types, names);
  ctx.other_results = {kv_grad_to_whole(ctx, l, r[1], ctx.local_results[1], 1),
                       kv_grad_to_whole(ctx, l, r[2], ctx.local_results[2], 2)};
  if (r.size() > 3) ctx.other_results.push_back(r[3]);
  return r[0];
}

// scaled_dot_product_attention_backward(grad, q, k, v, mask?) -> (dq, dk, dv[, dscores]): the
// batch dims and heads as in the forward; S, Sk, D and Dv replicated. With grouped-query k/v, the
// forward's alternative too: q's heads (grad, q, dq, dscores) sharded alone with k/v whole; dk and
// dv lack that factor, a reduction: each rank's q heads give part of every kv head's gradient
// (P(sum); expand_grouped_attention_backward).
namespace {
OpShardingRule attention_backward_mapping(const Node& n, bool grouped) {
  OpShardingRule r;
  const Shape& q = n.operands[1]->type.shape;
  const Shape& k = n.operands[2]->type.shape;
  const Leading lead = leading_factors(r, q, k, grouped, FactorKind::reduction);
  const TensorFactors qf = with_last_two(lead.q, dim_of(-1), dim_of(-1));
  const TensorFactors kvf = with_last_two(lead.kv, dim_of(-1), dim_of(-1));
  r.operands = {qf, qf, kvf, kvf};
  if (n.operands.size() > 4)
    r.operands.push_back(mask_factors(n.operands[4]->type.shape, dt::attention_scores_shape(q, k), lead.q, -1));
  r.results = {qf, kvf, kvf};
  if (n.results.size() > 3) r.results.push_back(qf);
  return r;
}
}  // namespace

OpShardingRule attention_backward_rule(const Node& n) {
  OpShardingRule r = attention_backward_mapping(n, true);
  if (grouped_query(n.operands[1]->type.shape, n.operands[2]->type.shape))
    r.alternatives.push_back(attention_backward_mapping(n, false));
  return r;
}

std::vector<RuleEntry> attention_sharding_rules() {
  return {{OpKind::scaled_dot_product_attention, sdpa_rule, expand_grouped_attention}};
}

}  // namespace dt::ir
