// The importer on hand-built models (dtensor/io/onnx_import.h):
//  - malformed and hostile files (issue 29, items 5-8): a node without outputs, a wrong input
//    count, a duplicated output name or initializer, raw_data with typed data, negative or
//    overflowing dims, a header claiming more elements than its data, folding past the size limit
//    (kept in the graph, counted in nodes, no wall clock), absurd shapes, a repeated
//    --input-shape: each a ValueError naming what is wrong;
//  - every unsupported op listed at once, and errors of shape inference naming the node;
//  - parameters and consts (issue 27.1/27.2): a trainable initializer read through a Gather with
//    computed indices stays a parameter gathered in the graph; buffers, integer initializers and
//    large folded constants are consts (printed `const`, bound from the weights), which training
//    does not update and fsdp's "*" leaves replicated; the import summary counts them.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>

#include "dtensor/autodiff/train_step.h"
#include "dtensor/io/onnx_import.h"
#include "dtensor/ir/parser.h"
#include "dtensor/ir/printer.h"
#include "dtensor/layout/device_mesh.h"
#include "dtensor/sharding/parallel_plan.h"
#include "tests/sharding/sharded_run.h"
#include "tests/support/ops_test_util.h"

namespace dt::io {
namespace {

using sharding::testing::count_ops;

// A model with graph input x f32 `x_shape` and no nodes yet.
onnx::ModelProto model(const Shape& x_shape = {2, 3}) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("m");
  auto* in = g->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : x_shape) tt->mutable_shape()->add_dim()->set_dim_value(d);
  return m;
}

onnx::NodeProto* node(onnx::ModelProto& m, const std::string& op, std::vector<std::string> ins,
                      std::vector<std::string> outs, const std::string& name = "") {
  auto* n = m.mutable_graph()->add_node();
  // Appended rather than `"n" + std::to_string(...)`, on which GCC 12 warns falsely (-Wrestrict).
  std::string numbered = "n";
  numbered += std::to_string(m.graph().node_size() - 1);
  n->set_name(name.empty() ? numbered : name);
  n->set_op_type(op);
  for (auto& i : ins) n->add_input(i);
  for (auto& o : outs) n->add_output(o);
  return n;
}

void output(onnx::ModelProto& m, const std::string& name) { m.mutable_graph()->add_output()->set_name(name); }

onnx::TensorProto* f32_init(onnx::ModelProto& m, const std::string& name, const Shape& shape, float start = 0.5f) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : shape) t->add_dims(d);
  for (int64_t i = 0; i < numel(shape); ++i) t->add_float_data(start + 0.25f * float(i % 7));
  return t;
}

onnx::TensorProto* i64_init(onnx::ModelProto& m, const std::string& name, const std::vector<int64_t>& v) {
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(int64_t(v.size()));
  for (int64_t x : v) t->add_int64_data(x);
  return t;
}

// With DTENSOR_WRITE_ONNX_SEEDS=DIR set, every model imported here is also written to DIR as
// <test>_<k>.onnx: the fuzz harness's seeds in tests/fuzz/onnx/ were made so
// (`DTENSOR_WRITE_ONNX_SEEDS=tests/fuzz/onnx build/tests/onnx_import_test --gtest_filter='OnnxImportMalformed*:OnnxImportParameters*:OnnxImportConverters*'`).
void write_seed(const onnx::ModelProto& m) {
  const char* dir = std::getenv("DTENSOR_WRITE_ONNX_SEEDS");
  if (!dir) return;
  static std::map<std::string, int> count;
  const std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::ofstream(std::string(dir) + "/" + test + "_" + std::to_string(count[test]++) + ".onnx", std::ios::binary)
      << m.SerializeAsString();
}

OnnxImportResult import(const onnx::ModelProto& m, const OnnxImportOptions& opt = {}) {
  write_seed(m);
  return import_onnx_bytes(m.SerializeAsString(), "m.onnx", opt);
}

using test::expect_error;

TEST(OnnxImportMalformed, NodesWithoutOutputsOrWithWrongInputCountsAreRefused) {
  for (const char* op : {"Relu", "Split", "MatMul", "Shape", "Gather", "Concat"}) {
    onnx::ModelProto m = model();
    node(m, op, {"x", "x"}, {});
    expect_error<ValueError>([&] { import(m); }, {"node 'n0' (", op, "has no outputs"});
  }
  onnx::ModelProto m = model();
  node(m, "Relu", {"x", "x", "x"}, {"y"});
  output(m, "y");
  expect_error<ValueError>([&] { import(m); }, {"node 'n0' (Relu, output 'y')", "3 inputs", "takes 1"});
  onnx::ModelProto two = model();
  node(two, "Split", {"x"}, {"a", "b", "c", "d"});
  node(two, "Add", {"x"}, {"y"});
  output(two, "y");
  expect_error<ValueError>([&] { import(two); }, {"node 'n1' (Add", "1 inputs", "takes 2"});
}

TEST(OnnxImportMalformed, NamesDefinedTwiceAreRefused) {
  onnx::ModelProto m = model();
  node(m, "Relu", {"x"}, {"y"});
  node(m, "Neg", {"x"}, {"y"});
  output(m, "y");
  expect_error<ValueError>([&] { import(m); }, {"node 'n1' (Neg", "output 'y' is already defined"});
  onnx::ModelProto over_input = model();
  node(over_input, "Relu", {"x"}, {"x"});
  expect_error<ValueError>([&] { import(over_input); }, {"output 'x' is already defined"});
  onnx::ModelProto init = model();
  f32_init(init, "w", {3});
  f32_init(init, "w", {3});
  node(init, "Add", {"x", "w"}, {"y"});
  output(init, "y");
  expect_error<ValueError>([&] { import(init); }, {"initializer 'w' is defined twice"});
}

TEST(OnnxImportMalformed, TensorPayloadsAndDimsAreChecked) {
  onnx::ModelProto both = model();
  auto* w = f32_init(both, "w", {3});
  w->set_raw_data(std::string(12, '\0'));
  node(both, "Add", {"x", "w"}, {"y"});
  output(both, "y");
  expect_error<ValueError>([&] { import(both); }, {"initializer 'w'", "both raw_data and 3 typed values"});
  // A header claiming 2^40 x 2^10 elements over 12 bytes: refused before anything is allocated.
  onnx::ModelProto claims = model();
  auto* c = claims.mutable_graph()->add_initializer();
  c->set_name("w");
  c->set_data_type(onnx::TensorProto::FLOAT);
  c->add_dims(int64_t(1) << 40);
  c->add_dims(1024);
  c->set_raw_data(std::string(12, '\0'));
  node(claims, "Add", {"x", "w"}, {"y"});
  output(claims, "y");
  expect_error<ValueError>([&] { import(claims); }, {"initializer 'w'", "3 values for shape"});
  c->set_dims(0, int64_t(1) << 41);
  expect_error<ValueError>([&] { import(claims); }, {"initializer 'w' has a bad dim 2199023255552"});
  // Graph inputs: a negative dim, 2^62 x 4, (2^40)^3.
  for (const Shape& bad : {Shape{2, -3}, Shape{int64_t(1) << 62, 4}, Shape{int64_t(1) << 40, int64_t(1) << 40, int64_t(1) << 40}}) {
    onnx::ModelProto m = model(bad);
    node(m, "Relu", {"x"}, {"y"});
    output(m, "y");
    expect_error<ValueError>([&] { import(m); }, {"graph input 'x'"});
  }
  // The same through --input-shape on a dynamic dim.
  onnx::ModelProto dyn = model({2, 3});
  dyn.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(1)->set_dim_param("s");
  node(dyn, "Relu", {"x"}, {"y"});
  output(dyn, "y");
  OnnxImportOptions opt;
  opt.input_shapes["x"] = {2, int64_t(1) << 50};
  expect_error<ValueError>([&] { import(dyn, opt); }, {"graph input 'x' has a bad dim 1125899906842624"});
}

TEST(OnnxImportMalformed, FoldingStopsAtItsLimitAndAbsurdShapesAreRefused) {
  // ConstantOfShape [16384, 16384] then MatMul: both stay in the graph (nothing of 2^28 elements
  // is computed at import), the matmul reading the full.
  onnx::ModelProto m = model({2, 16384});
  i64_init(m, "shape", {16384, 16384});
  node(m, "ConstantOfShape", {"shape"}, {"big"});
  node(m, "MatMul", {"big", "big"}, {"sq"});
  node(m, "MatMul", {"x", "sq"}, {"y"});
  output(m, "y");
  OnnxImportResult r = import(m);
  EXPECT_EQ(count_ops(r.graph, ir::OpKind::full), 1);
  EXPECT_EQ(count_ops(r.graph, ir::OpKind::matmul), 2);
  EXPECT_TRUE(r.weights.empty());
  // [16384, 16384, 16] + ReduceSum: kept as a sum over a full, never materialised.
  onnx::ModelProto s = model({2, 3});
  i64_init(s, "shape", {16384, 16384, 16});
  node(s, "ConstantOfShape", {"shape"}, {"big"});
  node(s, "ReduceSum", {"big"}, {"y"});
  output(s, "y");
  OnnxImportResult rs = import(s);
  EXPECT_EQ(count_ops(rs.graph, ir::OpKind::sum), 1);
  // A small fold still folds: ConstantOfShape [4, 4] + ReduceSum is one full scalar.
  s.mutable_graph()->mutable_initializer(0)->set_int64_data(0, 4);
  s.mutable_graph()->mutable_initializer(0)->set_int64_data(1, 4);
  s.mutable_graph()->mutable_initializer(0)->set_int64_data(2, 4);
  OnnxImportResult small = import(s);
  EXPECT_EQ(count_ops(small.graph, ir::OpKind::sum), 0);
  // Absurd: 2^40 x 2^40 x 2^40 elements.
  s.mutable_graph()->mutable_initializer(0)->set_int64_data(0, int64_t(1) << 40);
  s.mutable_graph()->mutable_initializer(0)->set_int64_data(1, int64_t(1) << 40);
  expect_error<ValueError>([&] { import(s); }, {"node 'n0' (ConstantOfShape", "more than 2^50 elements"});
  // A Range longer than the fold limit.
  onnx::ModelProto rg = model();
  i64_init(rg, "a", {0});
  i64_init(rg, "b", {int64_t(1) << 40});
  i64_init(rg, "d", {1});
  for (int i = 0; i < 3; ++i) {
    auto* t = rg.mutable_graph()->mutable_initializer(i);
    t->clear_dims();  // scalars
  }
  node(rg, "Range", {"a", "b", "d"}, {"y"});
  output(rg, "y");
  expect_error<ValueError>([&] { import(rg); }, {"node 'n0' (Range", "more than the importer folds"});
}

TEST(OnnxImportMalformed, EveryUnsupportedOpIsListedAndInferenceErrorsNameTheNode) {
  onnx::ModelProto m = model();
  node(m, "Bogus", {"x"}, {"a"});
  node(m, "Relu", {"a"}, {"b"});
  node(m, "Frob", {"b"}, {"c"});
  node(m, "Bogus", {"c"}, {"d"});
  auto* other = node(m, "Thing", {"d"}, {"y"});
  other->set_domain("com.example");
  output(m, "y");
  expect_error<ValueError>([&] { import(m); }, {"3 ops are not supported by the importer", "Bogus at node 'n0' (Bogus, output 'a') and 1 more",
                                                "Frob at node 'n2'", "com.example.Thing at node 'n4'"});
  // x [2, 3] + w [4]: the builder's broadcast error, named.
  onnx::ModelProto add = model();
  f32_init(add, "w", {4});
  node(add, "Add", {"x", "w"}, {"y"}, "/h.0/Add");
  output(add, "y");
  expect_error<ShapeError>([&] { import(add); }, {"node '/h.0/Add' (Add, output 'y'): ", "broadcast"});

  OnnxImportOptions opt;
  add_input_shapes(opt, {"x=2x3", "y=4"});
  EXPECT_EQ(opt.input_shapes.at("y"), Shape{4});
  expect_error<ValueError>([&] { add_input_shapes(opt, {"x=2x5"}); }, {"--input-shape gives input 'x' twice"});
  expect_error<ValueError>([&] { add_input_dtypes(opt, {"x=i64", "x=i32"}); }, {"--input-dtype gives input 'x' twice"});
}

// ids i64 [2, 4] -> Gather(wpe.weight, Range(0, 4)) + Gather(wte.weight, ids), plus x [2, 4, 32]
// scaled by a rotary table cos(pos x inv_freq) [4, 32] folded from an inv_freq buffer (a const of
// 128 elements); loss = ReduceSum of it all.
onnx::ModelProto embeddings_and_buffers() {
  onnx::ModelProto m = model({2, 4, 32});
  auto* ids = m.mutable_graph()->add_input();
  ids->set_name("ids");
  auto* tt = ids->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::INT64);
  tt->mutable_shape()->add_dim()->set_dim_value(2);
  tt->mutable_shape()->add_dim()->set_dim_value(4);
  f32_init(m, "wte.weight", {11, 32});
  f32_init(m, "wpe.weight", {16, 32}, 0.1f);
  f32_init(m, "rotary.inv_freq", {32}, 0.01f);
  i64_init(m, "start", {0});
  i64_init(m, "limit", {4});
  i64_init(m, "delta", {1});
  for (int i = 3; i < 6; ++i) m.mutable_graph()->mutable_initializer(i)->clear_dims();
  // Positions computed at import (a Range), as exporters write them.
  node(m, "Range", {"start", "limit", "delta"}, {"pos"});
  node(m, "Gather", {"wpe.weight", "pos"}, {"pe"});
  node(m, "Gather", {"wte.weight", "ids"}, {"te"});
  node(m, "Add", {"te", "pe"}, {"h"});
  auto* cast = node(m, "Cast", {"pos"}, {"posf"});
  auto* to = cast->add_attribute();
  to->set_name("to");
  to->set_type(onnx::AttributeProto::INT);
  to->set_i(onnx::TensorProto::FLOAT);
  i64_init(m, "axes1", {1});
  node(m, "Unsqueeze", {"posf", "axes1"}, {"pcol"});
  node(m, "Mul", {"pcol", "rotary.inv_freq"}, {"freqs"});
  node(m, "Cos", {"freqs"}, {"cos"});
  node(m, "Mul", {"x", "cos"}, {"xr"});
  node(m, "Add", {"h", "xr"}, {"s"});
  node(m, "ReduceSum", {"s"}, {"loss"});
  auto* keep = m.mutable_graph()->mutable_node(m.graph().node_size() - 1)->add_attribute();
  keep->set_name("keepdims");
  keep->set_type(onnx::AttributeProto::INT);
  keep->set_i(0);
  output(m, "loss");
  return m;
}

TEST(OnnxImportParameters, TrainableInitializersOnlyAndConstsAreFrozen) {
  OnnxImportResult r = import(embeddings_and_buffers());
  const ir::Graph& g = r.graph;
  // The position embedding stays the parameter wpe.weight, gathered in the graph.
  const ir::Value* wpe = g.find("wpe.weight");
  ASSERT_TRUE(wpe);
  EXPECT_EQ(wpe->kind, ir::ValueKind::param);
  EXPECT_FALSE(wpe->frozen);
  EXPECT_EQ(wpe->type.shape, (Shape{16, 32}));
  ASSERT_TRUE(g.find("wte.weight"));
  EXPECT_FALSE(g.find("wte.weight")->frozen);
  // The folded cos table is a const bound from the weights, not inline; inv_freq itself is never
  // read by the graph (folded away).
  int consts = 0;
  for (const ir::Value* p : g.params()) {
    if (!p->frozen) continue;
    ++consts;
    EXPECT_TRUE(r.weights.count(p->name)) << p->name;
    EXPECT_GT(p->type.numel(), 32) << p->name;
  }
  EXPECT_EQ(consts, 1);
  EXPECT_FALSE(g.find("rotary.inv_freq"));
  EXPECT_EQ(r.summary.parameters, 2);
  EXPECT_EQ(r.summary.frozen, 1);
  EXPECT_EQ(import_summary(r.summary), "fused: 0 attention, 0 rms_norm, 0 activation; frozen constants: 1; parameters: 2");
  // `const` survives print and parse.
  const std::string text = ir::print(g);
  EXPECT_NE(text.find("  const %"), std::string::npos) << text;
  ir::Graph back = ir::parse(text, "m.dt");
  EXPECT_EQ(ir::print(back), text);
  int back_consts = 0;
  for (const ir::Value* p : back.params()) back_consts += p->frozen;
  EXPECT_EQ(back_consts, 1);

  // fsdp "*" leaves the const replicated and shards the parameters.
  const sharding::ParallelPlan plan = sharding::ParallelPlan::parse(
      R"({"mesh_dims": ["dp"], "modules": [{"pattern": "*", "style": "fsdp", "mesh_dim": "dp"}]})");
  const sharding::ResolvedPlan rp = sharding::resolve_plan(plan, g, DeviceMesh(Shape{2}));
  for (const ir::Value* p : g.params())
    EXPECT_EQ(rp.value_placements[size_t(p->id)][0].is_replicate(), p->frozen) << p->name;

  // Training updates the two parameters and never the const: no state, no update for it.
  autodiff::OptimizerConfig sgd;
  autodiff::TrainStep step = autodiff::make_train_step(std::move(back), sgd);
  EXPECT_EQ(step.params, (std::vector<std::string>{"wpe.weight", "wte.weight"}));
  for (const std::string& u : step.updates) EXPECT_EQ(u.find("_output_"), std::string::npos) << u;

  // --frozen makes a floating initializer a const: then its gather folds at import (the rows read
  // are one const with the rotary table added).
  OnnxImportOptions opt;
  opt.frozen = {"wpe.weight"};
  OnnxImportResult f = import(embeddings_and_buffers(), opt);
  EXPECT_FALSE(f.graph.find("wpe.weight"));
  EXPECT_EQ(f.summary.parameters, 1);
  EXPECT_EQ(f.summary.frozen, 2);
}

// A folded constant whose dim 0 is the batch and whose rows along it are equal (positions expanded
// to the batch, a mask of ones made for it) stays one row and an expand, so pipeline micro-batches
// can broadcast it; unequal rows, or a dim 0 that is not an input's, stay as they were.
TEST(OnnxImportParameters, ConstantsBroadcastToTheBatchStayOneRow) {
  onnx::ModelProto m = model({4, 40});
  f32_init(m, "row", {1, 40});  // read through Expand to [4, 40]: equal rows
  i64_init(m, "batch_shape", {4, 40});
  f32_init(m, "table", {4, 40});  // unequal rows: Mul by 2 folds it to a [4, 40] const
  i64_init(m, "other_shape", {5, 40});
  node(m, "Relu", {"row"}, {"row_c"});  // computed, so not the initializer itself
  node(m, "Expand", {"row_c", "batch_shape"}, {"rows"});
  {
    auto* a = node(m, "ConstantOfShape", {"batch_shape"}, {"ones"})->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
    a->mutable_t()->add_dims(1);
    a->mutable_t()->add_float_data(1.0f);
  }
  node(m, "Add", {"table", "table"}, {"table2"});
  node(m, "Expand", {"row_c", "other_shape"}, {"five"});
  {
    auto* a = node(m, "ReduceSum", {"five"}, {"five_sum"})->add_attribute();
    a->set_name("keepdims");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(0);
  }
  node(m, "Add", {"x", "rows"}, {"a"});
  node(m, "Mul", {"a", "ones"}, {"b"});
  node(m, "Add", {"b", "table2"}, {"c"});
  node(m, "Add", {"c", "five_sum"}, {"y"});
  output(m, "y");
  OnnxImportOptions opt;
  opt.frozen = {"row", "table"};  // buffers, so everything above folds
  const OnnxImportResult r = import(m, opt);
  EXPECT_EQ(count_ops(r.graph, ir::OpKind::expand), 2) << ir::print(r.graph);  // rows and ones
  for (const ir::Value* p : r.graph.params())
    if (p->frozen) {
      EXPECT_EQ(p->type.shape, p->name == "table2" ? Shape({4, 40}) : Shape({1, 40})) << p->name;
    }
  // Values: as folded in full.
  const Tensor x = test::uniform({4, 40}, DType::f32, 5);
  const std::vector<Tensor> out = sharding::testing::run_single(r.graph, r.weights, {{"x", x}});
  const TensorMap w = r.weights;
  std::vector<double> want = x.to_doubles();
  const std::vector<double> xs = x.to_doubles();
  for (size_t i = 0; i < want.size(); ++i) {
    const double row = 0.5 + 0.25 * double((i % 40) % 7), table = 0.5 + 0.25 * double(i % 7);
    double five = 0;
    for (int k = 0; k < 5 * 40; ++k) five += 0.5 + 0.25 * double((k % 40) % 7);
    want[i] = double(float(float(float(xs[i] + row) * 1.0f) + float(2 * table))) + five;
  }
  test::expect_values(out[0], want, 1e-5, 1e-4);
}

TEST(OnnxImportParameters, ConstantFoldedExportsAreReported) {
  onnx::ModelProto m = model();
  f32_init(m, "onnx::MatMul_611", {3, 5});
  node(m, "MatMul", {"x", "onnx::MatMul_611"}, {"y"});
  output(m, "y");
  OnnxImportResult r = import(m);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("onnx__MatMul_611"), std::string::npos) << r.warnings[0];
  EXPECT_NE(r.warnings[0].find("do_constant_folding=False"), std::string::npos) << r.warnings[0];
}


// The converters onto compositions of IR ops, against the formulas computed here.
TEST(OnnxImportConverters, LossesAndActivations) {
  const std::vector<float> xv = {-2.5f, 0.5f, 3.0f, 1.0f, -0.25f, 40.0f};
  const Tensor x = Tensor::from_vector<float>(xv, {2, 3});
  const std::vector<int64_t> labels = {2, 0};
  auto run = [&](const std::string& op, std::function<void(onnx::NodeProto*)> attrs = {}) {
    onnx::ModelProto m = model({2, 3});
    i64_init(m, "labels", labels);
    const bool loss = op.find("Loss") != std::string::npos;
    onnx::NodeProto* n = node(m, op, loss ? std::vector<std::string>{"x", "labels"} : std::vector<std::string>{"x"}, {"y"});
    if (attrs) attrs(n);
    output(m, "y");
    OnnxImportResult r = import(m);
    return sharding::testing::run_single(r.graph, r.weights, {{"x", x}})[0].to_doubles();
  };
  const std::vector<double> leaky = run("LeakyRelu", [](onnx::NodeProto* n) {
    auto* a = n->add_attribute();
    a->set_name("alpha");
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(0.2f);
  });
  const std::vector<double> softplus = run("Softplus");
  for (size_t i = 0; i < xv.size(); ++i) {
    const double v = xv[i];
    EXPECT_NEAR(leaky[i], v > 0 ? v : double(0.2f) * v, 1e-6) << i;
    EXPECT_NEAR(softplus[i], std::max(v, 0.0) + std::log1p(std::exp(-std::abs(v))), 1e-5) << i;
  }
  // Cross entropy over rows, and NLL of the scores read as log-probabilities.
  double ce = 0, nll = 0;
  for (size_t r = 0; r < 2; ++r) {
    double mx = -1e30, se = 0;
    for (size_t c = 0; c < 3; ++c) mx = std::max(mx, double(xv[r * 3 + c]));
    for (size_t c = 0; c < 3; ++c) se += std::exp(double(xv[r * 3 + c]) - mx);
    ce += (std::log(se) + mx - xv[r * 3 + size_t(labels[r])]) / 2;
    nll -= xv[r * 3 + size_t(labels[r])] / 2.0;
  }
  EXPECT_NEAR(run("SoftmaxCrossEntropyLoss")[0], ce, 1e-5);
  EXPECT_NEAR(run("NegativeLogLikelihoodLoss")[0], nll, 1e-6);
  const std::vector<double> summed = run("SoftmaxCrossEntropyLoss", [](onnx::NodeProto* n) {
    auto* a = n->add_attribute();
    a->set_name("reduction");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s("sum");
  });
  EXPECT_NEAR(summed[0], 2 * ce, 2e-5);
  expect_error<ValueError>([&] {
    run("SoftmaxCrossEntropyLoss", [](onnx::NodeProto* n) {
      auto* a = n->add_attribute();
      a->set_name("ignore_index");
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(-100);
    });
  }, {"node 'n0' (SoftmaxCrossEntropyLoss", "ignore_index is not supported"});
}

}  // namespace
}  // namespace dt::io
