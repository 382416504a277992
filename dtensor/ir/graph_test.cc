#include <gtest/gtest.h>

#include "dtensor/core/error.h"
#include "dtensor/ir/builder.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/ir/printer.h"
#include "dtensor/ir/verifier.h"

namespace dt::ir {
namespace {

TEST(OpRegistry, EveryOpIsRegisteredUnderItsName) {
  for (size_t i = 0; i < kNumOps; ++i) {
    const OpDef& def = op_def(OpKind(i));
    EXPECT_EQ(def.kind, OpKind(i));
    EXPECT_EQ(def.name(), kOpNames[i]);
    EXPECT_TRUE(def.infer && def.kernel) << kOpNames[i];
    ASSERT_TRUE(find_op(kOpNames[i]).has_value());
    EXPECT_EQ(*find_op(kOpNames[i]), OpKind(i));
  }
  EXPECT_FALSE(find_op("lnear").has_value());
}

TEST(OpRegistry, SchemasDescribeOperandsAndDefaults) {
  const OpDef& linear = op_def(OpKind::linear);
  EXPECT_EQ(linear.min_operands(), 2);
  EXPECT_EQ(linear.max_operands(), 3);
  EXPECT_EQ(linear.operand_signature(), "x, weight, bias?");
  EXPECT_EQ(op_def(OpKind::cat).max_operands(), -1);
  const OpDef& ln = op_def(OpKind::layer_norm);
  ASSERT_GE(ln.attr_index("eps"), 0);
  EXPECT_EQ(std::get<double>(*ln.attrs[size_t(ln.attr_index("eps"))].default_value), 1e-5);
  EXPECT_TRUE(op_def(OpKind::all_reduce).needs_wait);
  EXPECT_FALSE(op_def(OpKind::wait_tensor).needs_wait);
}

// The rule is registered with the op (no start-up install): relu's is there on first lookup, and
// the test-only replacement round-trips.
TEST(OpRegistry, ShardingRuleIsRegisteredWithItsOp) {
  const RuleFn relu = op_def(OpKind::relu).sharding_rule;
  ASSERT_NE(relu, nullptr);
  EXPECT_EQ(replace_sharding_rule_for_test(OpKind::relu, nullptr), relu);
  EXPECT_EQ(op_def(OpKind::relu).sharding_rule, nullptr);
  EXPECT_EQ(replace_sharding_rule_for_test(OpKind::relu, relu), nullptr);
  EXPECT_EQ(op_def(OpKind::relu).sharding_rule, relu);
}

TEST(Builder, RecordsNodesWithInferredTypes) {
  Graph g("t");
  Builder b(g);
  Value* x = b.input("x", DType::f32, {8, 64});
  Value* w = b.param("fc.weight", DType::f32, {256, 64});
  Value* bias = b.param("fc.bias", DType::f32, {256});
  Value* h = b.relu(b.linear(x, w, bias));
  auto parts = b.split(h, 100, 1);
  b.outputs({h});
  ASSERT_EQ(g.nodes().size(), 3u);
  EXPECT_EQ(h->type, (TensorType{DType::f32, {8, 256}}));
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2]->type.shape, (Shape{8, 56}));
  EXPECT_EQ(g.nodes()[0]->op, OpKind::linear);
  EXPECT_EQ(h->producer, g.nodes()[1]);
  EXPECT_EQ(g.find("fc.weight"), w);
  EXPECT_NO_THROW(verify(g));
}

TEST(Builder, RejectsBadShapesWithoutChangingTheGraph) {
  Graph g("t");
  Builder b(g);
  Value* x = b.input("x", DType::f32, {8, 64});
  Value* w = b.param("w", DType::f32, {256, 63});
  EXPECT_THROW(b.linear(x, w), ShapeError);
  EXPECT_THROW(b.add(x, b.input("i", DType::i64, {8, 64})), DTypeError);
  EXPECT_THROW(b.softmax(x, 2), DimError);
  EXPECT_THROW(b.record(OpKind::softmax, {x}), ValueError);  // missing dim
  EXPECT_THROW(b.record(OpKind::relu, {x, x}), ValueError);  // arity
  EXPECT_TRUE(g.nodes().empty());
}

TEST(Builder, NamedResultsAndDuplicates) {
  Graph g("t");
  Builder b(g);
  Value* x = b.input("x", DType::f32, {2});
  Value* r = b.named("act").relu(x);
  EXPECT_EQ(r->name, "act");
  EXPECT_THROW(b.named("x").relu(x), ValueError);
  EXPECT_THROW(b.input("x", DType::f32, {2}), ValueError);
}

TEST(Graph, EditsKeepPointersValid) {
  Graph g("t");
  Builder b(g);
  Value* x = b.input("x", DType::f32, {4});
  Value* r = b.relu(x);
  Value* s = b.silu(r);
  b.outputs({s});
  // Insert a gelu between relu and silu and rewire silu to read it.
  Node* n = g.insert(1, OpKind::gelu, {r}, complete_attrs(OpKind::gelu, {}), {r->type}, {"mid"});
  g.nodes()[2]->operands[0] = n->result();
  EXPECT_NO_THROW(verify(g));
  g.replace_all_uses(s, r);
  EXPECT_EQ(g.outputs()[0], r);
  g.erase(2);  // silu now unused
  EXPECT_EQ(g.nodes().size(), 2u);
  EXPECT_EQ(g.find(s->name), nullptr);
  EXPECT_NO_THROW(verify(g));
}

// Returns "v<i>" (appended, not "v" + to_string: GCC 12 gives a false -Wrestrict for that).
std::string vname(int i) {
  std::string s(1, 'v');
  s.append(std::to_string(i));
  return s;
}

// Nodes and values live in the graph's arenas: thousands of appends (several arena chunks, no
// reserve), inserts, erases, a reorder and moving the graph must leave every pointer handed out
// valid and pointing at the same node or value.
TEST(Graph, ArenaKeepsPointersStableAcrossAppendsEditsAndMoves) {
  Graph g("t");
  Value* x = g.add_input("x", TensorType{DType::f32, {4}});
  std::vector<Node*> nodes;
  std::vector<Value*> results;
  Value* prev = x;
  for (int i = 0; i < 5000; ++i) {
    Node* n = nullptr;
    if (i % 2 == 0) {
      n = g.append(OpKind::relu, {prev}, {}, {prev->type}, {vname(i)});
    } else {
      std::vector<TensorType> types{prev->type};
      const std::string name = vname(i);
      const std::string_view names[] = {name};
      Value* const operands[] = {prev};
      n = g.append(NodeParts{.op = OpKind::relu,
                             .operands = operands,
                             .attrs = {},
                             .result_types = types,
                             .result_names = names,
                             .loc = {}});
    }
    nodes.push_back(n);
    results.push_back(n->result());
    prev = n->result();
  }
  // Insert a node at the front of the chain and erase another one in the middle.
  Node* head = g.insert(0, OpKind::gelu, {x}, complete_attrs(OpKind::gelu, {}), {x->type}, {"head"});
  nodes[0]->operands[0] = head->result();
  g.replace_all_uses(results[2500], results[2499]);
  g.erase(2501);  // nodes()[2501] is nodes[2500]: the insert shifted every index by one
  EXPECT_EQ(g.find("v2500"), nullptr);
  g.set_outputs({prev});
  EXPECT_NO_THROW(verify(g));

  Graph moved(std::move(g));
  ASSERT_EQ(moved.nodes().size(), 5000u);
  EXPECT_EQ(moved.nodes()[0], head);
  for (int i = 0; i < 5000; ++i) {
    if (i == 2500) continue;
    const size_t pos = size_t(i) + (i < 2500 ? 1 : 0);
    ASSERT_EQ(moved.nodes()[pos], nodes[size_t(i)]) << i;
    EXPECT_EQ(nodes[size_t(i)]->result(), results[size_t(i)]);
    EXPECT_EQ(results[size_t(i)]->producer, nodes[size_t(i)]);
    EXPECT_EQ(results[size_t(i)]->name, vname(i));
    EXPECT_EQ(moved.find(results[size_t(i)]->name), results[size_t(i)]);
    EXPECT_EQ(moved.values()[size_t(results[size_t(i)]->id)], results[size_t(i)]);
  }
  EXPECT_NO_THROW(verify(moved));

  // Reordering keeps the kept nodes' addresses and frees the dropped ones' names.
  std::vector<Node*> order(moved.nodes().begin(), moved.nodes().end() - 1);
  moved.set_outputs({order.back()->result()});
  moved.set_node_order(order);
  EXPECT_EQ(moved.nodes().back(), nodes[4998]);
  EXPECT_EQ(moved.find("v4999"), nullptr);
  EXPECT_EQ(moved.find("v4998"), results[4998]);
  EXPECT_NO_THROW(verify(moved));
  // Names freed by erase and reorder can be defined again.
  Node* again = moved.append(OpKind::relu, {results[4998]}, {}, {x->type}, {"v4999"});
  EXPECT_EQ(moved.find("v4999"), again->result());
}

TEST(Graph, AppendFromPartsNamesResultsAndRefusesTakenNames) {
  Graph g("t");
  Value* x = g.add_input("x", TensorType{DType::f32, {8, 6}});
  std::vector<TensorType> types{TensorType{DType::f32, {8, 3}}, TensorType{DType::f32, {8, 3}}};
  const std::string_view names[] = {"a", ""};  // "" takes a fresh numeric name
  Value* const operands[] = {x};
  Node* n = g.append(NodeParts{.op = OpKind::split,
                               .operands = operands,
                               .attrs = complete_attrs(OpKind::split, {{"split_size", int64_t(3)}, {"dim", int64_t(1)}}),
                               .result_types = types,
                               .result_names = names,
                               .loc = {3, 5}});
  ASSERT_EQ(n->results.size(), 2u);
  EXPECT_EQ(n->result(0)->name, "a");
  EXPECT_EQ(n->result(1)->name, "0");
  EXPECT_EQ(n->result(1)->type.shape, (Shape{8, 3}));
  EXPECT_EQ(n->result(1)->result_index, 1);
  EXPECT_EQ(n->result(0)->loc.line, 3);
  EXPECT_EQ(n->operands, (std::vector<Value*>{x}));
  g.set_outputs({n->result(0), n->result(1)});
  EXPECT_NO_THROW(verify(g));
  // A taken name throws and leaves the node list as it was.
  std::vector<TensorType> one{TensorType{DType::f32, {8, 6}}};
  const std::string_view taken[] = {"a"};
  EXPECT_THROW(g.append(NodeParts{.op = OpKind::relu,
                                  .operands = operands,
                                  .attrs = {},
                                  .result_types = one,
                                  .result_names = taken,
                                  .loc = {}}),
               ValueError);
  EXPECT_EQ(g.nodes().size(), 1u);
  EXPECT_NO_THROW(verify(g));
}

TEST(Graph, CloneIsIndependentAndPrintsTheSame) {
  Graph g = build_mlp({.hidden = 16, .layers = 3, .batch = 4});
  Graph c = g.clone();
  EXPECT_EQ(print(c), print(g));
  EXPECT_NO_THROW(verify(c));
  EXPECT_NE(c.nodes()[0], g.nodes()[0]);
  EXPECT_EQ(c.nodes()[0]->operands[0], c.inputs()[0]);
}

TEST(ExampleModels, MlpHasTheReferenceParameterNames) {
  Graph g = build_mlp({});
  ASSERT_EQ(g.params().size(), 12u);
  EXPECT_EQ(g.params()[0]->name, "layers.0.ln.weight");
  EXPECT_EQ(g.params()[2]->name, "layers.0.fc1.weight");
  EXPECT_EQ(g.params()[2]->type.shape, (Shape{256, 64}));
  EXPECT_EQ(g.params()[11]->name, "layers.1.fc2.bias");
  EXPECT_EQ(g.outputs()[0]->type.shape, (Shape{8, 64}));
  EXPECT_NO_THROW(verify(g));
}

TEST(ExampleModels, GptHasTheReferenceParameterNames) {
  Graph g = build_gpt({.loss = true});
  ASSERT_EQ(g.params().size(), 2u + 2 * 16 + 3);
  EXPECT_EQ(g.params()[0]->name, "wte.weight");
  EXPECT_EQ(g.params()[4]->name, "h.0.attn.q_proj.weight");
  EXPECT_EQ(g.params().back()->name, "lm_head.weight");
  EXPECT_EQ(g.outputs()[0]->type, (TensorType{DType::f32, {2, 32, 512}}));
  EXPECT_EQ(g.outputs()[1]->type, (TensorType{DType::f32, {}}));
  EXPECT_EQ(g.inputs()[1]->name, "target");
  EXPECT_NO_THROW(verify(g));
  EXPECT_THROW(build_gpt({.hidden = 100, .heads = 3}), ValueError);
}

TEST(ExampleModels, RandomWeightsAreSeededAndShaped) {
  Graph g = build_mlp({.hidden = 8, .layers = 1, .batch = 2});
  auto a = random_weights(g, 1), b = random_weights(g, 1), c = random_weights(g, 2);
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a.at("layers.0.fc1.weight").shape(), (Shape{32, 8}));
  EXPECT_EQ(a.at("layers.0.fc1.weight").to_doubles(), b.at("layers.0.fc1.weight").to_doubles());
  EXPECT_NE(a.at("layers.0.fc1.weight").to_doubles(), c.at("layers.0.fc1.weight").to_doubles());
  for (double v : a.at("layers.0.ln.weight").to_doubles()) EXPECT_NEAR(v, 1.0, 0.1 + 1e-9);
}

}  // namespace
}  // namespace dt::ir
