// `dtensor bench import [--json] [--layers 24] [--hidden 256] [--model M.onnx]`: how long
// `dtensor import` takes on a deep Llama-style export, and import + compile for 4 ranks against
// PyTorch's own torch.onnx.export of the same model, measured in one run on this machine.
//
// The model comes from scripts/make_onnx_reference.py --bench-llama (run with /usr/bin/python3,
// which reports the wall time of torch.onnx.export alone); it is written to a temporary directory
// and removed afterwards (never committed). Without an importable torch the bench says so, skips
// the export column, and needs --model. Compile is sharding::compile with the Llama tp plan
// (tests/reference/onnx/llama_tp.json) on a 4-rank mesh plus the default collective passes on
// every rank's program, as `dtensor compile` does. Import and compile times are the fastest of
// --repeat runs; the export is run once (it takes seconds).
#include <fmt/format.h>

#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "dtensor/core/error.h"
#include "dtensor/io/onnx_import.h"
#include "dtensor/passes/rank_pipeline.h"
#include "dtensor/sharding/compiler.h"
#include "dtensor/sharding/parallel_plan.h"
#include "bench/bench_registry.h"

namespace dt::bench {
namespace {

namespace fs = std::filesystem;

struct ImportBenchOptions {
  bool json = false;
  int64_t layers = 24;
  int64_t hidden = 256;
  int repeat = 3;
  std::string model;  // use this export instead of making one
  std::string python = "/usr/bin/python3";
  std::string script = std::string(DTENSOR_SOURCE_DIR) + "/scripts/make_onnx_reference.py";
  std::string plan = std::string(DTENSOR_SOURCE_DIR) + "/tests/reference/onnx/llama_tp.json";
};

// Runs `cmd` and returns its standard output (empty when it failed).
std::string run_capture(const std::string& cmd, int& status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  status = pclose(p);
  return out;
}

template <typename F>
double fastest_seconds(int repeat, F&& fn) {
  double best = 1e30;
  for (int i = 0; i < repeat; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

void run_bench(const ImportBenchOptions& opt) {
  nlohmann::json j = {{"bench", "import"}, {"repeat", opt.repeat}};
  if (opt.model.empty()) j["layers"] = opt.layers, j["hidden"] = opt.hidden;
  else j["model"] = opt.model;
  std::string model = opt.model;
  fs::path tmp;
  double export_seconds = -1;
  int status = 0;
  run_capture(opt.python + " -c 'import torch' 2>/dev/null", status);
  const bool have_torch = status == 0;
  if (have_torch && model.empty()) {
    tmp = fs::temp_directory_path() / fmt::format("dtensor_bench_import_{}", ::getpid());
    fs::create_directories(tmp);
    model = (tmp / "llama.onnx").string();
    const std::string out = run_capture(fmt::format("{} {} --bench-llama {} --layers {} --hidden {} 2>/dev/null",
                                                    opt.python, opt.script, model, opt.layers, opt.hidden),
                                        status);
    const size_t line = out.rfind('{');
    if (status != 0 || line == std::string::npos) {
      fs::remove_all(tmp);
      DT_THROW(IoError) << opt.script << " --bench-llama failed (exit status " << status << ")";
    }
    export_seconds = nlohmann::json::parse(out.substr(line))["export_seconds"];
  }
  if (model.empty())
    DT_THROW(ValueError) << opt.python << " cannot import torch, so the bench cannot make the model: give one with --model "
                         << "(scripts/make_onnx_reference.py --bench-llama on a machine with PyTorch)";
  if (!have_torch) std::fprintf(stderr, "note: %s cannot import torch: the torch.onnx.export column is skipped\n", opt.python.c_str());

  // The export's size in ONNX nodes (what the importer walks) and bytes.
  int64_t onnx_nodes = 0;
  const uintmax_t model_bytes = fs::file_size(model);
  {
    std::ifstream f(model, std::ios::binary);
    onnx::ModelProto m;
    if (!m.ParseFromIstream(&f)) DT_THROW(IoError) << model << ": not a valid ONNX model";
    onnx_nodes = m.graph().node_size();
  }
  io::OnnxImportOptions o;
  o.input_shapes["input_ids"] = {1, 16};
  size_t nodes = 0;
  io::OnnxImportResult keep;
  const double import_s = fastest_seconds(opt.repeat, [&] {
    keep = io::import_onnx(model, o);
    nodes = keep.graph.nodes().size();
  });
  if (!tmp.empty()) fs::remove_all(tmp);
  const sharding::ParallelPlan plan = sharding::ParallelPlan::load(opt.plan);
  const double compile_s = fastest_seconds(opt.repeat, [&] {
    sharding::CompiledModel c = sharding::compile(keep.graph, plan, DeviceMesh({4}));
    passes::PassManager pm;
    pm.add(passes::parse_pipeline("default"));
    passes::run_rank_pipelines(pm, c.programs, c.ranks);
  });

  j["model_bytes"] = model_bytes;
  j["onnx_nodes"] = onnx_nodes;
  j["ir_nodes"] = nodes;
  j["import_seconds"] = import_s;
  j["onnx_nodes_per_second"] = double(onnx_nodes) / import_s;
  j["compile_4_ranks_seconds"] = compile_s;
  j["import_plus_compile_seconds"] = import_s + compile_s;
  if (export_seconds >= 0) {
    j["torch_onnx_export_seconds"] = export_seconds;
    j["export_over_import_plus_compile"] = export_seconds / (import_s + compile_s);
  } else {
    j["torch_onnx_export_seconds"] = nullptr;
  }
  if (opt.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  const std::string what = opt.model.empty() ? fmt::format("llama-style export, {} layers, hidden {}", opt.layers, opt.hidden)
                                              : opt.model;
  std::printf("%s: %lld ONNX nodes, %.1f MB -> %zu IR nodes\n", what.c_str(), (long long)onnx_nodes,
              double(model_bytes) / 1e6, nodes);
  std::printf("  import                     %8.3f s  (%.0f ONNX nodes/s)\n", import_s, double(onnx_nodes) / import_s);
  std::printf("  compile for 4 ranks        %8.3f s\n", compile_s);
  std::printf("  import + compile           %8.3f s\n", import_s + compile_s);
  if (export_seconds >= 0)
    std::printf("  torch.onnx.export          %8.3f s  (%.1fx import + compile)\n", export_seconds,
                export_seconds / (import_s + compile_s));
  else
    std::printf("  torch.onnx.export          skipped (no torch)\n");
}

void setup(CLI::App& bench) {
  static ImportBenchOptions opt;
  CLI::App* cmd = add_bench(bench, "import", "ONNX import time of a deep Llama-style export vs torch.onnx.export",
                            opt.json, [] { run_bench(opt); });
  cmd->add_option("--layers", opt.layers, "layers of the generated model")->capture_default_str();
  cmd->add_option("--hidden", opt.hidden, "hidden size of the generated model")->capture_default_str();
  cmd->add_option("--repeat", opt.repeat, "repetitions of import and compile (the fastest is reported)")->capture_default_str();
  cmd->add_option("--model", opt.model, "an existing Llama-style export to import instead (no torch needed)");
  cmd->add_option("--python", opt.python, "the Python with PyTorch")->capture_default_str();
}

BenchRegistrar reg("import", setup);

}  // namespace
}  // namespace dt::bench
