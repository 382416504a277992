// `dtensor import MODEL.onnx -o MODEL.dt --weights W.safetensors [--input-shape name=2x32 ...]
// [--input-dtype name=i64 ...]`: converts an ONNX model into the IR and its weights
// (dtensor/io/onnx_import.h, docs/import.md). Both files are written atomically, together.
#include <cstdio>

#include "dtensor/core/atomic_file.h"
#include "dtensor/io/onnx_import.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/ir/printer.h"
#include "tools/command.h"
#include "tools/load_program.h"

namespace dt::tools {
namespace {

struct ImportOptions {
  ModelFiles files;  // MODEL (ONNX), --weights (written)
  std::string output;
  std::vector<std::string> input_shapes;
  std::vector<std::string> input_dtypes;
};

void run_import(const ImportOptions& opt) {
  io::OnnxImportOptions o;
  for (const std::string& t : opt.input_shapes) {
    auto [name, shape] = io::parse_input_shape(t);
    o.input_shapes[name] = shape;
  }
  for (const std::string& t : opt.input_dtypes) {
    auto [name, dtype] = io::parse_input_dtype(t);
    o.input_dtypes[name] = dtype;
  }
  refuse_output_over_input(opt.output, {{"model", opt.files.model}});
  refuse_output_over_input(opt.files.weights, {{"model", opt.files.model}});
  io::OnnxImportResult r = io::import_onnx(opt.files.model, o);
  StagedFiles files;
  files.add(opt.output, ir::print(r.graph));
  files.add(opt.files.weights, io::safetensors_bytes(r.weights, {{"source", opt.files.model}}));
  files.commit();
  std::fprintf(stderr, "imported %s: %zu nodes, %zu parameters -> %s, %s\n", opt.files.model.c_str(),
               r.graph.nodes().size(), r.graph.params().size(), opt.output.c_str(), opt.files.weights.c_str());
}

void setup(CLI::App& app) {
  static ImportOptions opt;
  CLI::App* cmd = app.add_subcommand("import", "Convert an ONNX model into the dtensor IR and a weights file");
  add_model_options(cmd, opt.files,
                    {.model_help = "ONNX model file",
                     .weights_help = "safetensors file to write the parameters to",
                     .inputs_flag = nullptr,
                     .required = true});
  cmd->add_option("-o,--output", opt.output, "IR file to write")->required();
  cmd->add_option("--input-shape", opt.input_shapes, "NAME=AxB...: the static shape of a graph input (dynamic dims)");
  cmd->add_option("--input-dtype", opt.input_dtypes, "NAME=DTYPE: declare a graph input with this dtype");
  cmd->callback([] { run_import(opt); });
}

CommandRegistrar reg("import", setup);

}  // namespace
}  // namespace dt::tools
