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
#include <functional>
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

// ---- PyTorch's exports ----

class Reference : public ::testing::TestWithParam<std::string> {};

TEST_P(Reference, ImportsRunsLikePyTorchAndShards) {
  const std::string m = GetParam();
  OnnxImportOptions opt;
  opt.input_shapes["input_ids"] = {2, 8};
  OnnxImportResult im = import_onnx(kReference + "/" + m + ".onnx", opt);
  // Print/parse round-trip.
  const std::string text = ir::print(im.graph);
  EXPECT_EQ(ir::print(ir::parse(text, m + ".dt")), text);
  // The nn.Linear modules are linear ops on parameters named by their module paths.
  const std::string q = m == "gpt" ? "h.0.attn.q_proj.weight" : "layers.0.self_attn.q_proj.weight";
  ASSERT_TRUE(im.graph.find(q)) << q;
  EXPECT_EQ(im.graph.find(q)->kind, ir::ValueKind::param);
  EXPECT_GE(sharding::testing::count_ops(im.graph, ir::OpKind::linear), m == "gpt" ? 13 : 15);
  EXPECT_EQ(sharding::testing::count_ops(im.graph, ir::OpKind::matmul), 4);  // q·kᵀ and p·v per layer
  // One device, against PyTorch.
  TensorMap io = read_safetensors(kReference + "/" + m + "_io.safetensors");
  const TensorMap inputs = {{"input_ids", io.at("input_ids")}};
  std::vector<Tensor> single = sharding::testing::run_single(im.graph, im.weights, inputs);
  DiffReport d = compare(single[0], io.at("output"), 1e-5, 1e-5);
  std::printf("%s: one device vs PyTorch max_abs_diff %.3g\n", m.c_str(), d.max_abs_diff);
  EXPECT_TRUE(d.shapes_match && d.mismatches == 0) << "max_abs_diff " << d.max_abs_diff;
  // Tensor parallel with the plan beside the model, on meshes the heads do and do not divide.
  const sharding::ParallelPlan plan = sharding::ParallelPlan::load(kReference + "/" + m + "_tp.json");
  for (int64_t n : {2, 3, 4}) {
    auto run = sharding::testing::run_sharded(im.graph, plan, DeviceMesh({n}), im.weights, inputs, "default");
    DiffReport ds = compare(run.outputs[0], single[0], 1e-5, 1e-5);
    std::printf("%s: tp %lld vs one device max_abs_diff %.3g\n", m.c_str(), (long long)n, ds.max_abs_diff);
    EXPECT_TRUE(ds.shapes_match && ds.mismatches == 0) << "mesh " << n << " max_abs_diff " << ds.max_abs_diff;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Reference, ::testing::Values("gpt", "llama"));

// ---- errors ----

// A one-node model: y = op(x), x f32 [2, 3] (dim 1 dynamic when asked).
onnx::ModelProto tiny(const std::string& op, int64_t opset = 17, int64_t ir_version = 8, bool dynamic = false) {
  onnx::ModelProto m;
  m.set_ir_version(ir_version);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  auto* g = m.mutable_graph();
  g->set_name("tiny");
  auto* in = g->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_value(2);
  if (dynamic) tt->mutable_shape()->add_dim()->set_dim_param("seq");
  else tt->mutable_shape()->add_dim()->set_dim_value(3);
  auto* n = g->add_node();
  n->set_name("n0");
  n->set_op_type(op);
  n->add_input("x");
  n->add_output("y");
  g->add_output()->set_name("y");
  return m;
}

template <typename E>
void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const E& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
  }
}

TEST(OnnxImportErrors, EachIsClearAndNamesTheNode) {
  const std::string ok = tiny("Relu").SerializeAsString();
  OnnxImportResult r = import_onnx_bytes(ok, "tiny.onnx");
  EXPECT_EQ(r.graph.outputs()[0]->type.shape, (Shape{2, 3}));

  expect_error<IoError>([&] { import_onnx_bytes(read(kReference + "/gpt.onnx").substr(0, 1000), "cut.onnx"); },
                        {"cut.onnx", "not a valid ONNX model"});
  expect_error<ValueError>([] { import_onnx_bytes(tiny("Bogus").SerializeAsString(), "m"); },
                           {"node 'n0'", "Bogus", "output 'y'", "not supported"});
  expect_error<ValueError>([] { import_onnx_bytes(tiny("Relu", 9).SerializeAsString(), "m"); }, {"opset 9", "11 to 17"});
  expect_error<ValueError>([] { import_onnx_bytes(tiny("Relu", 17, 99).SerializeAsString(), "m"); }, {"IR version 99"});
  const std::string dyn = tiny("Relu", 17, 8, true).SerializeAsString();
  expect_error<ValueError>([&] { import_onnx_bytes(dyn, "m"); }, {"'x' dim 1 is dynamic", "seq", "--input-shape x="});
  OnnxImportOptions opt;
  opt.input_shapes["x"] = {2, 5};
  EXPECT_EQ(import_onnx_bytes(dyn, "m", opt).graph.outputs()[0]->type.shape, (Shape{2, 5}));
  opt.input_shapes["x"] = {4, 5};
  expect_error<ValueError>([&] { import_onnx_bytes(dyn, "m", opt); }, {"dim 0 is fixed to 2"});
  opt.input_shapes = {{"z", {2, 5}}};
  expect_error<ValueError>([&] { import_onnx_bytes(dyn, "m", opt); }, {"'z'", "not a graph input", "inputs: x"});
  // A computed value where the importer needs a constant.
  onnx::ModelProto rs = tiny("Reshape");
  rs.mutable_graph()->mutable_node(0)->add_input("x");
  expect_error<ValueError>([&] { import_onnx_bytes(rs.SerializeAsString(), "m"); }, {"node 'n0' (Reshape", "must be known at import"});

  EXPECT_EQ(parse_input_shape("input_ids=2x32").second, (Shape{2, 32}));
  EXPECT_EQ(parse_input_shape("s=").second, Shape{});
  for (const char* bad : {"input_ids", "=2x3", "x=2x", "x=2xa", "x=-1x3", "x=2*3"})
    expect_error<ValueError>([&] { parse_input_shape(bad); }, {"--input-shape"});
  EXPECT_EQ(parse_input_dtype("ids=i32").second, DType::i32);
  expect_error<ValueError>([] { parse_input_dtype("ids=int3"); }, {"int3"});
}

}  // namespace
}  // namespace dt::io
