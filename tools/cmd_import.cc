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
  std::vector<std::string> frozen;
};

void run_import(const ImportOptions& opt) {
  io::OnnxImportOptions o;
  io::add_input_shapes(o, opt.input_shapes);
  io::add_input_dtypes(o, opt.input_dtypes);
  o.frozen.insert(opt.frozen.begin(), opt.frozen.end());
  refuse_output_over_input(opt.output, {{"model", opt.files.model}});
  refuse_output_over_input(opt.files.weights, {{"model", opt.files.model}});
  io::OnnxImportResult r = io::import_onnx(opt.files.model, o);
  StagedFiles files;
  files.add(opt.output, ir::print(r.graph));
  files.add(opt.files.weights, io::safetensors_bytes(r.weights, {{"source", opt.files.model}}));
  files.commit();
  for (const std::string& w : r.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  std::fprintf(stderr, "imported %s: %zu nodes -> %s, %s\n%s\n", opt.files.model.c_str(), r.graph.nodes().size(),
               opt.output.c_str(), opt.files.weights.c_str(), io::import_summary(r.summary).c_str());
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
  cmd->add_option("--frozen", opt.frozen,
                  "NAME: import this floating initializer as a const (a buffer: never trained); integer "
                  "initializers, PyTorch buffer names (inv_freq, ...) and folded constants are consts already");
  cmd->callback([] { run_import(opt); });
}

CommandRegistrar reg("import", setup);

}  // namespace
}  // namespace dt::tools
