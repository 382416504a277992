// Loads a model (IR file) and binds its parameters and data inputs from safetensors files: the
// single-device part of `run` and `profile`.
#pragma once

#include <string>

#include "dtensor/ir/graph.h"
#include "dtensor/runtime/interpreter.h"

namespace dt::tools {

struct LoadedProgram {
  ir::Graph graph;
  runtime::Bindings bindings;  // parameters and data inputs by name
};

// Parses and verifies `model` and binds parameters from `weights` and data inputs from `inputs`
// (either may be empty when the model has none; ValueError naming the missing flag otherwise).
LoadedProgram load_program(const std::string& model, const std::string& weights, const std::string& inputs);

}  // namespace dt::tools
