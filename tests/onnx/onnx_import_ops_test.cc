// The converters of Conv, Einsum, TopK and ScatterND (issue 27.5) against PyTorch 1.13's one-op
// exports (tests/reference/onnx/ops, scripts/make_onnx_op_reference.py): each imports with its
// inputs' shapes, runs on one device and matches PyTorch's outputs (indices exactly); for the
// convolutions, the gradients of sum(y * r) with respect to x, the weight and the bias (autodiff
// through the IR's conv gradient rule) match PyTorch's, and so do the gradients through two
// ScatterNDs of a Hugging Face style write into an activation. Einsum lowers to matmul, permute,
// reshape and sum only.
#include <gtest/gtest.h>

#include <functional>

#include "dtensor/autodiff/autodiff.h"
#include "dtensor/ir/builder.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/io/onnx_import.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/runtime/launcher.h"
#include "tests/sharding/sharded_run.h"

namespace dt::io {
namespace {

const std::string kOps = std::string(DTENSOR_REFERENCE_DIR) + "/onnx/ops/";

struct Imported {
  TensorMap io;
  OnnxImportResult im;
  runtime::Bindings bindings;
};

Imported import_case(const std::string& name) {
  TensorMap io = read_safetensors(kOps + name + "_io.safetensors");
  OnnxImportOptions opt;
  for (const auto& [k, t] : io)
    if (!k.starts_with("output") && !k.starts_with("grad.") && k != "r") opt.input_shapes[k] = t.shape();
  OnnxImportResult im = import_onnx(kOps + name + ".onnx", opt);
  runtime::Bindings b;
  for (const ir::Value* p : im.graph.params()) b[p->name] = im.weights.at(p->name);
  for (const ir::Value* v : im.graph.inputs()) b[v->name] = io.at(v->name);
  return {std::move(io), std::move(im), std::move(b)};
}

void expect_near(const Tensor& got, const Tensor& want, const std::string& what, double tol = 1e-5) {
  const DiffReport d = compare(got, want, tol, tol);
  EXPECT_TRUE(d.shapes_match && d.mismatches == 0) << what << ": max_abs_diff " << d.max_abs_diff << " ("
                                                    << got.str() << " vs " << want.str() << ")";
}

class OpReference : public ::testing::TestWithParam<std::string> {};

TEST_P(OpReference, MatchesPyTorch) {
  const std::string name = GetParam();
  Imported c = import_case(name);
  const std::vector<Tensor> out = runtime::launch({&c.im.graph}, {c.bindings})[0].outputs;
  ASSERT_GE(out.size(), 1u);
  for (size_t k = 0; k < out.size(); ++k) {
    const Tensor& want = c.io.at("output" + std::to_string(k));
    EXPECT_EQ(out[k].dtype(), want.dtype()) << name << " output " << k;
    expect_near(out[k], want, name + " output " + std::to_string(k));
  }
  if (name.starts_with("einsum")) {
    for (const auto& n : c.im.graph.nodes()) {
      const ir::OpKind k = n->op;
      EXPECT_TRUE(k == ir::OpKind::matmul || k == ir::OpKind::permute || k == ir::OpKind::reshape || k == ir::OpKind::sum)
          << name << " lowered to " << ir::op_name(k);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, OpReference,
                         ::testing::Values("conv1d", "conv1d_nobias", "conv2d", "conv2d_depthwise", "conv2d_patch",
                                           "einsum_bmm", "einsum_heads", "einsum_linear", "einsum_transpose",
                                           "einsum_outer", "einsum_rowdot", "einsum_sum", "einsum_matvec",
                                           "einsum_permute3", "topk_largest", "topk_smallest_dim0", "topk_3d",
                                           "scatternd_kv_cache", "scatternd_rows", "scatternd_gradient"),
                         [](const auto& info) { return info.param; });

// Autodiff of sum(y * r) through the imported graph with respect to the floating inputs and the
// parameters, against PyTorch's gradients `key(name)` in the case's io file (inputs without one are
// skipped); returns how many gradients it compared.
size_t expect_gradients_match(const std::string& name, const std::function<std::string(const std::string&)>& key) {
  Imported c = import_case(name);
  ir::Graph& g = c.im.graph;
  EXPECT_EQ(g.outputs().size(), 1u);
  ir::Value* y = g.outputs()[0];
  std::vector<ir::Value*> wrt;
  std::vector<std::string> names;
  for (ir::Value* v : g.inputs())
    if (c.io.count("grad." + v->name)) wrt.push_back(v), names.push_back("grad." + v->name);
  for (ir::Value* p : g.params()) wrt.push_back(p), names.push_back(key(p->name));
  ir::Builder b(g);
  ir::Value* r = b.input("r", y->type.dtype, y->type.shape);
  ir::Value* loss = b.sum(b.mul(y, r));
  const std::vector<ir::Value*> grads = autodiff::append_gradients(g, loss, wrt);
  for (size_t k = 0; k < grads.size(); ++k)
    if (!grads[k]) {
      ADD_FAILURE() << name << ": no gradient for " << names[k];
      return 0;
    }
  g.set_outputs(grads);
  c.bindings["r"] = c.io.at("r");
  const std::vector<Tensor> out = runtime::launch({&g}, {c.bindings})[0].outputs;
  EXPECT_EQ(out.size(), names.size());
  for (size_t k = 0; k < out.size() && k < names.size(); ++k) {
    // A MatMul's [in, out] weight is imported as linear's [out, in] (docs/import.md).
    const Tensor& want = c.io.at(names[k]);
    const bool transposed = out[k].dim() == 2 && want.dim() == 2 && out[k].shape() != want.shape();
    expect_near(transposed ? out[k].transpose(0, 1).contiguous() : out[k], want, name + " " + names[k], 1e-4);
  }
  return out.size();
}

class ConvGradient : public ::testing::TestWithParam<std::string> {};

TEST_P(ConvGradient, MatchesPyTorch) {
  expect_gradients_match(GetParam(), [](const std::string& p) { return p.ends_with("bias") ? "grad.bias" : "grad.weight"; });
}

INSTANTIATE_TEST_SUITE_P(Ops, ConvGradient,
                         ::testing::Values("conv1d", "conv1d_nobias", "conv2d", "conv2d_depthwise", "conv2d_patch"),
                         [](const auto& info) { return info.param; });

// `h[:, idx] = v @ w` then `h[b, s] = c` between parameter projections (the second write
// overwriting some of the first's positions), exported as two ScatterNDs: the gradients of the
// parameters and of x, v, c (the written positions get none from below, the updates theirs).
TEST(ScatterNdGradient, MatchesPyTorch) {
  Imported c = import_case("scatternd_gradient");
  int scatters = 0;
  for (const auto& n : c.im.graph.nodes()) scatters += n->op == ir::OpKind::scatter_nd;
  EXPECT_EQ(scatters, 2);
  // x, v, c and the four parameters
  EXPECT_EQ(expect_gradients_match("scatternd_gradient", [](const std::string& p) { return "grad." + p; }), 7u);
}

}  // namespace
}  // namespace dt::io
