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
// Propagation picks the cheaper: the grouped one when k/v arrive sharded on their heads.
//
// A mask follows the scores [..., Hq, S, Sk] it broadcasts to: each of its dims takes the factors
// of the scores dim it aligns with (none where it broadcasts a size-1 dim, and none for Sk).
#include <algorithm>

#include "dtensor/kernels/ops.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/sharding_factors.h"

namespace dt::ir {
namespace {

// The factors of the scores' leading dims (q's batch dims and heads), for q and for k/v.
struct Leading {
  TensorFactors q, kv;
};

// `grouped`: q's heads are (Hkv, g) and k/v's (Hkv); else q's heads are one factor and k/v's heads
// have none (whole: the alternative mapping).
Leading leading_factors(OpShardingRule& r, const Shape& q, const Shape& k, bool grouped = true) {
  Leading l;
  const size_t rank = q.size();
  for (size_t d = 0; d + 3 < rank; ++d) {
    l.q.push_back(dim_of(r.add_factor(q[d])));
    l.kv.push_back(l.q.back());
  }
  if (rank >= 3) {
    const int64_t hq = q[rank - 3], hkv = k[rank - 3];
    if (!grouped) {
      l.q.push_back(dim_of(r.add_factor(hq)));
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
Value* expand_grouped_attention(ExpandContext& ctx) {
  const Node& n = ctx.node;
  const Shape& q = n.operands[0]->type.shape;
  const Shape& k = n.operands[1]->type.shape;
  if (!grouped_query(q, k)) return nullptr;
  const int64_t hd = int64_t(q.size()) - 3;
  const std::optional<int64_t> q0 = ctx.shard_start(0, int(hd));
  if (!q0 || ctx.shard_start(1, int(hd))) return nullptr;  // heads whole, or grouped with k/v's
  const int64_t hkv = k[size_t(hd)], g = q[size_t(hd)] / hkv, h = ctx.operands[0]->type.shape[size_t(hd)];
  auto sliced = [&](Value* x, int64_t start, int64_t count, const std::string& suffix) {
    TensorType t = x->type;
    t.shape[size_t(hd)] = count;
    return ctx.append(OpKind::slice, {x}, {{"dim", hd}, {"start", start}, {"end", start + count}}, t, suffix);
  };
  auto ints = [](const Shape& shape) { return std::vector<int64_t>(shape.begin(), shape.end()); };
  const bool aligned = h == 0 || (*q0 % h == 0 && (g % h == 0 || h % g == 0));
  std::vector<Value*> in(ctx.operands.begin(), ctx.operands.end());
  for (int i = 1; i < 3; ++i) {
    const std::string suffix = i == 1 ? ".k" : ".v";
    if (aligned) {
      in[size_t(i)] = sliced(in[size_t(i)], h == 0 ? 0 : *q0 / g, h == 0 ? 0 : std::max<int64_t>(1, h / g), suffix);
      continue;
    }
    const int64_t nk = std::min(hkv, (h + g - 2) / g + 1), first = std::min(*q0 / g, hkv - nk);
    Value* x = sliced(in[size_t(i)], first, nk, suffix);
    TensorType t = x->type;
    t.shape.insert(t.shape.begin() + hd + 1, 1);
    x = ctx.append(OpKind::reshape, {x}, {{"shape", ints(t.shape)}}, t, suffix + "1");
    t.shape[size_t(hd) + 1] = g;
    x = ctx.append(OpKind::expand, {x}, {{"shape", ints(t.shape)}}, t, suffix + "g");
    t.shape.erase(t.shape.begin() + hd + 1);
    t.shape[size_t(hd)] = nk * g;
    x = ctx.append(OpKind::reshape, {x}, {{"shape", ints(t.shape)}}, t, suffix + "r");
    in[size_t(i)] = sliced(x, *q0 - first * g, h, suffix + "h");
  }
  return ctx.append(OpKind::scaled_dot_product_attention, std::move(in),
                    {{"causal", n.attr_bool("causal")}, {"scale", n.attr_float("scale")}}, ctx.local_result, "");
}

}  // namespace

// scaled_dot_product_attention_backward(grad, q, k, v, mask?) -> (dq, dk, dv[, dscores]): the
// batch dims and heads as in the forward; S, Sk, D and Dv replicated.
OpShardingRule attention_backward_rule(const Node& n) {
  OpShardingRule r;
  const Shape& q = n.operands[1]->type.shape;
  const Shape& k = n.operands[2]->type.shape;
  const Leading lead = leading_factors(r, q, k);
  const TensorFactors qf = with_last_two(lead.q, dim_of(-1), dim_of(-1));
  const TensorFactors kvf = with_last_two(lead.kv, dim_of(-1), dim_of(-1));
  r.operands = {qf, qf, kvf, kvf};
  if (n.operands.size() > 4)
    r.operands.push_back(mask_factors(n.operands[4]->type.shape, dt::attention_scores_shape(q, k), lead.q, -1));
  r.results = {qf, kvf, kvf};
  if (n.results.size() > 3) r.results.push_back(qf);
  return r;
}

std::vector<RuleEntry> attention_sharding_rules() {
  return {{OpKind::scaled_dot_product_attention, sdpa_rule, expand_grouped_attention}};
}

}  // namespace dt::ir
