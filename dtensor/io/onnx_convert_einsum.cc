// The Einsum converter: an equation lowered to the IR's sum, permute, reshape and matmul, so the
// result shards through those ops' rules (a batched contraction is a matmul with the batch dims in
// front, which keeps its batch and head dims shardable; no reshape when each group is one letter).
//
// Operands are contracted left to right. For a pair A, B, every letter is one of
//   batch      in A, in B and needed after (the output or a later operand)
//   contracted in A and in B only
//   a-kept / b-kept   in one of them and needed after
//   summed     in one of them only: summed out first
// A is permuted to [batch, a-kept, contracted] and B to [batch, contracted, b-kept]; the a-kept, b-kept
// and contracted groups are each merged into one dim (a size-1 dim when empty), and one matmul gives
// [batch, M, N], reshaped to [batch, a-kept, b-kept]. The last result is permuted to the output.
//   "bhqd,bhkd->bhqk": batch b h, a-kept q, contracted d, b-kept k: permute B to [b, h, d, k] and one
//   matmul [2, 2, 3, 4] x [2, 2, 4, 5], no reshape.
// Not supported (a ValueError naming the node): "..." and a letter repeated within one operand
// (diagonals).
#include <algorithm>
#include <string>

#include "dtensor/core/error.h"
#include "dtensor/io/onnx_importer.h"

namespace dt::io::onnx_internal {
namespace {

// A value with one letter per dim.
struct Term {
  Value* v;
  std::string letters;
};

std::string strip_spaces(const std::string& s) {
  std::string r;
  for (char c : s)
    if (c != ' ') r.push_back(c);
  return r;
}

// Sums the dims of t whose letters are not in `keep`.
Term sum_out(Importer& im, Term t, const std::string& keep) {
  std::vector<int64_t> dims;
  std::string rest;
  for (size_t i = 0; i < t.letters.size(); ++i) {
    if (keep.find(t.letters[i]) == std::string::npos) dims.push_back(int64_t(i));
    else rest.push_back(t.letters[i]);
  }
  if (dims.empty()) return t;
  return {im.b().sum(t.v, dims), rest};
}

// Permutes t's dims into the order of `order` (which holds exactly t's letters).
Term permute_to(Importer& im, Term t, const std::string& order) {
  if (t.letters == order) return t;
  std::vector<int64_t> perm;
  for (char c : order) perm.push_back(int64_t(t.letters.find(c)));
  return {im.b().permute(t.v, perm), order};
}

// The sizes of the letters of `group` in t (whose letters are in that order somewhere).
int64_t group_size(const Term& t, const std::string& group) {
  int64_t n = 1;
  for (char c : group) n *= t.v->type.shape[t.letters.find(c)];
  return n;
}

Term contract(Importer& im, Term a, Term b, const std::string& needed_after) {
  std::string batch, contracted, a_kept, b_kept;
  for (char c : a.letters) {
    const bool in_b = b.letters.find(c) != std::string::npos, after = needed_after.find(c) != std::string::npos;
    if (in_b && after) batch.push_back(c);
    else if (in_b) contracted.push_back(c);
    else if (after) a_kept.push_back(c);
  }
  for (char c : b.letters)
    if (a.letters.find(c) == std::string::npos && needed_after.find(c) != std::string::npos) b_kept.push_back(c);
  a = permute_to(im, sum_out(im, a, batch + a_kept + contracted), batch + a_kept + contracted);
  b = permute_to(im, sum_out(im, b, batch + contracted + b_kept), batch + contracted + b_kept);
  // Both operands have the batch dims in front, of equal sizes (ONNX requires it; matmul checks).
  Shape batch_shape(a.v->type.shape.begin(), a.v->type.shape.begin() + int64_t(batch.size()));
  const int64_t m = group_size(a, a_kept), k = group_size(a, contracted), n = group_size(b, b_kept);
  Builder& bld = im.b();
  Value* av = a.v;
  Value* bv = b.v;
  Shape a3 = batch_shape, b3 = batch_shape;
  a3.insert(a3.end(), {m, k});
  b3.insert(b3.end(), {k, n});
  if (a_kept.size() != 1 || contracted.size() != 1) av = bld.reshape(av, a3);
  if (b_kept.size() != 1 || contracted.size() != 1) bv = bld.reshape(bv, b3);
  Value* y = bld.matmul(av, bv);
  Shape out = batch_shape;
  for (char c : a_kept) out.push_back(a.v->type.shape[a.letters.find(c)]);
  for (char c : b_kept) out.push_back(b.v->type.shape[b.letters.find(c)]);
  if (y->type.shape != out) y = bld.reshape(y, out);
  return {y, batch + a_kept + b_kept};
}

void conv_einsum(Importer& im, const onnx::NodeProto&) {
  const std::string eq = strip_spaces(im.attr_str("equation", ""));
  const size_t arrow = eq.find("->");
  std::vector<std::string> terms;
  const std::string lhs = eq.substr(0, arrow);
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
  } else {  // implicit output: the letters named once, in alphabetical order
    for (char c = 'A'; c <= 'z'; ++c)
      if (std::count(lhs.begin(), lhs.end(), c) == 1) out.push_back(c);
  }
  if (eq.find("...") != std::string::npos)
    DT_THROW(ValueError) << im.where() << ": Einsum with an ellipsis (\"" << eq << "\") is not supported: write the dims out";
  if (int(terms.size()) != im.num_inputs())
    DT_THROW(ValueError) << im.where() << ": equation \"" << eq << "\" names " << terms.size() << " operands, the node has "
                         << im.num_inputs();
  std::vector<Term> ts;
  for (size_t i = 0; i < terms.size(); ++i) {
    const std::string& t = terms[i];
    for (char c : t) {
      if (!std::isalpha(uint8_t(c))) DT_THROW(ValueError) << im.where() << ": equation \"" << eq << "\" has '" << c << "'";
      if (std::count(t.begin(), t.end(), c) > 1)
        DT_THROW(ValueError) << im.where() << ": Einsum \"" << eq << "\" repeats '" << c
                             << "' in one operand (a diagonal), which is not supported";
    }
    Value* v = im.in(int(i));
    if (v->type.rank() != int64_t(t.size()))
      DT_THROW(ShapeError) << im.where() << ": operand " << i << " " << ir::type_str(v->type) << " does not have the "
                           << t.size() << " dims of \"" << t << "\"";
    ts.push_back({v, t});
  }
  for (char c : out)
    if (lhs.find(c) == std::string::npos || std::count(out.begin(), out.end(), c) > 1)
      DT_THROW(ValueError) << im.where() << ": output letter '" << c << "' of \"" << eq << "\" is not one operand letter";
  Term acc = ts[0];
  for (size_t i = 1; i < ts.size(); ++i) {
    std::string after = out;
    for (size_t j = i + 1; j < ts.size(); ++j) after += ts[j].letters;
    acc = contract(im, acc, ts[i], after);
  }
  acc = permute_to(im, sum_out(im, acc, out), out);
  im.set_out(0, acc.v);
}

}  // namespace

void add_einsum_converters(ConverterTable& t) {
  t["Einsum"] = conv_einsum;
}

}  // namespace dt::io::onnx_internal
