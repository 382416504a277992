// Shape ops: embedding, masked_embedding, view, reshape, transpose, permute, slice, split, cat, arange,
// expand (broadcast to a shape, a view), full (a constant), unsqueeze, squeeze, flatten (views that
// add, drop or merge dims) and constant (a small tensor spelled in the IR), with their gradient
// rules: each
// gradient is the inverse rearrangement of the result's gradient (slice's pads with zeros,
// split's concatenates, cat's slices, expand's sums).
//
// view and reshape compute the same value: types carry no layout, so the interpreter runs both as
// Tensor::reshape (a view when the layout allows, a copy otherwise). `view` records the author's
// expectation that no copy is needed.
#include <algorithm>
#include <limits>

#include "dtensor/kernels/ops.h"
#include "dtensor/ir/grad_rule.h"
#include "dtensor/ir/op_registry.h"

namespace dt::ir {
namespace {

// embedding(indices [...] int, weight [V, H]) -> [..., H]
void infer_embedding(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const TensorType& idx = node.operands[0]->type;
  const TensorType& w = node.operands[1]->type;
  if (idx.dtype != DType::i64 && idx.dtype != DType::i32)
    DT_THROW(DTypeError) << "embedding expects integer indices, got " << type_str(idx);
  infer_util::require_rank(node, 1, 2);
  Shape s = idx.shape;
  s.push_back(w.shape[1]);
  out.push_back({w.dtype, std::move(s)});
}
void run_embedding(const KernelArgs& a) { a.out[0] = dt::embedding(a.in[0], a.in[1]); }
// masked_embedding(indices, weight [V_local, H]) {vocab_start}: the partitioner's local form of a
// vocabulary-parallel embedding (weight rows sharded): indices outside this rank's rows give zero
// rows, so the result is a partial sum over the shards (PyTorch's _MaskPartial).
void run_masked_embedding(const KernelArgs& a) {
  a.out[0] = dt::masked_embedding(a.in[0], a.in[1], a.node.attr_int("vocab_start"));
}

// Resolves one -1 in `shape` against numel; throws ShapeError when the sizes disagree.
Shape resolve_view_shape(const Node& node, const TensorType& x, const std::vector<int64_t>& shape) {
  Shape s = shape;
  int64_t known = 1;
  int infer_at = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer_at >= 0) DT_THROW(ValueError) << op_name(node.op) << " shape " << shape_str(shape) << " has more than one -1";
      infer_at = int(i);
    } else if (s[i] < 0) {
      DT_THROW(ValueError) << op_name(node.op) << " shape " << shape_str(shape) << " has a negative size";
    } else if (__builtin_mul_overflow(known, s[i], &known)) {
      DT_THROW(ShapeError) << op_name(node.op) << " shape " << shape_str(shape) << " is too large";
    }
  }
  if (infer_at >= 0) {
    if (known == 0 || x.numel() % known != 0)
      DT_THROW(ShapeError) << op_name(node.op) << " cannot infer -1 in " << shape_str(shape) << " for "
                           << type_str(x);
    s[size_t(infer_at)] = x.numel() / known;
  } else if (known != x.numel()) {
    DT_THROW(ShapeError) << op_name(node.op) << " shape " << shape_str(shape) << " has " << known
                         << " elements but x " << type_str(x) << " has " << x.numel();
  }
  return s;
}

void infer_view(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const TensorType& x = node.operands[0]->type;
  out.push_back({x.dtype, resolve_view_shape(node, x, node.attr_ints("shape"))});
}
void run_view(const KernelArgs& a) { a.out[0] = a.in[0].reshape(a.node.result()->type.shape); }

void infer_transpose(const Node& node, const Graph&, std::vector<TensorType>& out) {
  TensorType t = node.operands[0]->type;
  int64_t d0 = normalize_dim(node.attr_int("dim0"), t.rank());
  int64_t d1 = normalize_dim(node.attr_int("dim1"), t.rank());
  std::swap(t.shape[size_t(d0)], t.shape[size_t(d1)]);
  out.push_back(std::move(t));
}
void run_transpose(const KernelArgs& a) {
  a.out[0] = a.in[0].transpose(a.node.attr_int("dim0"), a.node.attr_int("dim1"));
}

void infer_permute(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const TensorType& x = node.operands[0]->type;
  const auto& dims = node.attr_ints("dims");
  if (int64_t(dims.size()) != x.rank())
    DT_THROW(ValueError) << "permute dims " << shape_str(dims) << " do not match rank " << x.rank();
  std::vector<bool> seen(dims.size());
  Shape s(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = normalize_dim(dims[i], x.rank());
    if (seen[size_t(d)]) DT_THROW(ValueError) << "permute dims " << shape_str(dims) << " repeat dim " << d;
    seen[size_t(d)] = true;
    s[i] = x.shape[size_t(d)];
  }
  out.push_back({x.dtype, std::move(s)});
}
void run_permute(const KernelArgs& a) { a.out[0] = a.in[0].permute(a.node.attr_ints("dims")); }

// Python slice semantics: negative start/end count from the end; both clamp to [0, size].
void infer_slice(const Node& node, const Graph&, std::vector<TensorType>& out) {
  TensorType t = node.operands[0]->type;
  int64_t d = normalize_dim(node.attr_int("dim"), t.rank());
  int64_t size = t.shape[size_t(d)];
  int64_t step = node.attr_int("step");
  if (step < 1) DT_THROW(ValueError) << "slice step must be positive, got " << step;
  auto clamp = [&](int64_t v) {
    if (v < 0) v += size;
    return std::clamp<int64_t>(v, 0, size);
  };
  int64_t start = clamp(node.attr_int("start")), end = clamp(node.attr_int("end"));
  t.shape[size_t(d)] = end > start ? (end - start - 1) / step + 1 : 0;
  out.push_back(std::move(t));
}
void run_slice(const KernelArgs& a) {
  const Node& n = a.node;
  a.out[0] = a.in[0].slice(n.attr_int("dim"), n.attr_int("start"), n.attr_int("end"), n.attr_int("step"));
}

// Returns the piece sizes of a split: `sizes` when given, else pieces of `split_size` (last short).
std::vector<int64_t> split_sizes(const Node& node, int64_t dim_size) {
  const auto& sizes = node.attr_ints("sizes");
  int64_t split_size = node.attr_int("split_size");
  if (sizes.empty() == (split_size == 0))
    DT_THROW(ValueError) << "split needs exactly one of split_size or sizes";
  if (!sizes.empty()) {
    int64_t total = 0;
    for (int64_t s : sizes) {
      if (s < 0) DT_THROW(ValueError) << "split sizes " << shape_str(sizes) << " has a negative size";
      if (__builtin_add_overflow(total, s, &total))
        DT_THROW(ValueError) << "split sizes " << shape_str(sizes) << " overflow";
    }
    if (total != dim_size)
      DT_THROW(ShapeError) << "split sizes " << shape_str(sizes) << " sum to " << total
                           << " but the dim has size " << dim_size;
    return sizes;
  }
  if (split_size < 0) DT_THROW(ValueError) << "split split_size must be positive, got " << split_size;
  // One result per piece: refuse absurd counts before allocating them.
  constexpr int64_t kMaxPieces = int64_t(1) << 20;
  if (dim_size / split_size > kMaxPieces)
    DT_THROW(ValueError) << "split of a dim of size " << dim_size << " into pieces of " << split_size
                         << " makes more than " << kMaxPieces << " results";
  std::vector<int64_t> out;
  for (int64_t at = 0; at < dim_size; at += split_size) out.push_back(std::min(split_size, dim_size - at));
  if (out.empty()) out.push_back(0);  // torch.split of an empty dim returns one empty piece
  return out;
}

void infer_split(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const TensorType& x = node.operands[0]->type;
  int64_t d = normalize_dim(node.attr_int("dim"), x.rank());
  for (int64_t s : split_sizes(node, x.shape[size_t(d)])) {
    TensorType t = x;
    t.shape[size_t(d)] = s;
    out.push_back(std::move(t));
  }
}
void run_split(const KernelArgs& a) {
  int64_t d = normalize_dim(a.node.attr_int("dim"), a.in[0].dim());
  int64_t at = 0;
  for (size_t i = 0; i < a.out.size(); ++i) {
    int64_t len = a.node.results[i]->type.shape[size_t(d)];
    a.out[i] = a.in[0].narrow(d, at, len);
    at += len;
  }
}

void infer_cat(const Node& node, const Graph&, std::vector<TensorType>& out) {
  infer_util::require_same_dtype(node);
  TensorType t = node.operands[0]->type;
  int64_t d = normalize_dim(node.attr_int("dim"), t.rank());
  for (size_t i = 1; i < node.operands.size(); ++i) {
    const TensorType& o = node.operands[i]->type;
    bool ok = o.rank() == t.rank();
    for (int64_t k = 0; ok && k < t.rank(); ++k)
      if (k != d && o.shape[size_t(k)] != t.shape[size_t(k)]) ok = false;
    if (!ok)
      DT_THROW(ShapeError) << "cat operand " << i << " " << type_str(o) << " does not match operand 0 "
                           << type_str(node.operands[0]->type) << " outside dim " << d;
    t.shape[size_t(d)] += o.shape[size_t(d)];
  }
  out.push_back(std::move(t));
}
void run_cat(const KernelArgs& a) {
  a.out[0] = dt::cat(std::vector<Tensor>(a.in.begin(), a.in.end()), a.node.attr_int("dim"));
}

void infer_arange(const Node& node, const Graph&, std::vector<TensorType>& out) {
  int64_t start = node.attr_int("start"), end = node.attr_int("end"), step = node.attr_int("step");
  if (step == 0) DT_THROW(ValueError) << "arange step must be non-zero";
  // Bounds keep the arithmetic below (and the kernel's doubles) exact.
  constexpr int64_t kLimit = int64_t(1) << 52;
  for (int64_t v : {start, end, step})
    if (v < -kLimit || v > kLimit) DT_THROW(ValueError) << "arange bound " << v << " is too large";
  int64_t n = step > 0 ? (end - start + step - 1) / step : (start - end - step - 1) / -step;
  out.push_back({node.attr_dtype("dtype"), {std::max<int64_t>(n, 0)}});
}
void run_arange(const KernelArgs& a) {
  const Node& n = a.node;
  a.out[0] = Tensor::arange(double(n.attr_int("start")), double(n.attr_int("end")), double(n.attr_int("step")),
                            n.attr_dtype("dtype"));
}

// Refuses a shape attribute the parser would refuse as a type (dims above 2^40, or more than 2^50
// elements with 0 counted as 1): shape arithmetic on it could overflow.
void check_shape_attr(const Node& node, const std::vector<int64_t>& shape) {
  int64_t product = 1;
  for (int64_t d : shape) {
    if (d > (int64_t(1) << 40) || __builtin_mul_overflow(product, std::max<int64_t>(d, 1), &product) ||
        product > (int64_t(1) << 50))
      DT_THROW(ShapeError) << op_name(node.op) << " shape " << shape_str(shape) << " is too large";
  }
}

// expand(x) {shape}: numpy broadcasting of x to `shape` (-1 keeps x's size); a view.
void infer_expand(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const TensorType& x = node.operands[0]->type;
  const auto& target = node.attr_ints("shape");
  check_shape_attr(node, target);
  if (int64_t(target.size()) < x.rank())
    DT_THROW(ShapeError) << "expand of " << type_str(x) << " to " << shape_str(target) << ": fewer dims than the input";
  Shape s(target.begin(), target.end());
  const int64_t lead = int64_t(target.size()) - x.rank();
  for (int64_t d = 0; d < int64_t(s.size()); ++d) {
    const int64_t have = d >= lead ? x.shape[size_t(d - lead)] : 1;
    if (s[size_t(d)] == -1 && d >= lead) s[size_t(d)] = have;
    if (s[size_t(d)] < 0 || (have != 1 && have != s[size_t(d)]))
      DT_THROW(ShapeError) << "expand of " << type_str(x) << " to " << shape_str(target) << ": dim " << d
                           << " of size " << have << " cannot become " << target[size_t(d)];
  }
  out.push_back({x.dtype, std::move(s)});
}
void run_expand(const KernelArgs& a) { a.out[0] = a.in[0].expand(a.node.result()->type.shape); }

// full() {shape, value, dtype}: a tensor filled with one value (a constant; the seed gradient of a
// loss, the zeros of an unused piece).
void infer_full(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const auto& shape = node.attr_ints("shape");
  for (int64_t d : shape)
    if (d < 0) DT_THROW(ShapeError) << "full shape " << shape_str(shape) << " has a negative size";
  check_shape_attr(node, shape);
  out.push_back({node.attr_dtype("dtype"), Shape(shape.begin(), shape.end())});
}
void run_full(const KernelArgs& a) {
  a.out[0] = Tensor::full(a.node.result()->type.shape, a.node.attr_float("value"), a.node.attr_dtype("dtype"));
}

// unsqueeze(x) {dims}: inserts size-1 dims at `dims` (positions in the result, torch/ONNX rules).
void infer_unsqueeze(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const TensorType& x = node.operands[0]->type;
  const auto& dims = node.attr_ints("dims");
  const int64_t rank = x.rank() + int64_t(dims.size());
  std::vector<bool> inserted(size_t(rank), false);
  for (int64_t d : dims) {
    const int64_t nd = normalize_dim(d, rank);
    if (inserted[size_t(nd)]) DT_THROW(ValueError) << "unsqueeze dims " << shape_str(dims) << " repeat dim " << nd;
    inserted[size_t(nd)] = true;
  }
  Shape s;
  size_t from = 0;
  for (int64_t d = 0; d < rank; ++d) s.push_back(inserted[size_t(d)] ? 1 : x.shape[from++]);
  out.push_back({x.dtype, std::move(s)});
}

// squeeze(x) {dims}: drops the size-1 dims `dims` (empty: every size-1 dim); a listed dim whose
// size is not 1 is an error (ONNX's rule; torch would keep it silently).
void infer_squeeze(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const TensorType& x = node.operands[0]->type;
  const auto& dims = node.attr_ints("dims");
  std::vector<bool> drop(x.shape.size(), false);
  for (size_t d = 0; d < x.shape.size(); ++d) drop[d] = dims.empty() && x.shape[d] == 1;
  for (int64_t d : dims) {
    const int64_t nd = normalize_dim(d, x.rank());
    if (x.shape[size_t(nd)] != 1)
      DT_THROW(ShapeError) << "squeeze dim " << nd << " of " << type_str(x) << " has size " << x.shape[size_t(nd)] << ", not 1";
    drop[size_t(nd)] = true;
  }
  Shape s;
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (!drop[d]) s.push_back(x.shape[d]);
  out.push_back({x.dtype, std::move(s)});
}

// flatten(x) {start_dim, end_dim}: merges dims start_dim..end_dim into one (torch.flatten).
void infer_flatten(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const TensorType& x = node.operands[0]->type;
  if (x.rank() == 0) {
    out.push_back({x.dtype, {1}});
    return;
  }
  const int64_t a = normalize_dim(node.attr_int("start_dim"), x.rank());
  const int64_t e = normalize_dim(node.attr_int("end_dim"), x.rank());
  if (a > e) DT_THROW(ValueError) << "flatten start_dim " << a << " is after end_dim " << e << " of " << type_str(x);
  Shape s(x.shape.begin(), x.shape.begin() + a);
  int64_t merged = 1;
  for (int64_t d = a; d <= e; ++d) merged *= x.shape[size_t(d)];
  s.push_back(merged);
  s.insert(s.end(), x.shape.begin() + e + 1, x.shape.end());
  out.push_back({x.dtype, std::move(s)});
}

// constant() {shape, values, dtype}: a small tensor written out in the IR (an exporter's constant
// that is neither a parameter nor one repeated value: full covers those). Values are doubles, so
// integers are exact up to 2^53.
constexpr int64_t kMaxConstantElements = 4096;
void infer_constant(const Node& node, const Graph&, std::vector<TensorType>& out) {
  const auto& shape = node.attr_ints("shape");
  for (int64_t d : shape)
    if (d < 0) DT_THROW(ShapeError) << "constant shape " << shape_str(shape) << " has a negative size";
  check_shape_attr(node, shape);
  const Shape s(shape.begin(), shape.end());
  const size_t n = std::get<std::vector<double>>(node.attr("values")).size();
  if (numel(s) > kMaxConstantElements)
    DT_THROW(ValueError) << "constant of shape " << shape_str(shape) << " has more than " << kMaxConstantElements
                         << " elements: make it a parameter";
  if (int64_t(n) != numel(s))
    DT_THROW(ShapeError) << "constant has " << n << " values for shape " << shape_str(shape);
  out.push_back({node.attr_dtype("dtype"), s});
}
void run_constant(const KernelArgs& a) {
  a.out[0] = Tensor::from_doubles(std::get<std::vector<double>>(a.node.attr("values")), a.node.result()->type.shape, a.node.attr_dtype("dtype"));
}

std::vector<int64_t> shape_attr(const Shape& s) { return std::vector<int64_t>(s.begin(), s.end()); }

// Gradient rules.
void grad_embedding(GradContext& c) {
  c.set(1, c.b().record(OpKind::embedding_backward, {c.grad(), c.operand(0)},
                        {{"num_weights", c.operand(1)->type.shape[0]}})[0]);
}
void grad_reshape(GradContext& c) { c.set(0, c.b().reshape(c.grad(), c.operand(0)->type.shape)); }
void grad_transpose(GradContext& c) {
  c.set(0, c.b().transpose(c.grad(), c.node().attr_int("dim0"), c.node().attr_int("dim1")));
}
void grad_permute(GradContext& c) {
  const auto& dims = c.node().attr_ints("dims");
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[size_t(normalize_dim(dims[i], int64_t(dims.size())))] = int64_t(i);
  c.set(0, c.b().permute(c.grad(), inverse));
}
void grad_slice(GradContext& c) {
  const Node& n = c.node();
  c.set(0, c.b().record(OpKind::slice_backward, {c.grad()},
                        {{"shape", shape_attr(c.operand(0)->type.shape)},
                         {"dim", n.attr_int("dim")},
                         {"start", n.attr_int("start")},
                         {"end", n.attr_int("end")},
                         {"step", n.attr_int("step")}})[0]);
}
void grad_split(GradContext& c) {
  std::vector<Value*> pieces;
  for (int i = 0; i < int(c.node().results.size()); ++i) pieces.push_back(c.grad_or_zeros(i));
  c.set(0, pieces.size() == 1 ? pieces[0] : c.b().cat(pieces, c.node().attr_int("dim")));
}
void grad_cat(GradContext& c) {
  const int64_t d = normalize_dim(c.node().attr_int("dim"), c.result()->type.rank());
  int64_t at = 0;
  for (int i = 0; i < c.num_operands(); ++i) {
    const int64_t len = c.operand(i)->type.shape[size_t(d)];
    if (c.wants(i)) c.set(i, c.b().slice(c.grad(), d, at, at + len));
    at += len;
  }
}
void grad_expand(GradContext& c) { c.set(0, c.sum_to(c.grad(), c.operand(0)->type.shape)); }

// Partitioning (OpDef::localize_attrs). A vocabulary-parallel embedding (table rows sharded)
// becomes masked_embedding at this rank's first row: rows of other shards read as zeros, and the
// P(sum) result adds the shards up.
void localize_embedding(const LocalizeContext& c, OpKind& op, std::vector<Attr>& attrs) {
  const std::optional<int64_t> start = c.shard_start(1, 0);
  if (!start) return;
  op = OpKind::masked_embedding;
  attrs = complete_attrs(op, {{"vocab_start", *start}});
}
// Only a slice keeping its whole dim may be sharded on it: keep the whole local dim.
void localize_slice(const LocalizeContext& c, OpKind& op, std::vector<Attr>& attrs) {
  const Node& n = c.node;
  const size_t d = size_t(normalize_dim(n.attr_int("dim"), n.operands[0]->type.rank()));
  const int64_t local = c.local_results[0].shape[d];
  if (local == n.result()->type.shape[d]) return;
  attrs[size_t(op_def(op).attr_index("start"))] = int64_t(0);
  attrs[size_t(op_def(op).attr_index("end"))] = local;
}
// A split whose dim is sharded (one piece keeping the whole dim, or equal pieces of a blocked
// shard: sharding_shape.cc) cuts this rank's local dim into the pieces' local sizes.
void localize_split(const LocalizeContext& c, OpKind& op, std::vector<Attr>& attrs) {
  const Node& n = c.node;
  const size_t d = size_t(normalize_dim(n.attr_int("dim"), n.operands[0]->type.rank()));
  std::vector<int64_t> local;
  bool changed = false;
  for (size_t r = 0; r < n.results.size(); ++r) {
    local.push_back(c.local_results[r].shape[d]);
    changed = changed || local.back() != n.results[r]->type.shape[d];
  }
  if (!changed) return;
  attrs[size_t(op_def(op).attr_index("sizes"))] = std::move(local);
  attrs[size_t(op_def(op).attr_index("split_size"))] = int64_t(0);
}

}  // namespace

void register_shape_ops(OpTable& t) {
  t.add({.kind = OpKind::embedding, .operands = {{"indices"}, {"weight"}}, .attrs = {},
         .infer = infer_embedding, .kernel = run_embedding, .grad = grad_embedding});
  t.add({.kind = OpKind::masked_embedding, .operands = {{"indices"}, {"weight"}},
         .attrs = {{"vocab_start", AttrKind::i64, std::nullopt}}, .infer = infer_embedding,
         .kernel = run_masked_embedding});
  for (OpKind k : {OpKind::view, OpKind::reshape})
    t.add({.kind = k, .operands = {{"x"}}, .attrs = {{"shape", AttrKind::ints, std::nullopt}},
           .infer = infer_view, .kernel = run_view,
           .result_aliases_operand = true, .grad = grad_reshape});
  t.add({.kind = OpKind::transpose, .operands = {{"x"}},
         .attrs = {{"dim0", AttrKind::i64, std::nullopt}, {"dim1", AttrKind::i64, std::nullopt}},
         .infer = infer_transpose, .kernel = run_transpose,
         .result_aliases_operand = true, .grad = grad_transpose});
  t.add({.kind = OpKind::permute, .operands = {{"x"}}, .attrs = {{"dims", AttrKind::ints, std::nullopt}},
         .infer = infer_permute, .kernel = run_permute,
         .result_aliases_operand = true, .grad = grad_permute});
  t.add({.kind = OpKind::slice, .operands = {{"x"}},
         .attrs = {{"dim", AttrKind::i64, std::nullopt},
                   {"start", AttrKind::i64, Attr(int64_t(0))},
                   {"end", AttrKind::i64, Attr(std::numeric_limits<int64_t>::max())},
                   {"step", AttrKind::i64, Attr(int64_t(1))}},
         .infer = infer_slice, .kernel = run_slice,
         .result_aliases_operand = true, .grad = grad_slice});
  t.add({.kind = OpKind::split, .operands = {{"x"}},
         .attrs = {{"split_size", AttrKind::i64, Attr(int64_t(0))},
                   {"sizes", AttrKind::ints, Attr(std::vector<int64_t>{})},
                   {"dim", AttrKind::i64, Attr(int64_t(0))}},
         .infer = infer_split, .kernel = run_split,
         .result_aliases_operand = true, .grad = grad_split});
  t.add({.kind = OpKind::cat, .operands = {{"xs", false, /*variadic=*/true}},
         .attrs = {{"dim", AttrKind::i64, Attr(int64_t(0))}}, .infer = infer_cat, .kernel = run_cat,
         .grad = grad_cat});
  t.add({.kind = OpKind::arange, .operands = {},
         .attrs = {{"start", AttrKind::i64, Attr(int64_t(0))},
                   {"end", AttrKind::i64, std::nullopt},
                   {"step", AttrKind::i64, Attr(int64_t(1))},
                   {"dtype", AttrKind::dtype, Attr(DType::i64)}},
         .infer = infer_arange, .kernel = run_arange});
  t.add({.kind = OpKind::expand, .operands = {{"x"}}, .attrs = {{"shape", AttrKind::ints, std::nullopt}},
         .infer = infer_expand, .kernel = run_expand, .result_aliases_operand = true, .grad = grad_expand});
  t.add({.kind = OpKind::full, .operands = {},
         .attrs = {{"shape", AttrKind::ints, std::nullopt},
                   {"value", AttrKind::f64, Attr(0.0)},
                   {"dtype", AttrKind::dtype, Attr(DType::f32)}},
         .infer = infer_full, .kernel = run_full});
  t.add({.kind = OpKind::unsqueeze, .operands = {{"x"}}, .attrs = {{"dims", AttrKind::ints, std::nullopt}},
         .infer = infer_unsqueeze, .kernel = run_view, .result_aliases_operand = true, .grad = grad_reshape});
  t.add({.kind = OpKind::squeeze, .operands = {{"x"}}, .attrs = {{"dims", AttrKind::ints, Attr(std::vector<int64_t>{})}},
         .infer = infer_squeeze, .kernel = run_view, .result_aliases_operand = true, .grad = grad_reshape});
  t.add({.kind = OpKind::flatten, .operands = {{"x"}},
         .attrs = {{"start_dim", AttrKind::i64, Attr(int64_t(0))}, {"end_dim", AttrKind::i64, Attr(int64_t(-1))}},
         .infer = infer_flatten, .kernel = run_view, .result_aliases_operand = true, .grad = grad_reshape});
  t.add({.kind = OpKind::constant, .operands = {},
         .attrs = {{"shape", AttrKind::ints, std::nullopt},
                   {"values", AttrKind::floats, std::nullopt},
                   {"dtype", AttrKind::dtype, Attr(DType::f32)}},
         .infer = infer_constant, .kernel = run_constant});
  // Lookups and cat copy into a new buffer; the other shape ops may return views.
  for (OpKind k : {OpKind::embedding, OpKind::masked_embedding, OpKind::cat, OpKind::full, OpKind::constant})
    t.at(k).fresh_result = true;
  t.at(OpKind::embedding).localize_attrs = localize_embedding;
  t.at(OpKind::embedding).weight_output_dim = 1;  // weight [num, dim]: colwise shards the features
  t.at(OpKind::slice).localize_attrs = localize_slice;
  t.at(OpKind::split).localize_attrs = localize_split;
  for (OpKind k : {OpKind::view, OpKind::reshape, OpKind::expand, OpKind::full})
    t.at(k).localize_attrs = localize_util::shape_attr;
  t.set_sharding_rules(shape_sharding_rules());
}

}  // namespace dt::ir
