// `dtensor onnx-conformance [--data DIR] [--filter REGEX] [--json]`: runs the ONNX conformance node
// tests (Debian's libonnx-testdata: DIR/node/test_*/model.onnx with test_data_set_*/input_*.pb and
// output_*.pb) of every op the importer claims (io::onnx_supported_ops) and reports, per ONNX op,
// how many passed, failed or were refused as unsupported, with the reason of each failure and
// refusal (docs/onnx.md). A test runs when every op of its model is claimed; it is imported with
// its inputs' shapes, run on one device and compared with the expected outputs with the ONNX
// backend runner's tolerances (rtol 1e-3, atol 1e-7). Exit code 1 when any test of a claimed op
// fails (a refusal is a clear import error, not a failure); CI runs it (onnx_conformance_test).
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "dtensor/core/error.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/io/onnx_import.h"
#include "dtensor/runtime/launcher.h"
#include "tools/command.h"

namespace dt::tools {
namespace {

namespace fs = std::filesystem;

struct ConformanceOptions {
  std::string data = "/usr/share/libonnx-testdata/data";
  std::string filter;
  bool json = false;
};

struct TestResult {
  std::string name;
  std::string op;      // the ONNX op the test is about
  std::string status;  // passed, failed, unsupported
  std::string reason;  // why it failed or was refused
};

std::string read_bytes(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// "ReduceMean" -> "reduce_mean", as the node tests are named (test_reduce_mean_...).
std::string snake(const std::string& op) {
  std::string s;
  for (size_t i = 0; i < op.size(); ++i) {
    if (std::isupper(uint8_t(op[i])) && i > 0 && !std::isupper(uint8_t(op[i - 1]))) s += '_';
    s += char(std::tolower(uint8_t(op[i])));
  }
  return s;
}

// The op a test is about: the op of a one-node model; else the model's op whose snake-case name
// the test name starts with (the longest, so test_reduce_sum_... is ReduceSum, not Reduce...);
// else "(expanded)": the function tests spelled out in other ops
// (test_layer_normalization_..._expanded) are about none of them.
std::string op_of_test(const std::string& test, const onnx::GraphProto& g) {
  if (g.node_size() == 1) return g.node(0).op_type();  // test_tril_... is Trilu, test_training_dropout Dropout
  std::string best;
  size_t best_len = 0;
  for (const auto& n : g.node()) {
    const std::string s = "test_" + snake(n.op_type());
    if (test.rfind(s, 0) == 0 && s.size() > best_len) best = n.op_type(), best_len = s.size();
  }
  if (!best.empty()) return best;
  return "(expanded)";
}

// Imports and runs one test directory with each of its data sets.
TestResult run_test(const fs::path& dir, const onnx::ModelProto& m) {
  TestResult r{dir.filename().string(), op_of_test(dir.filename().string(), m.graph()), "passed", ""};
  std::set<std::string> inits;
  for (const auto& t : m.graph().initializer()) inits.insert(t.name());
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return {r.name, r.op, "failed", "no test_data_set_* directory"};
  try {
    for (const fs::path& data : sets) {
      // Integer inputs of rank <= 1 (axes, starts, shapes, split sizes, gather indices) are fixed
      // at import, as an exporter writes them; everything else stays a data input.
      io::OnnxImportOptions opt;
      std::map<std::string, Tensor> inputs;
      int i = 0;
      for (const auto& vi : m.graph().input()) {
        if (inits.count(vi.name())) continue;
        Tensor t = io::read_onnx_tensor((data / ("input_" + std::to_string(i++) + ".pb")).string());
        if (!is_floating(t.dtype()) && t.dtype() != DType::boolean && t.dim() <= 1) opt.constant_inputs[vi.name()] = t;
        else inputs[vi.name()] = t;
      }
      io::OnnxImportResult im = io::import_onnx_bytes(m.SerializeAsString(), (dir / "model.onnx").string(), opt);
      runtime::Bindings b;
      for (const ir::Value* p : im.graph.params()) b[p->name] = im.weights.at(p->name);
      for (const ir::Value* v : im.graph.inputs())
        for (const auto& [name, t] : inputs)
          if (io::onnx_ir_name(name) == v->name) b[v->name] = t;
      std::vector<Tensor> got = runtime::launch({&im.graph}, {b})[0].outputs;
      for (size_t k = 0; k < got.size(); ++k) {
        Tensor want = io::read_onnx_tensor((data / ("output_" + std::to_string(k) + ".pb")).string());
        const std::string where = data.filename().string() + " output " + std::to_string(k);
        if (want.dtype() != got[k].dtype())
          return {r.name, r.op, "failed",
                  where + " is " + std::string(dtype_name(got[k].dtype())) + ", expected " + std::string(dtype_name(want.dtype()))};
        DiffReport d = compare(got[k].to(DType::f64), want.to(DType::f64), 1e-3, 1e-7);
        if (!d.shapes_match)
          return {r.name, r.op, "failed", where + " has shape " + shape_str(got[k].shape()) + ", expected " + shape_str(want.shape())};
        if (d.mismatches)
          return {r.name, r.op, "failed",
                  where + ": " + std::to_string(d.mismatches) + " elements differ, max_abs_diff " + std::to_string(d.max_abs_diff)};
      }
    }
  } catch (const Error& e) {
    // The importer refused the model (an attribute value or input form it does not convert): a
    // clear error is the contract for what is not supported.
    return {r.name, r.op, "unsupported", e.what()};
  } catch (const std::exception& e) {
    return {r.name, r.op, "failed", std::string("crashed: ") + e.what()};
  }
  return r;
}

struct OpCounts {
  int passed = 0, failed = 0, unsupported = 0;
};

void run_conformance(const ConformanceOptions& opt) {
  const fs::path node_dir = fs::path(opt.data) / "node";
  if (!fs::is_directory(node_dir))
    DT_THROW(IoError) << node_dir.string() << " is not a directory: give --data the libonnx-testdata data directory "
                      << "(install libonnx-testdata, scripts/install-deps.sh)";
  std::regex filter;
  try {
    filter = std::regex(opt.filter.empty() ? std::string(".*") : opt.filter);
  } catch (const std::regex_error& e) {
    DT_THROW(ValueError) << "--filter '" << opt.filter << "' is not a regular expression: " << e.what();
  }
  const std::vector<std::string> claimed = io::onnx_supported_ops();
  const std::set<std::string> claimed_set(claimed.begin(), claimed.end());
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(node_dir))
    if (e.is_directory()) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());

  std::map<std::string, OpCounts> per_op;
  for (const auto& op : claimed) per_op[op];
  std::vector<TestResult> results;
  int not_claimed = 0;
  for (const fs::path& d : dirs) {
    const std::string name = d.filename().string();
    if (!std::regex_search(name, filter)) continue;
    onnx::ModelProto m;
    const std::string bytes = read_bytes(d / "model.onnx");
    if (!m.ParseFromArray(bytes.data(), int(bytes.size()))) {
      results.push_back({name, "<unreadable>", "failed", "model.onnx does not parse"});
      continue;
    }
    bool all_claimed = true;
    for (const auto& n : m.graph().node()) all_claimed &= n.domain().empty() && claimed_set.count(n.op_type()) > 0;
    if (!all_claimed) {
      ++not_claimed;
      continue;
    }
    TestResult r = run_test(d, m);
    OpCounts& c = per_op[r.op];
    (r.status == "passed" ? c.passed : r.status == "failed" ? c.failed : c.unsupported)++;
    results.push_back(std::move(r));
  }

  int passed = 0, failed = 0, unsupported = 0;
  for (const auto& r : results) (r.status == "passed" ? passed : r.status == "failed" ? failed : unsupported)++;
  if (opt.json) {
    nlohmann::json j;
    j["data"] = opt.data;
    j["claimed_ops"] = claimed;
    j["totals"] = {{"passed", passed}, {"failed", failed}, {"unsupported", unsupported}, {"not_claimed", not_claimed}};
    nlohmann::json ops = nlohmann::json::object();
    for (const auto& [op, c] : per_op)
      ops[op] = {{"passed", c.passed}, {"failed", c.failed}, {"unsupported", c.unsupported}};
    j["ops"] = ops;
    nlohmann::json tests = nlohmann::json::array();
    for (const auto& r : results) {
      nlohmann::json t = {{"name", r.name}, {"op", r.op}, {"status", r.status}};
      if (!r.reason.empty()) t["reason"] = r.reason;
      tests.push_back(t);
    }
    j["tests"] = tests;
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    std::printf("%-28s %7s %7s %12s\n", "op", "passed", "failed", "unsupported");
    for (const auto& [op, c] : per_op)
      std::printf("%-28s %7d %7d %12d\n", op.c_str(), c.passed, c.failed, c.unsupported);
    for (const auto& r : results)
      if (r.status != "passed") std::printf("%s %s (%s): %s\n", r.status.c_str(), r.name.c_str(), r.op.c_str(), r.reason.c_str());
    std::printf("onnx conformance: %zu claimed ops; %zu node tests ran: %d passed, %d failed, %d unsupported; "
                "%d use ops not claimed\n",
                claimed.size(), results.size(), passed, failed, unsupported, not_claimed);
  }
  if (failed) command_exit_code() = 1;
}

void setup(CLI::App& app) {
  static ConformanceOptions opt;
  CLI::App* cmd = app.add_subcommand("onnx-conformance", "Run the ONNX node conformance tests of the ops the importer claims");
  cmd->add_option("--data", opt.data, "libonnx-testdata data directory (holding node/)");
  cmd->add_option("--filter", opt.filter, "only tests whose name matches this regular expression");
  cmd->add_flag("--json", opt.json, "print the results as JSON");
  cmd->callback([] { run_conformance(opt); });
}

CommandRegistrar reg("onnx-conformance", setup);

}  // namespace
}  // namespace dt::tools
