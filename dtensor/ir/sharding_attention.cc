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
// mesh divides it, so grouped attention shards heads when the mesh divides Hkv; otherwise it
// shards batch (or S) only. The alternative, q heads sharded with k/v replicated, would need a
// global head offset in the local kernel and an all-gather of k/v; the chosen mapping needs
// neither and leaves every rank's k/v projection column-sharded like q's.
//
// A mask follows the scores [..., Hq, S, Sk] it broadcasts to: each of its dims takes the factors
// of the scores dim it aligns with (none where it broadcasts a size-1 dim, and none for Sk).
#include "dtensor/kernels/ops.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/sharding_factors.h"

namespace dt::ir {
namespace {

// The factors of the scores' leading dims (q's batch dims and heads), for q and for k/v.
struct Leading {
  TensorFactors q, kv;
};

Leading leading_factors(OpShardingRule& r, const Shape& q, const Shape& k) {
  Leading l;
  const size_t rank = q.size();
  for (size_t d = 0; d + 3 < rank; ++d) {
    l.q.push_back(dim_of(r.add_factor(q[d])));
    l.kv.push_back(l.q.back());
  }
  if (rank >= 3) {
    const int64_t hq = q[rank - 3], hkv = k[rank - 3];
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

OpShardingRule sdpa_rule(const Node& n) {
  OpShardingRule r;
  const Shape& q = n.operands[0]->type.shape;
  const Shape& k = n.operands[1]->type.shape;
  const Shape& v = n.operands[2]->type.shape;
  const size_t rank = q.size();
  const Leading lead = leading_factors(r, q, k);
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

std::vector<RuleEntry> attention_sharding_rules() { return {{OpKind::scaled_dot_product_attention, sdpa_rule}}; }

}  // namespace dt::ir
