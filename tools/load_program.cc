#include "tools/load_program.h"

#include "dtensor/core/error.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/io/tensor_binding.h"
#include "dtensor/ir/parser.h"

namespace dt::tools {

void add_model_options(CLI::App* cmd, ModelFiles& files, const ModelOptionSpec& spec) {
  cmd->add_option("model", files.model, spec.model_help)->required();
  if (spec.weights_help) cmd->add_option("--weights", files.weights, spec.weights_help)->required(spec.required);
  if (spec.inputs_flag) cmd->add_option(spec.inputs_flag, files.inputs, spec.inputs_help)->required(spec.required);
}

void require_model_files(const ir::Graph& graph, const ModelFiles& files) {
  if (!graph.params().empty() && files.weights.empty())
    DT_THROW(ValueError) << "model " << files.model << " has " << graph.params().size() << " parameters: pass --weights";
  if (!graph.inputs().empty() && files.inputs.empty())
    DT_THROW(ValueError) << "model " << files.model << " has data inputs: pass --inputs";
}

LoadedProgram load_program(const std::string& model, const std::string& weights, const std::string& inputs) {
  LoadedProgram p{ir::parse_file(model), {}};
  require_model_files(p.graph, {model, weights, inputs});
  if (!weights.empty()) p.bindings = io::bind_params(p.graph, io::SafetensorsFile::open(weights));
  if (!inputs.empty())
    for (auto& [name, t] : io::bind_inputs(p.graph, io::SafetensorsFile::open(inputs))) p.bindings[name] = t;
  return p;
}

}  // namespace dt::tools
