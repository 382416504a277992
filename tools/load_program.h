// Loads a model (IR file) and binds its parameters and data inputs from safetensors files: the
// single-device part of `run` and `profile`. Also the one declaration of the model / weights /
// inputs option block that run and train (and any other command taking a model) share.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "dtensor/ir/graph.h"
#include "dtensor/runtime/interpreter.h"

namespace dt::tools {

// The files a command reads a model from: positional MODEL, --weights, and the data inputs
// (--inputs for run, --data for train).
struct ModelFiles {
  std::string model, weights, inputs;
};

// How a command declares the block: the data flag's name and help, and whether weights and data
// are required (train needs both; run binds only what the model declares).
struct ModelOptionSpec {
  const char* model_help = "IR file (.dt)";
  const char* weights_help = "safetensors file with every parameter of the model";
  const char* inputs_flag = "--inputs";
  const char* inputs_help = "safetensors file with the data inputs, by name (extra tensors ignored)";
  bool required = false;
};

// Adds MODEL, --weights and the data flag to `cmd`, stored in `files`.
void add_model_options(CLI::App* cmd, ModelFiles& files, const ModelOptionSpec& spec = {});

struct LoadedProgram {
  ir::Graph graph;
  runtime::Bindings bindings;  // parameters and data inputs by name
};

// Parses and verifies `model` and binds parameters from `weights` and data inputs from `inputs`
// (either may be empty when the model has none; ValueError naming the missing flag otherwise).
LoadedProgram load_program(const std::string& model, const std::string& weights, const std::string& inputs);
inline LoadedProgram load_program(const ModelFiles& f) { return load_program(f.model, f.weights, f.inputs); }

}  // namespace dt::tools
