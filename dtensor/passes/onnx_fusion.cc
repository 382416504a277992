// Pattern fusion of imported graphs (onnx_fusion.h). One sweep over the nodes in order: a node that
// ends a pattern gets a replacement recorded at the end of the graph and placed where it stood; the
// replaced value's users read the replacement; then the nodes nothing reads any more are dropped.
#include "dtensor/passes/onnx_fusion.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <unordered_map>

#include "dtensor/kernels/ops.h"
#include "dtensor/ir/builder.h"
#include "dtensor/ir/use_lists.h"

namespace dt::passes {
namespace {

using ir::Node;
using ir::OpKind;
using ir::Value;

class Fuser {
 public:
  Fuser(ir::Graph& g, const std::map<std::string, Tensor>& weights)
      : g_(g), weights_(weights), b_(g), uses_(g), num_values_(g.num_values()) {}

  FusionCounts run();

 private:
  // The producer of `v` when it is op `op`, else null.
  static Node* made_by(const Value* v, OpKind op) {
    return v->producer && v->producer->op == op ? v->producer : nullptr;
  }
  // The one node reading `v` (not a graph output) as the sweep has left the graph, else null. The
  // use lists are the graph's before the sweep, not rebuilt per rewrite: a replacement's readers
  // are those of the value it replaced, a replaced value has none, and the sweep's own new nodes
  // are not counted as readers.
  const Node* sole_user(const Value* v) const {
    if (auto it = replaced_.find(v); it != replaced_.end()) {
      if (!it->second) return nullptr;
      v = it->second;
    }
    return size_t(v->id) < num_values_ ? uses_.sole_user(v) : nullptr;
  }
  // `v` computed by a node and read only by the node being matched, so the pattern may absorb it.
  bool single_use(const Value* v) const { return v->kind == ir::ValueKind::result && sole_user(v); }
  // The value of `v` when it is known at import: a full, a constant or a parameter.
  bool constant_of(const Value* v, Tensor& t) const;
  // The scalar value of `v` when it is a one-element constant.
  bool scalar_of(const Value* v, double& x) const {
    Tensor t;
    if (!constant_of(v, t) || t.numel() != 1) return false;
    x = t.to_doubles()[0];
    return true;
  }
  // The other operand of `v` = op(o, c) or op(c, o) when c is a scalar constant within 1e-6
  // (relative) of `want` and `v` is read only by the pattern; else null.
  Value* with_scalar(Value* v, OpKind op, double want) const;
  // The same for node n itself (its result may have any readers).
  Value* other_than_scalar(const Node* n, double want) const;
  bool match_rms(Node* n);
  bool match_attention(Node* n);
  bool match_gelu_tanh(Node* n);
  bool match_silu(Node* n);
  bool match_gelu_erf(Node* n);
  // Records act(x) for an elementwise activation node `act` of `x` and puts it in `at`'s place.
  void replace_activation(Node* at, Value* x, const std::function<Value*(Value*)>& act);
  Value* unrepeated_heads(Value* r);
  // Places the nodes recorded since `mark` before `at`, and makes `old`'s users read `now`.
  void replace(const Node* at, size_t mark, Value* old, Value* now);

  ir::Graph& g_;
  const std::map<std::string, Tensor>& weights_;
  ir::Builder b_;
  const ir::UseLists uses_;
  const size_t num_values_;  // values the use lists know
  // A replacement -> the value of the original graph whose readers it took over; a replaced
  // value -> null (nothing reads it any more).
  std::unordered_map<const Value*, const Value*> replaced_;
  std::map<const Node*, std::vector<Node*>> before_;  // new nodes to place before an original node
  std::vector<std::pair<Value*, std::string>> renames_;  // replaced graph outputs' names
  FusionCounts counts_;
};

bool Fuser::constant_of(const Value* v, Tensor& t) const {
  if (v->kind == ir::ValueKind::param) {
    auto it = weights_.find(v->name);
    if (it == weights_.end()) return false;
    t = it->second;
    return true;
  }
  if (const Node* n = made_by(v, OpKind::full)) {
    t = Tensor::full(v->type.shape, n->attr_float("value"), v->type.dtype);
    return true;
  }
  if (const Node* n = made_by(v, OpKind::constant)) {
    t = Tensor::from_doubles(std::get<std::vector<double>>(n->attr("values")), v->type.shape, v->type.dtype);
    return true;
  }
  return false;
}

// The sum of squares' source: pow(x, 2) or x * x.
Value* square_source(const Value* v) {
  const Node* n = v->producer;
  if (!n) return nullptr;
  if (n->op == OpKind::pow && n->attr_float("exponent") == 2.0) return n->operands[0];
  if (n->op == OpKind::mul && n->operands[0] == n->operands[1]) return n->operands[0];
  return nullptr;
}

bool Fuser::match_rms(Node* n) {
  // n: mul(x, r) | mul(r, x) with r = rsqrt(d) or 1 / sqrt(d); or div(x, sqrt(d)); with
  // d = mean(x^2, [-1], keepdim) + eps. Optionally followed by a single mul by a weight [H].
  Value* x = nullptr;
  Value* sq = nullptr;  // the sqrt or rsqrt value (whose operand is d)
  auto as_rsqrt = [&](Value* r, Value*& s) {
    if (!single_use(r)) return false;
    if (made_by(r, OpKind::rsqrt)) return s = r, true;
    if (Node* d = made_by(r, OpKind::div); d && single_use(d->operands[1]) && made_by(d->operands[1], OpKind::sqrt)) {
      double one;
      if (scalar_of(d->operands[0], one) && one == 1.0) return s = d->operands[1], true;
    }
    return false;
  };
  if (n->op == OpKind::mul) {
    for (int i = 0; i < 2 && !sq; ++i)
      if (as_rsqrt(n->operands[size_t(1 - i)], sq)) x = n->operands[size_t(i)];
  } else if (n->op == OpKind::div && single_use(n->operands[1]) && made_by(n->operands[1], OpKind::sqrt)) {
    x = n->operands[0];
    sq = n->operands[1];
  }
  if (!sq) return false;
  Node* add = made_by(sq->producer->operands[0], OpKind::add);
  if (!add || !single_use(add->result())) return false;
  double eps = 0;
  Value* m = nullptr;
  for (int i = 0; i < 2 && !m; ++i)
    if (scalar_of(add->operands[size_t(1 - i)], eps)) m = add->operands[size_t(i)];
  Node* mean = m ? made_by(m, OpKind::mean) : nullptr;
  if (!mean || !single_use(m) || !mean->attr_bool("keepdim")) return false;
  const int64_t rank = x->type.rank();
  const std::vector<int64_t>& dims = mean->attr_ints("dims");
  if (rank < 1 || dims.size() != 1 || (dims[0] != -1 && dims[0] != rank - 1)) return false;
  if (!single_use(mean->operands[0]) || square_source(mean->operands[0]) != x) return false;
  if (!is_floating(x->type.dtype) || n->result()->type != x->type) return false;
  const int64_t h = x->type.shape.back();
  // A following mul by a weight [H] (a parameter, nn.RMSNorm's scale) joins the norm.
  const Node* at = n;
  Value* weight = nullptr;
  Value* old = n->result();
  if (const Node* u = single_use(old) ? sole_user(old) : nullptr; u && u->op == OpKind::mul) {
    for (int i = 0; i < 2 && !weight; ++i)
      if (u->operands[size_t(i)] == old && u->operands[size_t(1 - i)]->kind == ir::ValueKind::param &&
          u->operands[size_t(1 - i)]->type == ir::TensorType{x->type.dtype, {h}} && u->result()->type == x->type) {
        weight = u->operands[size_t(1 - i)];
        at = u;
      }
  }
  const size_t mark = g_.nodes().size();
  Value* y = b_.rms_norm(x, {h}, weight, eps);
  replace(at, mark, at->result(), y);
  ++counts_.rms_norm;
  return true;
}

Value* Fuser::with_scalar(Value* v, OpKind op, double want) const {
  return single_use(v) ? other_than_scalar(made_by(v, op), want) : nullptr;
}

Value* Fuser::other_than_scalar(const Node* n, double want) const {
  if (!n || n->operands.size() != 2) return nullptr;
  for (int i = 0; i < (n->op == OpKind::div ? 1 : 2); ++i) {  // a div's constant is its divisor
    double c;
    if (scalar_of(n->operands[size_t(1 - i)], c) && std::fabs(c - want) <= 1e-6 * std::fabs(want))
      return n->operands[size_t(i)];
  }
  return nullptr;
}

bool Fuser::match_gelu_tanh(Node* n) {
  // n: mul(0.5 * x, 1 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3)))), either way round at each
  // mul and add: Hugging Face's gelu_new / NewGELUActivation, which PyTorch exports op by op.
  if (n->op != OpKind::mul || n->operands.size() != 2) return false;
  for (int i = 0; i < 2; ++i) {
    Value* x = with_scalar(n->operands[size_t(i)], OpKind::mul, 0.5);
    Value* t = with_scalar(n->operands[size_t(1 - i)], OpKind::add, 1.0);
    Node* tanh = t ? made_by(t, OpKind::tanh) : nullptr;
    if (!x || !tanh || !single_use(t)) continue;
    Value* inner = with_scalar(tanh->operands[0], OpKind::mul, std::sqrt(2.0 / M_PI));
    Node* add = inner ? made_by(inner, OpKind::add) : nullptr;
    if (!add || !single_use(inner)) continue;
    for (int j = 0; j < 2; ++j) {
      Value* cube = with_scalar(add->operands[size_t(1 - j)], OpKind::mul, 0.044715);
      Node* pow = cube ? made_by(cube, OpKind::pow) : nullptr;
      if (add->operands[size_t(j)] != x || !pow || !single_use(cube) || pow->operands[0] != x ||
          pow->attr_float("exponent") != 3.0 || n->result()->type != x->type || !is_floating(x->type.dtype))
        continue;
      replace_activation(n, x, [&](Value* v) { return b_.gelu(v, "tanh"); });
      return true;
    }
  }
  return false;
}

bool Fuser::match_gelu_erf(Node* n) {
  // n: x * (1 + erf(x / sqrt(2))) * 0.5 (torch.nn.functional.gelu as PyTorch exports it: BERT),
  // either way round at each mul and add; x / sqrt(2) also as x * (1 / sqrt(2)).
  if (n->op != OpKind::mul) return false;
  Value* prod = other_than_scalar(n, 0.5);
  Node* m = prod && single_use(prod) ? made_by(prod, OpKind::mul) : nullptr;
  for (int j = 0; m && j < 2; ++j) {
    Value* x = m->operands[size_t(j)];
    Value* t = with_scalar(m->operands[size_t(1 - j)], OpKind::add, 1.0);
    Node* erf = t ? made_by(t, OpKind::erf) : nullptr;
    if (!erf || !single_use(t)) continue;
    Value* u = erf->operands[0];
    if ((with_scalar(u, OpKind::div, M_SQRT2) != x && with_scalar(u, OpKind::mul, M_SQRT1_2) != x) ||
        n->result()->type != x->type || !is_floating(x->type.dtype))
      continue;
    replace_activation(n, x, [&](Value* v) { return b_.gelu(v); });
    return true;
  }
  return false;
}

bool Fuser::match_silu(Node* n) {
  // n: mul(x, sigmoid(x)) either way round (SiLU as exporters write it).
  if (n->op != OpKind::mul || n->operands.size() != 2) return false;
  for (int i = 0; i < 2; ++i) {
    Value* x = n->operands[size_t(i)];
    Value* s = n->operands[size_t(1 - i)];
    Node* sig = made_by(s, OpKind::sigmoid);
    if (!sig || sig->operands[0] != x || !single_use(s) || n->result()->type != x->type || !is_floating(x->type.dtype))
      continue;
    replace_activation(n, x, [&](Value* v) { return b_.silu(v); });
    return true;
  }
  return false;
}

void Fuser::replace_activation(Node* at, Value* x, const std::function<Value*(Value*)>& act) {
  const size_t mark = g_.nodes().size();
  // An activation commutes with a reshape: when x only reshapes a linear's result, apply it to the
  // linear's result (and reshape after), so that the runtime runs it as the linear's epilogue
  // (runtime/interpreter_fusion.h wants the activation to be the linear's only reader).
  Node* r = made_by(x, OpKind::reshape);
  Value* y = r && made_by(r->operands[0], OpKind::linear) && single_use(r->operands[0])
                 ? b_.reshape(act(r->operands[0]), x->type.shape)
                 : act(x);
  replace(at, mark, at->result(), y);
  ++counts_.activation;
}

bool Fuser::match_attention(Node* n) {
  // n: matmul(p, v) with p = softmax(s, -1), s = masked(scaled(matmul(q, kᵀ))).
  if (n->op != OpKind::matmul) return false;
  Value* p = n->operands[0];
  Value* v = n->operands[1];
  Node* sm = made_by(p, OpKind::softmax);
  if (!sm || !single_use(p)) return false;
  const int64_t rank = p->type.rank();
  if (rank < 2 || (sm->attr_int("dim") != -1 && sm->attr_int("dim") != rank - 1)) return false;
  Value* s = sm->operands[0];
  if (!single_use(s)) return false;
  // The mask, if any: add(s, m) with m 0 on and below the diagonal and -inf (or <= -1e4) above;
  // or where(c, s, fill) / where(c, fill, s).
  bool causal = false;
  const int64_t len = p->type.shape[size_t(rank - 1)], rows = p->type.shape[size_t(rank - 2)];
  auto causal_mask = [&](const Tensor& t, const std::function<bool(double, bool)>& ok) {
    // t broadcasts to [..., rows, len] with only its last two dims > 1.
    if (t.dim() < 2 || t.dim() > rank || rows != len) return false;
    for (int64_t d = 0; d + 2 < t.dim(); ++d)
      if (t.shape()[size_t(d)] != 1) return false;
    if (t.shape()[size_t(t.dim() - 2)] != rows || t.shape().back() != len) return false;
    const std::vector<double> vals = t.to_doubles();
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < len; ++j)
        if (!ok(vals[size_t(i * len + j)], j > i)) return false;
    return true;
  };
  // Any other mask (an input, a padding mask) becomes the mask operand: the additive one of an
  // add, or the keep-condition c of where(c, scores, fill).
  Value* mask = nullptr;
  auto scaled_scores = [&](Value* x) { return made_by(x, OpKind::div) || made_by(x, OpKind::mul); };
  // x = where(c, inner, fill) or where(c, fill, inner) with a constant causal condition c and a
  // fill <= -1e4: sets `inner`.
  auto causal_where = [&](Value* x, Value*& inner) {
    Node* w = made_by(x, OpKind::where);
    Tensor c;
    double fill = 0;
    if (!w || !constant_of(w->operands[0], c) || c.dtype() != DType::boolean) return false;
    for (int i = 1; i <= 2; ++i)
      if (scalar_of(w->operands[size_t(i)], fill) && fill <= -1e4 &&
          causal_mask(c, [&](double m, bool above) { return (m != 0) == (i == 1) ? above : !above; })) {
        inner = w->operands[size_t(3 - i)];
        return true;
      }
    return false;
  };
  if (Node* add = made_by(s, OpKind::add)) {
    Tensor m;
    for (int i = 0; i < 2 && !causal; ++i)
      if (constant_of(add->operands[size_t(1 - i)], m) &&
          causal_mask(m, [](double x, bool above) { return above ? x <= -1e4 : x == 0; })) {
        causal = true;
        s = add->operands[size_t(i)];
      }
    // Hugging Face's GPT-2: where(causal, scores, finfo.min) + attention_mask: both (tried first:
    // the mask, (1 - m) * finfo.min, is a mul too).
    for (int i = 0; i < 2 && !causal && !mask; ++i) {
      Value* inner = nullptr;
      if (single_use(add->operands[size_t(i)]) && causal_where(add->operands[size_t(i)], inner) &&
          add->operands[size_t(1 - i)]->type.dtype == s->type.dtype) {
        causal = true;
        mask = add->operands[size_t(1 - i)];
        s = inner;
      }
    }
    for (int i = 0; i < 2 && !causal && !mask; ++i)
      if (scaled_scores(add->operands[size_t(i)]) && add->operands[size_t(1 - i)]->type.dtype == s->type.dtype) {
        mask = add->operands[size_t(1 - i)];
        s = add->operands[size_t(i)];
      }
    if ((!causal && !mask) || !single_use(s)) return false;
  } else if (Node* w = made_by(s, OpKind::where)) {
    Tensor c;
    double fill = 0;
    const bool constant_condition = constant_of(w->operands[0], c) && c.dtype() == DType::boolean;
    for (int i = 1; i <= 2 && !causal && constant_condition; ++i) {
      Value* other = w->operands[size_t(3 - i)];
      // Fill at i: masked where c equals (i == 1), kept elsewhere.
      const bool masked_when = i == 1;
      if (scalar_of(w->operands[size_t(i)], fill) && fill <= -1e4 &&
          causal_mask(c, [&](double x, bool above) { return (x != 0) == masked_when ? above : !above; })) {
        causal = true;
        s = other;
      }
    }
    if (!causal && w->operands[0]->type.dtype == DType::boolean && scalar_of(w->operands[2], fill) && fill <= -1e4 &&
        scaled_scores(w->operands[1])) {
      mask = w->operands[0];
      s = w->operands[1];
    }
    if ((!causal && !mask) || !single_use(s)) return false;
  }
  // The scale: div by sqrt(D) or mul by 1/sqrt(D).
  Node* scale = made_by(s, OpKind::div);
  double k = 0;
  Value* raw = nullptr;
  if (scale && scalar_of(scale->operands[1], k)) {
    raw = scale->operands[0];
    k = 1 / k;
  } else if ((scale = made_by(s, OpKind::mul))) {
    for (int i = 0; i < 2 && !raw; ++i)
      if (scalar_of(scale->operands[size_t(1 - i)], k)) raw = scale->operands[size_t(i)];
  }
  if (!raw || !single_use(raw)) return false;
  Node* qk = made_by(raw, OpKind::matmul);
  if (!qk) return false;
  Value* q = qk->operands[0];
  Value* kt = qk->operands[1];
  if (q->type.rank() != rank || kt->type.rank() != rank || v->type.rank() != rank) return false;
  const int64_t d = q->type.shape.back();
  // 1/sqrt(D) is the op's default; any other factor goes into `scale` (0 would read as the default).
  if (k == 0) return false;
  const double scale_attr = std::abs(k * std::sqrt(double(d)) - 1) <= 1e-6 ? 0.0 : k;
  // Leading (batch, head) dims must agree exactly: the op does not broadcast them.
  for (int64_t i = 0; i + 2 < rank; ++i)
    if (q->type.shape[size_t(i)] != kt->type.shape[size_t(i)] || q->type.shape[size_t(i)] != v->type.shape[size_t(i)])
      return false;
  if (mask) {
    const Shape scores = dt::attention_scores_shape(q->type.shape, v->type.shape);
    if (mask->type.rank() > rank) return false;
    for (int64_t i = 1; i <= mask->type.rank(); ++i) {
      const int64_t m = mask->type.shape[size_t(mask->type.rank() - i)], t = scores[size_t(rank - i)];
      if (m != t && m != 1) return false;  // the mask would widen the scores: not this op
    }
  }
  const size_t mark = g_.nodes().size();
  // kᵀ is most often a transpose of the last two dims of k: read k itself.
  Value* key = nullptr;
  if (Node* t = made_by(kt, OpKind::transpose)) {
    const int64_t a = t->attr_int("dim0"), c = t->attr_int("dim1");
    const int64_t a0 = a < 0 ? a + rank : a, c0 = c < 0 ? c + rank : c;
    if (std::min(a0, c0) == rank - 2 && std::max(a0, c0) == rank - 1) key = t->operands[0];
  } else if (Node* t = made_by(kt, OpKind::permute); t && single_use(kt)) {
    // kᵀ = permute(x, dims): k = permute(x, dims with its last two swapped) (x itself when
    // that is the identity), one permute instead of two.
    std::vector<int64_t> dims = t->attr_ints("dims");
    std::swap(dims[size_t(rank - 2)], dims[size_t(rank - 1)]);
    bool identity = true;
    for (int64_t i = 0; i < rank; ++i) identity &= dims[size_t(i)] == i;
    key = identity ? t->operands[0] : b_.permute(t->operands[0], dims);
  }
  if (!key) key = b_.transpose(kt, -2, -1);
  // Grouped-query exports repeat k/v to q's heads (x[:, :, None].expand(B, Hkv, g, S, D)
  // .reshape(B, Hq, S, D), repeat_interleave's semantics): the op reads the Hkv heads instead.
  Value* key_heads = unrepeated_heads(key);
  Value* v_heads = key_heads ? unrepeated_heads(v) : nullptr;
  if (key_heads && v_heads && key_heads->type.shape[size_t(rank - 3)] == v_heads->type.shape[size_t(rank - 3)]) {
    key = key_heads;
    v = v_heads;
  }
  Value* y = b_.scaled_dot_product_attention(q, key, v, causal, mask, scale_attr);
  if (y->type != n->result()->type) return false;  // left unused; dropped below
  replace(n, mark, n->result(), y);
  ++counts_.attention;
  return true;
}

// r = reshape(expand(x [..., Hkv, 1, S, D] -> [..., Hkv, g, S, D]) -> [..., Hkv·g, S, D]), the
// repeat of a grouped-query export (x most often unsqueeze(k, -3)): returns k [..., Hkv, S, D]
// (recording a view when x is not an unsqueeze), or null for anything else.
Value* Fuser::unrepeated_heads(Value* r) {
  const int64_t rank = r->type.rank();
  if (rank < 3) return nullptr;
  Node* reshape = made_by(r, OpKind::reshape);
  if (!reshape) reshape = made_by(r, OpKind::view);
  if (!reshape) return nullptr;
  Node* expand = made_by(reshape->operands[0], OpKind::expand);
  if (!expand) return nullptr;
  const Shape& e = expand->result()->type.shape;
  const Shape& x = expand->operands[0]->type.shape;
  if (int64_t(e.size()) != rank + 1 || x.size() != e.size()) return nullptr;
  const size_t h = size_t(rank - 3);  // Hkv at h, the group at h + 1
  for (size_t i = 0; i < e.size(); ++i)
    if (i != h + 1 && x[i] != e[i]) return nullptr;
  if (x[h + 1] != 1 || e[h] * e[h + 1] != r->type.shape[h]) return nullptr;
  Shape kv = x;
  kv.erase(kv.begin() + std::ptrdiff_t(h + 1));
  Value* base = expand->operands[0];
  if (Node* u = made_by(base, OpKind::unsqueeze); u && u->operands[0]->type.shape == kv) return u->operands[0];
  return b_.view(base, kv);
}

void Fuser::replace(const Node* at, size_t mark, Value* old, Value* now) {
  for (size_t i = mark; i < g_.nodes().size(); ++i) before_[at].push_back(g_.nodes()[i]);
  for (Value* o : g_.outputs())
    if (o == old) renames_.emplace_back(now, old->name);
  g_.replace_all_uses(old, now);
  auto it = replaced_.find(old);
  replaced_[now] = it != replaced_.end() ? it->second : old;
  replaced_[old] = nullptr;
}

FusionCounts Fuser::run() {
  const std::vector<Node*> original = g_.nodes();
  for (Node* n : original) {
    if (match_attention(n)) continue;
    if (match_gelu_tanh(n) || match_gelu_erf(n) || match_silu(n)) continue;
    if (n->op == OpKind::mul || n->op == OpKind::div) match_rms(n);
  }
  // New nodes where their pattern ended, then drop what nothing reads.
  std::vector<Node*> order;
  for (Node* n : original) {
    if (auto it = before_.find(n); it != before_.end()) order.insert(order.end(), it->second.begin(), it->second.end());
    order.push_back(n);
  }
  g_.set_node_order(order);
  make_dce_pass()->run(g_);
  // Names of replaced graph outputs go to their replacements (dropping their nodes freed them).
  for (auto& [v, name] : renames_) g_.rename(v, name);
  return counts_;
}

}  // namespace

PassPtr make_onnx_fusion_pass(const std::map<std::string, Tensor>& weights, FusionCounts* counts) {
  return make_pass("onnx-fusion",
                   "fuse an exporter's decomposed RMSNorm, attention, GELU and SiLU into rms_norm, "
                   "scaled_dot_product_attention, gelu and silu",
                   [&weights, counts](ir::Graph& graph) {
                     const FusionCounts found = Fuser(graph, weights).run();
                     if (counts) {
                       counts->rms_norm += found.rms_norm;
                       counts->attention += found.attention;
                       counts->activation += found.activation;
                     }
                     return found.rms_norm + found.attention + found.activation > 0;
                   });
}

}  // namespace dt::passes
