// Loads a model (IR file) and binds its parameters and data inputs from safetensors files: the
// single-device part of `run` and `profile`. Also the one declaration of the model / weights /
// inputs option block that every command taking a model file shares (run, train, profile,
// compile, shard-weights, import).
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

// How a command declares the block: the data flag's name and help, which flags it has (a null
// help or flag leaves that flag out: compile reads only MODEL) and whether the flags it has are
// required (train needs both; run binds only what the model declares).
struct ModelOptionSpec {
  const char* model_help = "IR file (.dt)";
  const char* weights_help = "safetensors file with every parameter of the model";
  const char* inputs_flag = "--inputs";
  const char* inputs_help = "safetensors file with the data inputs, by name (extra tensors ignored)";
  bool required = false;
};

// Adds MODEL and, as `spec` asks, --weights and the data flag to `cmd`, stored in `files`.
void add_model_options(CLI::App* cmd, ModelFiles& files, const ModelOptionSpec& spec = {});

struct LoadedProgram {
  ir::Graph graph;
  runtime::Bindings bindings;  // parameters and data inputs by name
};

// Throws ValueError naming the missing flag when `graph` (read from files.model) has parameters
// but no --weights was given, or data inputs but no --inputs: the one check of `run` on one device
// and sharded.
void require_model_files(const ir::Graph& graph, const ModelFiles& files);

// Parses and verifies `model` and binds parameters from `weights` and data inputs from `inputs`
// (either may be empty when the model has none; ValueError naming the missing flag otherwise).
LoadedProgram load_program(const std::string& model, const std::string& weights, const std::string& inputs);
inline LoadedProgram load_program(const ModelFiles& f) { return load_program(f.model, f.weights, f.inputs); }

}  // namespace dt::tools
