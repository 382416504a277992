// The ONNX importer (dtensor/io/onnx_import.h); its conformance node tests are the
// onnx_conformance_test ctest (`dtensor onnx-conformance`). Here:
//  - PyTorch's exports of tests/reference/onnx (scripts/make_onnx_reference.py): import, print/parse
//    round-trip, attention and RMSNorm fused, one device within 1e-5 of PyTorch (fused and not),
//    and tp and sp on meshes 2, 3 and 4 and fsdp x tp on 2x2 with the plans beside them matching
//    the single-device run;
//  - a realistic-size llama-style model built here (hidden 512, 8 heads, vocab 509): fused as
//    exported, and tp on meshes 3 and 4 matching one device;
//  - every user error: a truncated file, an unsupported op, IR and opset versions out of range, a
//    dynamic dim without --input-shape, a wrong --input-shape name and bad --input-shape text.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <cmath>
#include <set>

#include "dtensor/kernels/ops.h"
#include "dtensor/io/onnx_import.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/ir/parser.h"
#include "dtensor/ir/printer.h"
#include "dtensor/runtime/interpreter_fusion.h"
#include "dtensor/sharding/parallel_plan.h"
#include "tests/sharding/sharded_run.h"
#include "tests/support/ops_test_util.h"
#include "tests/onnx/onnx_reference.h"

namespace dt::io {
namespace {

namespace fs = std::filesystem;
using test::expect_error;


std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// ---- PyTorch's exports ----

class Reference : public ::testing::TestWithParam<std::string> {};

TEST_P(Reference, ImportsRunsLikePyTorchAndShards) {
  const std::string m = GetParam();
  OnnxImportOptions opt;
  opt.input_shapes["input_ids"] = {2, 8};
  OnnxImportResult im = import_onnx(kReference + "/" + m + ".onnx", opt);
  // Print/parse round-trip.
  const std::string text = ir::print(im.graph);
  EXPECT_EQ(ir::print(ir::parse(text, m + ".dt")), text);
  // The nn.Linear modules are linear ops on parameters named by their module paths.
  const std::string q = m == "gpt" ? "h.0.attn.q_proj.weight" : "layers.0.self_attn.q_proj.weight";
  ASSERT_TRUE(im.graph.find(q)) << q;
  EXPECT_EQ(im.graph.find(q)->kind, ir::ValueKind::param);
  EXPECT_GE(sharding::testing::count_ops(im.graph, ir::OpKind::linear), m == "gpt" ? 13 : 15);
  // The decomposed attention (and llama's RMSNorm) are fused: heads shard through one op.
  EXPECT_EQ(sharding::testing::count_ops(im.graph, ir::OpKind::matmul), 0);
  EXPECT_EQ(sharding::testing::count_ops(im.graph, ir::OpKind::scaled_dot_product_attention), 2);
  EXPECT_EQ(sharding::testing::count_ops(im.graph, ir::OpKind::rms_norm), m == "llama" ? 5 : 0);
  // llama's grouped-query k/v (8 q heads, 2 kv heads, repeated by Expand + Reshape in the export)
  // import without the repeat: the attention reads the 2 kv heads.
  for (const ir::Node* n : im.graph.nodes())
    if (n->op == ir::OpKind::scaled_dot_product_attention) {
      const int64_t hq = n->operands[0]->type.shape[1];
      EXPECT_EQ(hq, m == "llama" ? 8 : 4);
      EXPECT_EQ(n->operands[1]->type.shape[1], m == "llama" ? 2 : hq);
      EXPECT_EQ(n->operands[2]->type.shape[1], m == "llama" ? 2 : hq);
    }
  EXPECT_EQ(sharding::testing::count_ops(im.graph, ir::OpKind::expand), 0);
  // One device, against PyTorch, fused and as exported.
  TensorMap io = read_safetensors(kReference + "/" + m + "_io.safetensors");
  const TensorMap inputs = {{"input_ids", io.at("input_ids")}};
  std::vector<Tensor> single = sharding::testing::run_single(im.graph, im.weights, inputs);
  DiffReport d = compare(single[0], io.at("output"), 1e-5, 1e-5);
  std::printf("%s: one device vs PyTorch max_abs_diff %.3g\n", m.c_str(), d.max_abs_diff);
  EXPECT_TRUE(d.shapes_match && d.mismatches == 0) << "max_abs_diff " << d.max_abs_diff;
  OnnxImportOptions unfused = opt;
  unfused.fuse = false;
  OnnxImportResult raw = import_onnx(kReference + "/" + m + ".onnx", unfused);
  EXPECT_EQ(sharding::testing::count_ops(raw.graph, ir::OpKind::scaled_dot_product_attention), 0);
  EXPECT_EQ(sharding::testing::count_ops(raw.graph, ir::OpKind::matmul), 4);  // q·kᵀ and p·v per layer
  DiffReport dr = compare(sharding::testing::run_single(raw.graph, raw.weights, inputs)[0], io.at("output"), 1e-5, 1e-5);
  EXPECT_TRUE(dr.shapes_match && dr.mismatches == 0) << "unfused max_abs_diff " << dr.max_abs_diff;
  // Tensor parallel, sequence parallel (meshes the heads and the sequence do and do not divide)
  // and fsdp x tp on 2x2, with the plans beside the model, against the single-device run.
  struct Case {
    std::string plan;
    DeviceMesh mesh;
  };
  std::vector<Case> cases;
  for (const char* p : {"tp", "sp"})
    for (int64_t n : {2, 3, 4}) cases.push_back({p, DeviceMesh({n})});
  cases.push_back({"fsdp_tp", DeviceMesh({2, 2})});
  for (const Case& c : cases) {
    const sharding::ParallelPlan plan = sharding::ParallelPlan::load(kReference + "/" + m + "_" + c.plan + ".json");
    auto run = sharding::testing::run_sharded(im.graph, plan, c.mesh, im.weights, inputs, "default");
    DiffReport ds = compare(run.outputs[0], single[0], 1e-5, 1e-5);
    std::printf("%s: %s on %s vs one device max_abs_diff %.3g\n", m.c_str(), c.plan.c_str(), c.mesh.str().c_str(),
                ds.max_abs_diff);
    EXPECT_TRUE(ds.shapes_match && ds.mismatches == 0) << c.plan << " on " << c.mesh.str() << " max_abs_diff " << ds.max_abs_diff;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Reference, ::testing::Values("gpt", "llama"));

// ---- a realistic size ----

// Builds a one-layer llama-style ONNX model as torch.onnx.export writes it (decomposed RMSNorm and
// attention, MatMul by Transpose(weight)), hidden 512, 8 heads of 64, SwiGLU 1024, vocab 509 (no
// mesh divides it), batch 2 x sequence 8. Weights: normal(0, 0.05) from a fixed seed. Built here
// because the file would be ~12 MB; the module names are llama.onnx's, so its plans apply.
class ModelWriter {
 public:
  ModelWriter() : rng_(7) {
    m_.set_ir_version(8);
    auto* o = m_.add_opset_import();
    o->set_domain("");
    o->set_version(17);
    g_ = m_.mutable_graph();
    g_->set_name("llama512");
  }
  onnx::ModelProto& model() { return m_; }
  std::string init(const std::string& name, const Shape& shape, const std::vector<float>& values) {
    auto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : shape) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
    return name;
  }
  std::string randn(const std::string& name, const Shape& shape, float mean = 0) {
    std::normal_distribution<float> nd(mean, 0.05f);
    std::vector<float> v(size_t(numel(shape)));
    for (float& x : v) x = nd(rng_);
    return init(name, shape, v);
  }
  std::string scalar(float v) { return init("c" + std::to_string(next_++), {}, {v}); }
  std::string ints(const std::vector<int64_t>& v) {
    auto* t = g_->add_initializer();
    t->set_name("i" + std::to_string(next_++));
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(int64_t(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
    return t->name();
  }
  std::string op(const std::string& type, const std::vector<std::string>& in, const std::vector<int64_t>& perm = {},
                 const std::string& attr = "", int64_t attr_value = 0) {
    auto* n = g_->add_node();
    n->set_op_type(type);
    n->set_name("/" + type + "_" + std::to_string(next_));
    for (const auto& i : in) n->add_input(i);
    const std::string out = "v" + std::to_string(next_++);
    n->add_output(out);
    if (!perm.empty()) {
      auto* a = n->add_attribute();
      a->set_name(type == "ReduceMean" ? "axes" : "perm");
      a->set_type(onnx::AttributeProto::INTS);
      for (int64_t p : perm) a->add_ints(p);
    }
    if (!attr.empty()) {
      auto* a = n->add_attribute();
      a->set_name(attr);
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(attr_value);
    }
    return out;
  }
  // nn.Linear without bias: MatMul(x, Transpose(W)).
  std::string linear(const std::string& x, const std::string& w) { return op("MatMul", {x, op("Transpose", {w}, {1, 0})}); }
  // x * rsqrt(mean(x^2) + eps) * w in the three spellings exporters use.
  std::string rms(const std::string& x, const std::string& w, int form) {
    const std::string ms = op("Add", {op("ReduceMean", {op("Pow", {x, scalar(2)})}, {-1}, "keepdims", 1), scalar(1e-6f)});
    const std::string sq = op("Sqrt", {ms});
    const std::string y = form == 0   ? op("Mul", {x, op("Reciprocal", {sq})})
                          : form == 1 ? op("Mul", {op("Div", {scalar(1), sq}), x})
                                      : op("Div", {x, sq});
    return op("Mul", {y, w});
  }
  void io(const std::string& in, const std::string& out) {
    auto* i = g_->add_input();
    i->set_name(in);
    auto* tt = i->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::INT64);
    tt->mutable_shape()->add_dim()->set_dim_value(2);
    tt->mutable_shape()->add_dim()->set_dim_value(8);
    g_->add_output()->set_name(out);
  }

 private:
  onnx::ModelProto m_;
  onnx::GraphProto* g_;
  std::mt19937 rng_;
  int next_ = 0;
};

// `scale_divisor` 8 is 1/sqrt(D) (fused); another value must leave the attention unfused.
std::string llama512(float scale_divisor = 8) {
  constexpr int64_t B = 2, S = 8, H = 512, NH = 8, D = 64, F = 1024, V = 509;
  ModelWriter w;
  w.io("input_ids", "logits");
  std::string x = w.op("Gather", {w.randn("embed_tokens.weight", {V, H}), "input_ids"});
  const std::string p = "layers.0.";
  const std::string h = w.rms(x, w.randn(p + "input_layernorm.weight", {H}, 1), 0);
  auto heads = [&](const std::string& proj, const std::vector<int64_t>& perm) {
    return w.op("Transpose", {w.op("Reshape", {w.linear(h, w.randn(p + "self_attn." + proj + ".weight", {H, H})), w.ints({B, S, NH, D})})}, perm);
  };
  const std::string q = heads("q_proj", {0, 2, 1, 3}), kt = heads("k_proj", {0, 2, 3, 1}), v = heads("v_proj", {0, 2, 1, 3});
  std::vector<float> mask(size_t(S * S), 0.f);
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = i + 1; j < S; ++j) mask[size_t(i * S + j)] = -INFINITY;
  const std::string scores = w.op("Add", {w.op("Div", {w.op("MatMul", {q, kt}), w.scalar(scale_divisor)}), w.init("mask", {S, S}, mask)});
  std::string o = w.op("MatMul", {w.op("Softmax", {scores}, {}, "axis", -1), v});
  o = w.op("Reshape", {w.op("Transpose", {o}, {0, 2, 1, 3}), w.ints({B, S, H})});
  x = w.op("Add", {x, w.linear(o, w.randn(p + "self_attn.o_proj.weight", {H, H}))});
  const std::string h2 = w.rms(x, w.randn(p + "post_attention_layernorm.weight", {H}, 1), 1);
  const std::string g = w.linear(h2, w.randn(p + "gate_proj.weight", {F, H}));
  const std::string act = w.op("Mul", {w.op("Mul", {g, w.op("Sigmoid", {g})}), w.linear(h2, w.randn(p + "up_proj.weight", {F, H}))});
  x = w.op("Add", {x, w.linear(act, w.randn(p + "down_proj.weight", {H, F}))});
  const std::string logits = w.linear(w.rms(x, w.randn("norm.weight", {H}, 1), 2), w.randn("lm_head.weight", {V, H}));
  auto* last = w.model().mutable_graph()->mutable_node(w.model().graph().node_size() - 1);
  for (auto& out : *w.model().mutable_graph()->mutable_node())
    for (auto& i : *out.mutable_input())
      if (i == logits) i = "logits";
  last->set_output(0, "logits");
  return w.model().SerializeAsString();
}

TEST(OnnxImportRealistic, Hidden512FusesAndShardsOnMeshesHeadsAndVocabDoNotDivide) {
  const std::string bytes = llama512();
  OnnxImportResult im = import_onnx_bytes(bytes, "llama512.onnx");
  EXPECT_EQ(sharding::testing::count_ops(im.graph, ir::OpKind::scaled_dot_product_attention), 1);
  EXPECT_EQ(sharding::testing::count_ops(im.graph, ir::OpKind::rms_norm), 3);  // all three spellings
  EXPECT_EQ(sharding::testing::count_ops(im.graph, ir::OpKind::matmul), 0);
  EXPECT_EQ(sharding::testing::count_ops(im.graph, ir::OpKind::linear), 8);
  // SwiGLU's gate g * sigmoid(g) is one silu, run as the gate projection's epilogue.
  EXPECT_EQ(sharding::testing::count_ops(im.graph, ir::OpKind::silu), 1);
  EXPECT_EQ(sharding::testing::count_ops(im.graph, ir::OpKind::sigmoid), 0);
  // ... and its product with the up projection runs as that projection's epilogue (linear+mul), as
  // do the residual adds after o_proj and down_proj (linear+add).
  EXPECT_EQ(runtime::find_epilogue_fusions(im.graph).size(), 4u);
  std::mt19937 rng(3);
  std::vector<int64_t> ids(16);
  for (auto& i : ids) i = int64_t(rng() % 509);
  const TensorMap inputs = {{"input_ids", Tensor::from_vector<int64_t>(ids, {2, 8})}};
  std::vector<Tensor> single = sharding::testing::run_single(im.graph, im.weights, inputs);
  ASSERT_EQ(single[0].shape(), (Shape{2, 8, 509}));
  // The fused graph computes what the exported ops compute.
  OnnxImportOptions unfused;
  unfused.fuse = false;
  OnnxImportResult raw = import_onnx_bytes(bytes, "llama512.onnx", unfused);
  DiffReport d = compare(single[0], sharding::testing::run_single(raw.graph, raw.weights, inputs)[0], 1e-5, 1e-5);
  std::printf("llama512: fused vs as exported max_abs_diff %.3g\n", d.max_abs_diff);
  EXPECT_TRUE(d.mismatches == 0 && d.shapes_match) << d.max_abs_diff;
  // 8 heads on 3 and 4 ranks, vocab 509 on either.
  for (const char* p : {"tp", "sp"})
    for (int64_t n : {3, 4}) {
      const sharding::ParallelPlan plan = sharding::ParallelPlan::load(kReference + "/llama_" + p + ".json");
      auto run = sharding::testing::run_sharded(im.graph, plan, DeviceMesh({n}), im.weights, inputs, "default");
      DiffReport ds = compare(run.outputs[0], single[0], 1e-5, 1e-5);
      std::printf("llama512: %s on %lld vs one device max_abs_diff %.3g\n", p, (long long)n, ds.max_abs_diff);
      EXPECT_TRUE(ds.shapes_match && ds.mismatches == 0) << p << " mesh " << n << " max_abs_diff " << ds.max_abs_diff;
    }
  // Attention scaled by other than 1/sqrt(D) fuses with that `scale`, and computes what the
  // exported ops compute.
  const std::string scaled = llama512(7);
  OnnxImportResult other = import_onnx_bytes(scaled, "llama512.onnx");
  EXPECT_EQ(sharding::testing::count_ops(other.graph, ir::OpKind::scaled_dot_product_attention), 1);
  EXPECT_EQ(sharding::testing::count_ops(other.graph, ir::OpKind::matmul), 0);
  EXPECT_EQ(sharding::testing::count_ops(other.graph, ir::OpKind::rms_norm), 3);
  for (const ir::Node* n : other.graph.nodes())
    if (n->op == ir::OpKind::scaled_dot_product_attention) {
      EXPECT_FLOAT_EQ(float(n->attr_float("scale")), 1.f / 7);
    }
  OnnxImportResult other_raw = import_onnx_bytes(scaled, "llama512.onnx", unfused);
  DiffReport dsc = compare(sharding::testing::run_single(other.graph, other.weights, inputs)[0],
                           sharding::testing::run_single(other_raw.graph, other_raw.weights, inputs)[0], 1e-5, 1e-5);
  EXPECT_TRUE(dsc.shapes_match && dsc.mismatches == 0) << "scale 1/7 max_abs_diff " << dsc.max_abs_diff;
}

// Hugging Face's gelu_new as PyTorch exports it, on a linear's result h scaled to O(1)
// (x = 40·h): 0.5·x·(1 + tanh(sqrt(2/pi)·(x + k·x³))). `swapped` writes every Mul and Add the
// other way round; a k other than 0.044715, or a tanh that is also a graph output, must leave
// the ops as exported.
std::string gelu_new_model(bool swapped, float k = 0.044715f, bool tanh_output = false) {
  ModelWriter w;
  w.io("input_ids", "y");
  auto op2 = [&](const std::string& type, const std::string& a, const std::string& b) {
    return swapped ? w.op(type, {b, a}) : w.op(type, {a, b});
  };
  const std::string e = w.op("Gather", {w.randn("embed.weight", {61, 32}), "input_ids"});
  const std::string x = op2("Mul", w.linear(e, w.randn("fc.weight", {64, 32})), w.scalar(40));
  const std::string inner = op2("Mul", op2("Add", x, op2("Mul", w.op("Pow", {x, w.scalar(3)}), w.scalar(k))),
                                w.scalar(0.7978845608f));
  const std::string t = w.op("Tanh", {inner});
  const std::string y = op2("Mul", op2("Mul", x, w.scalar(0.5f)), op2("Add", t, w.scalar(1)));
  auto* g = w.model().mutable_graph();
  g->mutable_node(g->node_size() - 1)->set_output(0, "y");
  if (tanh_output) g->add_output()->set_name(t);
  return w.model().SerializeAsString();
}

TEST(OnnxImportFusion, GeluNewBecomesOneTanhGeluThatComputesTheExportedOps) {
  const TensorMap inputs = {{"input_ids", Tensor::from_vector<int64_t>({0, 5, 9, 60, 3, 3, 17, 42, 1, 2, 8, 13, 21, 34, 55, 59}, {2, 8})}};
  OnnxImportOptions unfused;
  unfused.fuse = false;
  struct Case { bool swapped; float k; bool tanh_output; int fused; };
  for (const Case c : {Case{false, 0.044715f, false, 1}, Case{true, 0.044715f, false, 1},
                       Case{false, 0.05f, false, 0}, Case{false, 0.044715f, true, 0}}) {
    const std::string bytes = gelu_new_model(c.swapped, c.k, c.tanh_output);
    OnnxImportResult im = import_onnx_bytes(bytes, "gelu_new.onnx");
    EXPECT_EQ(im.summary.fused.activation, c.fused) << c.swapped << " " << c.k << " " << c.tanh_output;
    EXPECT_EQ(sharding::testing::count_ops(im.graph, ir::OpKind::gelu), c.fused);
    EXPECT_EQ(sharding::testing::count_ops(im.graph, ir::OpKind::tanh), 1 - c.fused);
    for (const ir::Node* n : im.graph.nodes())
      if (n->op == ir::OpKind::gelu) {
        EXPECT_EQ(n->attr_str("approximate"), "tanh");
      }
    OnnxImportResult raw = import_onnx_bytes(bytes, "gelu_new.onnx", unfused);
    const Tensor fused = sharding::testing::run_single(im.graph, im.weights, inputs)[0];
    const Tensor ref = sharding::testing::run_single(raw.graph, raw.weights, inputs)[0];
    double largest = 0;
    for (double v : ref.to_doubles()) largest = std::max(largest, std::fabs(v));
    EXPECT_GT(largest, 1.0);  // the tanh's range, not only its linear part
    const DiffReport d = compare(fused, ref, 1e-6, 1e-6);
    EXPECT_TRUE(d.shapes_match && d.mismatches == 0) << "max_abs_diff " << d.max_abs_diff;
  }
}

// ---- errors ----

// A one-node model: y = op(x), x f32 [2, 3] (dim 1 dynamic when asked).
onnx::ModelProto tiny(const std::string& op, int64_t opset = 17, int64_t ir_version = 8, bool dynamic = false) {
  onnx::ModelProto m;
  m.set_ir_version(ir_version);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  auto* g = m.mutable_graph();
  g->set_name("tiny");
  auto* in = g->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_value(2);
  if (dynamic) tt->mutable_shape()->add_dim()->set_dim_param("seq");
  else tt->mutable_shape()->add_dim()->set_dim_value(3);
  auto* n = g->add_node();
  n->set_name("n0");
  n->set_op_type(op);
  n->add_input("x");
  n->add_output("y");
  g->add_output()->set_name("y");
  return m;
}

TEST(OnnxImportErrors, EachIsClearAndNamesTheNode) {
  const std::string ok = tiny("Relu").SerializeAsString();
  OnnxImportResult r = import_onnx_bytes(ok, "tiny.onnx");
  EXPECT_EQ(r.graph.outputs()[0]->type.shape, (Shape{2, 3}));

  expect_error<IoError>([&] { import_onnx_bytes(read(kReference + "/gpt.onnx").substr(0, 1000), "cut.onnx"); },
                        {"cut.onnx", "not a valid ONNX model"});
  expect_error<ValueError>([] { import_onnx_bytes(tiny("Bogus").SerializeAsString(), "m"); },
                           {"node 'n0'", "Bogus", "output 'y'", "not supported"});
  expect_error<ValueError>([] { import_onnx_bytes(tiny("Relu", 9).SerializeAsString(), "m"); }, {"opset 9", "11 to 17"});
  expect_error<ValueError>([] { import_onnx_bytes(tiny("Relu", 17, 99).SerializeAsString(), "m"); }, {"IR version 99"});
  const std::string dyn = tiny("Relu", 17, 8, true).SerializeAsString();
  expect_error<ValueError>([&] { import_onnx_bytes(dyn, "m"); }, {"'x' dim 1 is dynamic", "seq", "--input-shape x="});
  OnnxImportOptions opt;
  opt.input_shapes["x"] = {2, 5};
  EXPECT_EQ(import_onnx_bytes(dyn, "m", opt).graph.outputs()[0]->type.shape, (Shape{2, 5}));
  opt.input_shapes["x"] = {4, 5};
  expect_error<ValueError>([&] { import_onnx_bytes(dyn, "m", opt); }, {"dim 0 is fixed to 2"});
  opt.input_shapes = {{"z", {2, 5}}};
  expect_error<ValueError>([&] { import_onnx_bytes(dyn, "m", opt); }, {"'z'", "not a graph input", "inputs: x"});
  // A computed value where the importer needs a constant.
  onnx::ModelProto rs = tiny("Reshape");
  rs.mutable_graph()->mutable_node(0)->add_input("x");
  expect_error<ValueError>([&] { import_onnx_bytes(rs.SerializeAsString(), "m"); }, {"node 'n0' (Reshape", "must be known at import"});

  EXPECT_EQ(parse_input_shape("input_ids=2x32").second, (Shape{2, 32}));
  EXPECT_EQ(parse_input_shape("s=").second, Shape{});
  for (const char* bad : {"input_ids", "=2x3", "x=2x", "x=2xa", "x=-1x3", "x=2*3"})
    expect_error<ValueError>([&] { parse_input_shape(bad); }, {"--input-shape"});
  EXPECT_EQ(parse_input_dtype("ids=i32").second, DType::i32);
  expect_error<ValueError>([] { parse_input_dtype("ids=int3"); }, {"int3"});
}

// The position-indexed ops arrive as IR ops (their numbers are checked by the conformance
// command): Gather with runtime indices on axis 1 is `gather`, CumSum needs its axis at import.
TEST(OnnxImportIndexOps, GatherRuntimeIndicesCumSumAxisAndOldLogicalOpsets) {
  onnx::ModelProto m = tiny("Gather");
  auto* ids = m.mutable_graph()->add_input();
  ids->set_name("ids");
  auto* it = ids->mutable_type()->mutable_tensor_type();
  it->set_elem_type(onnx::TensorProto::INT64);
  it->mutable_shape()->add_dim()->set_dim_value(4);
  auto* n = m.mutable_graph()->mutable_node(0);
  n->add_input("ids");
  auto* axis = n->add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(-1);
  OnnxImportResult r = import_onnx_bytes(m.SerializeAsString(), "g.onnx");
  EXPECT_EQ(r.graph.outputs()[0]->type.shape, (Shape{2, 4}));
  bool has_gather = false;
  for (const auto& node : r.graph.nodes()) has_gather |= node->op == ir::OpKind::gather;
  EXPECT_TRUE(has_gather);

  n->set_op_type("CumSum");  // its axis input is now the runtime ids
  expect_error<ValueError>([&] { import_onnx_bytes(m.SerializeAsString(), "m"); }, {"node 'n0' (CumSum", "must be known at import"});
  // Opset 7 is read for the logical ops (unchanged since), not for others.
  expect_error<ValueError>([] { import_onnx_bytes(tiny("Relu", 7).SerializeAsString(), "m"); }, {"opset 7", "11 to 17"});
  try {
    import_onnx_bytes(tiny("Not", 7).SerializeAsString(), "m");  // f32 x: refused for its dtype, not its opset
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("opset"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bool"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dt::io
