#include "dtensor/ir/example_models.h"

#include <fmt/format.h>

#include <cmath>

#include "dtensor/core/error.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/builder.h"

namespace dt::ir {
namespace {

void require_positive(int64_t v, const char* name) {
  if (v <= 0) DT_THROW(ValueError) << name << " must be positive, got " << v;
}

// Declares `<prefix>.weight [out, in]` and `<prefix>.bias [out]` and returns them.
std::pair<Value*, Value*> linear_params(Builder& b, const std::string& prefix, int64_t in, int64_t out, bool bias = true,
                                        DType dtype = DType::f32) {
  Value* w = b.param(prefix + ".weight", dtype, {out, in});
  Value* bb = bias ? b.param(prefix + ".bias", dtype, {out}) : nullptr;
  return {w, bb};
}

std::pair<Value*, Value*> norm_params(Builder& b, const std::string& prefix, int64_t h, DType dtype = DType::f32) {
  return {b.param(prefix + ".weight", dtype, {h}), b.param(prefix + ".bias", dtype, {h})};
}

}  // namespace

Graph build_mlp(const MlpConfig& c) {
  require_positive(c.hidden, "hidden");
  require_positive(c.batch, "batch");
  if (c.layers < 0) DT_THROW(ValueError) << "layers must be >= 0, got " << c.layers;
  Graph g("mlp");
  Builder b(g);
  const int64_t h = c.hidden;
  Value* x = b.input("input", DType::f32, {c.batch, h});
  Value* target = c.loss ? b.input("target", DType::f32, {c.batch, h}) : nullptr;
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = fmt::format("layers.{}", i);
    auto [ln_w, ln_b] = norm_params(b, p + ".ln", h);
    auto [fc1_w, fc1_b] = linear_params(b, p + ".fc1", h, 4 * h);
    auto [fc2_w, fc2_b] = linear_params(b, p + ".fc2", 4 * h, h);
    Value* y = b.layer_norm(x, {h}, ln_w, ln_b, 1e-5);
    y = b.relu(b.linear(y, fc1_w, fc1_b));
    y = b.linear(y, fc2_w, fc2_b);
    x = b.named(p + ".out").add(x, y);
  }
  if (c.loss) b.outputs({x, b.named("loss").mse_loss(x, target)});
  else b.outputs({x});
  return g;
}

Graph build_gpt(const GptConfig& c) {
  for (auto [v, name] : {std::pair{c.vocab, "vocab"}, {c.hidden, "hidden"}, {c.heads, "heads"},
                         {c.max_seq, "max-seq"}, {c.batch, "batch"}, {c.seq, "seq"}})
    require_positive(v, name);
  if (c.layers < 0) DT_THROW(ValueError) << "layers must be >= 0, got " << c.layers;
  if (c.hidden % c.heads != 0)
    DT_THROW(ValueError) << "hidden " << c.hidden << " is not divisible by heads " << c.heads;
  if (c.seq > c.max_seq) DT_THROW(ValueError) << "seq " << c.seq << " exceeds max-seq " << c.max_seq;
  if (c.dtype != DType::f32 && c.dtype != DType::bf16)
    DT_THROW(DTypeError) << "the gpt's dtype must be f32 or bf16, got " << dtype_name(c.dtype);
  const DType dt = c.dtype;
  const int64_t B = c.batch, S = c.seq, H = c.hidden, NH = c.heads, D = H / NH;
  Graph g("gpt");
  Builder b(g);
  Value* ids = b.input("input", DType::i64, {B, S});
  Value* target = c.loss ? b.input("target", DType::i64, {B, S}) : nullptr;
  Value* wte = b.param("wte.weight", dt, {c.vocab, H});
  Value* wpe = b.param("wpe.weight", dt, {c.max_seq, H});
  Value* pos = b.named("pos").arange(S);
  Value* tok = b.embedding(ids, wte);                   // [B, S, H]
  Value* x = b.add(tok, b.embedding(pos, wpe));         // + [S, H], broadcast over the batch
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = fmt::format("h.{}", i);
    auto [ln1_w, ln1_b] = norm_params(b, p + ".ln_1", H, dt);
    auto [q_w, q_b] = linear_params(b, p + ".attn.q_proj", H, H, true, dt);
    auto [k_w, k_b] = linear_params(b, p + ".attn.k_proj", H, H, true, dt);
    auto [v_w, v_b] = linear_params(b, p + ".attn.v_proj", H, H, true, dt);
    auto [o_w, o_b] = linear_params(b, p + ".attn.o_proj", H, H, true, dt);
    auto [ln2_w, ln2_b] = norm_params(b, p + ".ln_2", H, dt);
    auto [in_w, in_b] = linear_params(b, p + ".mlp.fc_in", H, 4 * H, true, dt);
    auto [out_w, out_b] = linear_params(b, p + ".mlp.fc_out", 4 * H, H, true, dt);

    Value* hn = b.layer_norm(x, {H}, ln1_w, ln1_b, 1e-5);
    // [B, S, H] -> [B, S, heads, D] -> [B, heads, S, D]
    auto heads = [&](Value* w, Value* bias) { return b.transpose(b.view(b.linear(hn, w, bias), {B, S, NH, D}), 1, 2); };
    Value* q = heads(q_w, q_b);
    Value* k = heads(k_w, k_b);
    Value* v = heads(v_w, v_b);
    Value* a = b.scaled_dot_product_attention(q, k, v, /*causal=*/true);
    a = b.reshape(b.transpose(a, 1, 2), {B, S, H});
    // Arguments first: named() applies to the next recorded node.
    Value* o = b.linear(a, o_w, o_b);
    x = b.named(p + ".attn.out").add(x, o);
    Value* m = b.layer_norm(x, {H}, ln2_w, ln2_b, 1e-5);
    m = b.linear(b.gelu(b.linear(m, in_w, in_b), "tanh"), out_w, out_b);
    x = b.named(p + ".out").add(x, m);
  }
  auto [lnf_w, lnf_b] = norm_params(b, "ln_f", H, dt);
  Value* lm_head = b.param("lm_head.weight", dt, {c.vocab, H});
  Value* xf = b.layer_norm(x, {H}, lnf_w, lnf_b, 1e-5);
  Value* logits = b.named("logits").linear(xf, lm_head);
  if (c.loss) {
    Value* flat_logits = b.view(logits, {B * S, c.vocab});
    Value* flat_target = b.view(target, {B * S});
    Value* loss = b.named("loss").cross_entropy(flat_logits, flat_target);
    b.outputs({logits, loss});
  } else {
    b.outputs({logits});
  }
  return g;
}

std::map<std::string, Tensor> random_weights(const Graph& graph, uint64_t seed) {
  Generator gen(seed);
  std::map<std::string, Tensor> out;
  for (const Value* p : graph.params()) {
    const TensorType& t = p->type;
    Tensor w;
    if (t.rank() >= 2) {
      double bound = 1.0 / std::sqrt(double(std::max<int64_t>(t.shape[1], 1)));
      w = rand(t.shape, gen, t.dtype, -bound, bound);
    } else if (p->name.size() >= 7 && p->name.compare(p->name.size() - 7, 7, ".weight") == 0) {
      w = rand(t.shape, gen, t.dtype, 0.9, 1.1);
    } else {
      w = rand(t.shape, gen, t.dtype, -0.1, 0.1);
    }
    out.emplace(p->name, std::move(w));
  }
  return out;
}

}  // namespace dt::ir
