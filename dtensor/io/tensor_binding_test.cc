#include "dtensor/io/tensor_binding.h"

#include <gtest/gtest.h>

#include "dtensor/core/error.h"
#include "dtensor/ir/example_models.h"

namespace dt::io {
namespace {

std::string bind_error(const ir::Graph& g, const TensorMap& weights) {
  try {
    bind_params(g, SafetensorsFile::from_bytes(safetensors_bytes(weights), "w.safetensors"));
  } catch (const Error& e) {  // IoError for missing or extra tensors, ShapeError / DTypeError for mismatches
    return e.what();
  }
  return "no error";
}

TEST(TensorBinding, BindsEveryParameterByName) {
  ir::Graph g = ir::build_mlp({.hidden = 4, .layers = 1, .batch = 2});
  auto w = ir::random_weights(g, 0);
  TensorMap m(w.begin(), w.end());
  TensorMap bound = bind_params(g, SafetensorsFile::from_bytes(safetensors_bytes(m), "w.safetensors"));
  EXPECT_EQ(bound.size(), 6u);
  EXPECT_EQ(bound.at("layers.0.fc1.weight").to_doubles(), m.at("layers.0.fc1.weight").to_doubles());
}

TEST(TensorBinding, RefusesMissingExtraAndMismatchedTensors) {
  ir::Graph g = ir::build_mlp({.hidden = 4, .layers = 1, .batch = 2});
  auto w = ir::random_weights(g, 0);
  TensorMap m(w.begin(), w.end());
  TensorMap missing = m;
  missing.erase("layers.0.fc2.bias");
  EXPECT_EQ(bind_error(g, missing), "missing parameter layers.0.fc2.bias in w.safetensors");
  TensorMap extra = m;
  extra["layers.9.fc1.weight"] = Tensor::zeros({1});
  EXPECT_EQ(bind_error(g, extra), "unexpected tensor layers.9.fc1.weight in w.safetensors (not a parameter of graph mlp)");
  TensorMap shape = m;
  shape["layers.0.fc1.weight"] = Tensor::zeros({16, 3});
  EXPECT_EQ(bind_error(g, shape),
            "tensor layers.0.fc1.weight in w.safetensors has shape [16, 3] but the graph expects f32[16, 4]");
  TensorMap dtype = m;
  dtype["layers.0.ln.bias"] = Tensor::zeros({4}, DType::f64);
  EXPECT_EQ(bind_error(g, dtype), "tensor layers.0.ln.bias in w.safetensors has dtype f64 but the graph expects f32[4]");
}

TEST(TensorBinding, InputsIgnoreExtraTensors) {
  ir::Graph g = ir::build_mlp({.hidden = 4, .layers = 1, .batch = 2});
  TensorMap in{{"input", Tensor::ones({2, 4})}, {"target", Tensor::ones({2, 4})}};
  EXPECT_EQ(bind_inputs(g, SafetensorsFile::from_bytes(safetensors_bytes(in), "in")).size(), 1u);
  TensorMap none{{"target", Tensor::ones({2, 4})}};
  EXPECT_THROW(bind_inputs(g, SafetensorsFile::from_bytes(safetensors_bytes(none), "in")), IoError);
}

}  // namespace
}  // namespace dt::io
