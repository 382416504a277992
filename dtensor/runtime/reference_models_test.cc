// The example models, run by the interpreter on PyTorch's weights and inputs, match PyTorch's
// outputs (../shared/reference, computed by PyTorch 2.11 in float32) within 1e-5 relative, and
// the loss outputs match config.json's `loss`.
//
// "Relative" is measured against the output's scale: every element satisfies
// |ours - torch| <= 1e-5 + 1e-5·|torch| (allclose with rtol = atol = 1e-5; logits near zero make a
// purely elementwise relative error meaningless in float32), and the largest difference is at
// most 1e-5 of the largest |torch| value.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dtensor/autodiff/autodiff.h"
#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/io/tensor_binding.h"
#include "dtensor/ir/builder.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/ir/parser.h"
#include "dtensor/ir/printer.h"
#include "dtensor/runtime/interpreter.h"

namespace dt::runtime {
namespace {

const std::string kRef = DTENSOR_REFERENCE_DIR;

struct Outcome {
  DiffReport diff;
  double loss = 0;
  double expected_loss = 0;
  double max_abs_expected = 0;
};

// Runs `graph` (with a loss output) on the reference files of `model` on a 1-rank world.
Outcome run_reference(const ir::Graph& built, const std::string& model) {
  // Go through the text form, as the CLI does.
  ir::Graph graph = ir::parse(ir::print(built), model + ".dt");
  const std::string dir = kRef + "/" + model;
  io::SafetensorsFile weights = io::SafetensorsFile::open(dir + "/weights.safetensors");
  io::SafetensorsFile inputs = io::SafetensorsFile::open(dir + "/inputs.safetensors");
  Bindings b = io::bind_params(graph, weights);
  for (auto& [k, v] : io::bind_inputs(graph, inputs)) b[k] = v;
  std::vector<Tensor> out;
  run_ranks(1, [&](ProcessGroup& world) {
    Interpreter interp(graph);
    out = interp.run(b, make_groups(graph, world));
  });
  Tensor expected = io::SafetensorsFile::open(dir + "/outputs.safetensors").get("output");
  std::ifstream cfg(dir + "/config.json");
  nlohmann::json config = nlohmann::json::parse(cfg);
  Outcome o;
  o.diff = compare(out[0], expected, /*rtol=*/1e-5, /*atol=*/1e-5);
  o.loss = out[1].item();
  o.expected_loss = config["loss"].get<double>();
  for (double v : expected.to_doubles()) o.max_abs_expected = std::max(o.max_abs_expected, std::abs(v));
  return o;
}

// Runs `graph` on reference folder `model` and checks output and loss against PyTorch's.
void expect_matches_pytorch(const ir::Graph& graph, const char* model) {
  ASSERT_TRUE(std::filesystem::exists(kRef + "/" + model)) << "reference folder absent: " << kRef;
  Outcome o = run_reference(graph, model);
  EXPECT_TRUE(o.diff.shapes_match);
  std::printf("%s: max_abs_diff %.3g, max |torch| %.3g, loss %.9g vs torch %.9g\n", model, o.diff.max_abs_diff,
              o.max_abs_expected, o.loss, o.expected_loss);
  EXPECT_EQ(o.diff.mismatches, 0) << "max_abs_diff " << o.diff.max_abs_diff << " max_rel_diff " << o.diff.max_rel_diff;
  EXPECT_LE(o.diff.max_abs_diff, 1e-5 * o.max_abs_expected);
  EXPECT_NEAR(o.loss, o.expected_loss, 1e-5 * std::abs(o.expected_loss));
}

// scaled_dot_product_attention with grouped-query k/v, a scale and bool/float masks (with and
// without causal) against torch 2.x's reference written in torch 1.13 ops
// (scripts/make_attention_reference.py): the output and, through autodiff, dq, dk, dv and the
// float mask's gradient, all in f64.
TEST(ReferenceModels, AttentionMatchesPyTorch) {
  std::ifstream meta_file(kRef + "/attention/cases.json");
  ASSERT_TRUE(meta_file) << kRef << "/attention/cases.json";
  const nlohmann::json meta = nlohmann::json::parse(meta_file);
  ASSERT_EQ(meta.size(), 4u);
  for (const auto& [name, attrs] : meta.items()) {
    SCOPED_TRACE(name);
    const io::TensorMap ref = io::read_safetensors(kRef + "/attention/" + name + ".safetensors");
    const bool has_mask = ref.count("mask") > 0, float_mask = has_mask && ref.at("mask").dtype() == DType::f64;
    ir::Graph g(name);
    ir::Builder b(g);
    auto param = [&](const std::string& n) { return b.param(n, DType::f64, ref.at(n).shape()); };
    ir::Value* q = param("q");
    ir::Value* k = param("k");
    ir::Value* v = param("v");
    ir::Value* mask = !has_mask ? nullptr : float_mask ? param("mask") : b.input("mask", DType::boolean, ref.at("mask").shape());
    ir::Value* out = b.scaled_dot_product_attention(q, k, v, attrs["causal"].get<bool>(), mask, attrs["scale"].get<double>());
    ir::Value* loss = b.sum(b.mul(out, b.input("dout", DType::f64, ref.at("dout").shape())));
    std::vector<ir::Value*> params(g.params().begin(), g.params().end());
    std::vector<ir::Value*> grads = autodiff::append_gradients(g, loss, params);
    std::vector<ir::Value*> outputs = {out};
    outputs.insert(outputs.end(), grads.begin(), grads.end());
    b.outputs(outputs);
    Bindings bind;
    for (const char* n : {"q", "k", "v", "mask", "dout"})
      if (ref.count(n)) bind[n] = ref.at(n);
    const std::vector<Tensor> got = Interpreter(g).run(bind);
    std::vector<std::string> want = {"out"};
    for (ir::Value* p : params) want.push_back("d" + p->name);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const DiffReport d = compare(got[i], ref.at(want[i]), 1e-9, 1e-11);
      EXPECT_TRUE(d.shapes_match && d.mismatches == 0) << want[i] << " max_abs_diff " << d.max_abs_diff;
    }
  }
}

// bf16 linear, linear + gelu (the fused epilogue and the two ops; torch's gelu in f32 rounded once) and mm against PyTorch 1.13's
// bf16 results on CPU (scripts/make_bf16_matmul_reference.py), within torch.testing's bf16
// tolerance (rtol 1.6e-2, atol 1e-5); and the results land within one bf16 rounding (2^-8
// relative) of the exact products of the same bf16 values, plus 1e-4 absolute for the f32 sums'
// rounding near zero (300 terms of |x·w| up to ~1: 300 · 2^-24 · a few).
TEST(ReferenceModels, Bf16MatmulsMatchPyTorch) {
  const io::TensorMap ref = io::read_safetensors(kRef + "/bf16_matmul.safetensors");
  const Tensor &x = ref.at("x"), &w = ref.at("w"), &b = ref.at("b"), &m = ref.at("m");
  ASSERT_EQ(x.dtype(), DType::bf16);
  const std::vector<std::pair<std::string, Tensor>> cases = {
      {"linear", linear(x, w, b)},
      {"linear_gelu", linear_act(x, w, b, Activation::gelu_tanh)},
      {"linear_gelu", gelu(linear(x, w, b), "tanh")},
      {"mm", mm(x, m)}};
  for (const auto& [name, got] : cases) {
    SCOPED_TRACE(name);
    ASSERT_EQ(got.dtype(), DType::bf16);
    const DiffReport d = compare(got, ref.at(name), 1.6e-2, 1e-5);
    EXPECT_TRUE(d.shapes_match && d.mismatches == 0) << "max_abs_diff " << d.max_abs_diff;
  }
  for (const auto& [got, exact] : {std::pair{linear(x, w, b), ref.at("linear_f64")}, {mm(x, m), ref.at("mm_f64")}}) {
    const DiffReport d = compare(got.to(DType::f64), exact, 1.0 / 256, 1e-4);
    EXPECT_TRUE(d.shapes_match && d.mismatches == 0) << d.mismatches << " mismatches, max_abs_diff " << d.max_abs_diff;
  }
}

TEST(ReferenceModels, MlpMatchesPyTorch) { expect_matches_pytorch(ir::build_mlp({.loss = true}), "mlp"); }

TEST(ReferenceModels, GptMatchesPyTorch) { expect_matches_pytorch(ir::build_gpt({.loss = true}), "gpt"); }

}  // namespace
}  // namespace dt::runtime
