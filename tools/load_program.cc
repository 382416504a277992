#include "tools/load_program.h"

#include "dtensor/core/error.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/io/tensor_binding.h"
#include "dtensor/ir/parser.h"

namespace dt::tools {

void add_model_options(CLI::App* cmd, ModelFiles& files, const ModelOptionSpec& spec) {
  cmd->add_option("model", files.model, spec.model_help)->required();
  CLI::Option* w = cmd->add_option("--weights", files.weights, spec.weights_help);
  CLI::Option* in = cmd->add_option(spec.inputs_flag, files.inputs, spec.inputs_help);
  if (spec.required) {
    w->required();
    in->required();
  }
}

LoadedProgram load_program(const std::string& model, const std::string& weights, const std::string& inputs) {
  LoadedProgram p{ir::parse_file(model), {}};
  if (!p.graph.params().empty() && weights.empty())
    DT_THROW(ValueError) << "model " << model << " has " << p.graph.params().size() << " parameters: pass --weights";
  if (!p.graph.inputs().empty() && inputs.empty())
    DT_THROW(ValueError) << "model " << model << " has data inputs: pass --inputs";
  if (!weights.empty()) p.bindings = io::bind_params(p.graph, io::SafetensorsFile::open(weights));
  if (!inputs.empty())
    for (auto& [name, t] : io::bind_inputs(p.graph, io::SafetensorsFile::open(inputs))) p.bindings[name] = t;
  return p;
}

}  // namespace dt::tools
