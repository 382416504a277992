#include "dtensor/ir/sharding_factors.h"

#include <algorithm>

#include "dtensor/core/error.h"
#include "dtensor/core/shape.h"

namespace dt::ir {

int OpShardingRule::add_factor(int64_t size, FactorKind kind) {
  DT_CHECK(factor_kinds.size() < 127) << "too many factors";
  factor_kinds.push_back(kind);
  factor_sizes.push_back(size);
  return int(factor_kinds.size()) - 1;
}

std::string OpShardingRule::str() const {
  auto letter = [&](int f) {
    std::string s(1, char('a' + f % 26));
    if (factor_kinds[size_t(f)] == FactorKind::reduction) s += '*';
    return s;
  };
  auto tensor = [&](const TensorFactors& t) {
    std::string s = "[";
    for (const DimFactors& d : t) {
      s += '(';
      for (int k = 0; k < d.count; ++k) s += letter(d.factor[size_t(k)]);
      s += ')';
    }
    return s + "]";
  };
  std::string s;
  // Appends piece by piece: `"literal" + std::string&&` trips GCC 12's -Wrestrict false positive.
  for (size_t i = 0; i < operands.size(); ++i) {
    if (i) s += ' ';
    s += tensor(operands[i]);
  }
  s += " ->";
  for (const TensorFactors& r : results) {
    s += ' ';
    s += tensor(r);
  }
  return s;
}

DimFactors dim_of(int factor) {
  DimFactors d;
  if (factor >= 0) {
    d.count = 1;
    d.factor[0] = int8_t(factor);
  }
  return d;
}

namespace rule_util {

void broadcast_factors(OpShardingRule& rule, const std::vector<const Shape*>& operands, const Shape& result) {
  const size_t r = result.size();
  std::vector<int> f(r);
  for (size_t d = 0; d < r; ++d) f[d] = result[d] > 1 ? rule.add_factor(result[d]) : -1;
  for (const Shape* s : operands) {
    TensorFactors t(s->size());
    for (size_t k = 0; k < s->size(); ++k) {
      size_t d = r - s->size() + k;
      t[k] = dim_of((*s)[k] == result[d] ? f[d] : -1);
    }
    rule.operands.push_back(std::move(t));
  }
  TensorFactors out(r);
  for (size_t d = 0; d < r; ++d) out[d] = dim_of(f[d]);
  rule.results.push_back(std::move(out));
}

namespace {
// One dim `whole` of a view that the dims dims[begin, end) of `parts` (of shape `shape`) split:
// a factor per part, each part's only factor and, major first, the whole dim's factors.
void split_factors(OpShardingRule& rule, DimFactors& whole, const Shape& shape, const std::vector<size_t>& dims,
                   size_t begin, size_t end, TensorFactors& parts) {
  for (size_t k = begin; k < end; ++k) {
    const int f = rule.add_factor(shape[dims[k]]);
    parts[dims[k]] = dim_of(f);
    whole.factor[size_t(whole.count++)] = int8_t(f);
  }
}
}  // namespace

void view_factors(OpShardingRule& rule, const Shape& in, const Shape& out) {
  TensorFactors fi(in.size()), fo(out.size());
  if (numel(in) > 0) {
    std::vector<size_t> ii, oo;  // dims of size > 1 (size-1 dims carry no factor)
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i] > 1) ii.push_back(i);
    for (size_t j = 0; j < out.size(); ++j)
      if (out[j] > 1) oo.push_back(j);
    size_t a = 0, b = 0;
    while (a < ii.size() && b < oo.size()) {
      // Grow the two groups until their products agree.
      size_t a_end = a + 1, b_end = b + 1;
      int64_t pa = in[ii[a]], pb = out[oo[b]];
      while (pa != pb) {
        if (pa < pb) {
          if (a_end == ii.size()) break;
          pa *= in[ii[a_end++]];
        } else {
          if (b_end == oo.size()) break;
          pb *= out[oo[b_end++]];
        }
      }
      if (pa != pb) break;  // cannot happen for equal numels; leave the rest replicated
      const size_t na = a_end - a, nb = b_end - b;
      if (na == 1 && nb == 1) {
        int f = rule.add_factor(pa);
        fi[ii[a]] = dim_of(f);
        fo[oo[b]] = dim_of(f);
      } else if (na == 1 && nb <= size_t(kMaxDimFactors)) {
        // One input dim split into several output dims.
        split_factors(rule, fi[ii[a]], out, oo, b, b_end, fo);
      } else if (nb == 1 && na <= size_t(kMaxDimFactors)) {
        // Several input dims merged into one output dim.
        split_factors(rule, fo[oo[b]], in, ii, a, a_end, fi);
      }  // else: a many-to-many regrouping; every dim in it stays replicated
      a = a_end;
      b = b_end;
    }
  }
  rule.operands.push_back(std::move(fi));
  rule.results.push_back(std::move(fo));
}

TensorFactors pass_through_dims(OpShardingRule& rule, const Shape& shape, const std::vector<bool>& replicated) {
  TensorFactors t(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    bool rep = d < replicated.size() && replicated[d];
    t[d] = dim_of(rep ? -1 : rule.add_factor(shape[d]));
  }
  return t;
}

TensorFactors pass_through_except(OpShardingRule& rule, const Shape& shape, int64_t dim) {
  std::vector<bool> rep(shape.size(), false);
  rep[size_t(normalize_dim(dim, int64_t(shape.size())))] = true;
  return pass_through_dims(rule, shape, rep);
}

TensorFactors pass_through_leading(OpShardingRule& rule, const Shape& shape, size_t trailing) {
  std::vector<bool> rep(shape.size(), false);
  for (size_t d = shape.size() - std::min(trailing, shape.size()); d < shape.size(); ++d) rep[d] = true;
  return pass_through_dims(rule, shape, rep);
}

OpShardingRule einsum(const Node& node, std::string_view spec) {
  // Split "a,b->c" into the operands' letter strings and the result's.
  const size_t arrow = spec.find("->");
  DT_CHECK(arrow != std::string_view::npos) << "einsum rule '" << spec << "' has no ->";
  std::vector<std::string_view> terms;
  for (std::string_view in = spec.substr(0, arrow);;) {
    const size_t comma = in.find(',');
    terms.push_back(in.substr(0, comma));
    if (comma == std::string_view::npos) break;
    in = in.substr(comma + 1);
  }
  const std::string_view out = spec.substr(arrow + 2);
  DT_CHECK(terms.size() == node.operands.size()) << "einsum rule '" << spec << "' names " << terms.size()
                                                 << " operands, the node has " << node.operands.size();
  const Shape& result = node.result()->type.shape;
  auto ellipsis = [](std::string_view t) { return t.substr(0, 3) == "..."; };
  // The result's leading dims covered by "..."; each operand's "..." aligns with their tail.
  const size_t out_letters = out.size() - (ellipsis(out) ? 3 : 0);
  DT_CHECK(result.size() >= out_letters) << "einsum rule '" << spec << "' does not fit the result";
  const size_t lead = ellipsis(out) ? result.size() - out_letters : 0;

  OpShardingRule rule;
  std::vector<int> lead_factor(lead);
  for (size_t d = 0; d < lead; ++d) lead_factor[d] = rule.add_factor(result[d]);
  // Letters: the largest size any tensor gives it; a reduction unless the result has it.
  std::array<int64_t, 128> size{};
  std::array<int, 128> factor;
  factor.fill(-1);
  auto note_sizes = [&](std::string_view t, const Shape& shape) {
    const size_t letters = t.size() - (ellipsis(t) ? 3 : 0);
    DT_CHECK(shape.size() >= letters && (ellipsis(t) || shape.size() == letters))
        << "einsum rule '" << spec << "': term '" << t << "' does not fit a tensor of rank " << shape.size();
    for (size_t i = 0; i < letters; ++i) {
      const auto c = size_t(uint8_t(t[t.size() - letters + i]));
      size[c] = std::max(size[c], shape[shape.size() - letters + i]);
    }
  };
  for (size_t i = 0; i < terms.size(); ++i) note_sizes(terms[i], node.operands[i]->type.shape);
  note_sizes(out, result);
  auto factor_of = [&](char ch) {
    const auto c = size_t(uint8_t(ch));
    if (factor[c] < 0)
      factor[c] = rule.add_factor(size[c], out.find(ch) == std::string_view::npos ? FactorKind::reduction
                                                                                   : FactorKind::pass_through);
    return factor[c];
  };
  auto tensor_factors = [&](std::string_view t, const Shape& shape) {
    const size_t letters = t.size() - (ellipsis(t) ? 3 : 0);
    const size_t own_lead = shape.size() - letters;
    TensorFactors tf;
    for (size_t d = 0; d < own_lead; ++d) {
      const size_t rd = lead - own_lead + d;  // the result dim it broadcasts against
      tf.push_back(dim_of(shape[d] == result[rd] ? lead_factor[rd] : -1));
    }
    for (size_t i = 0; i < letters; ++i) {
      const char ch = t[t.size() - letters + i];
      const int f = factor_of(ch);
      tf.push_back(dim_of(shape[own_lead + i] == size[size_t(uint8_t(ch))] ? f : -1));
    }
    return tf;
  };
  // Factors are numbered as the operands first name them (the leading dims before all).
  for (size_t i = 0; i < terms.size(); ++i) rule.operands.push_back(tensor_factors(terms[i], node.operands[i]->type.shape));
  rule.results.push_back(tensor_factors(out, result));
  return rule;
}

void operand_and_result(OpShardingRule& rule, const TensorFactors& t) {
  rule.operands.push_back(t);
  rule.results.push_back(t);
}

}  // namespace rule_util

}  // namespace dt::ir
