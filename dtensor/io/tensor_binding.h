// Binds the graph inputs of a program to tensors from safetensors files, checking each against
// its declared type: parameters by their fully qualified names (the weights file must hold
// exactly the graph's parameters), data inputs by name (extra tensors, like a reference file's
// `target`, are ignored). Problems throw dt::IoError naming the tensor and the file.
#pragma once

#include "dtensor/io/safetensors.h"
#include "dtensor/ir/graph.h"

namespace dt::io {

// Returns name -> tensor for every parameter of `graph`.
TensorMap bind_params(const ir::Graph& graph, const SafetensorsFile& weights);
// Returns name -> tensor for every data input of `graph`.
TensorMap bind_inputs(const ir::Graph& graph, const SafetensorsFile& inputs);
// Throws DTypeError / ShapeError unless `t` has the dtype and shape of `v` (`what` names its source).
void check_binding(const ir::Value& v, const Tensor& t, const std::string& what);

}  // namespace dt::io
