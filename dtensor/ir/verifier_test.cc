// Verifier checks on graphs built in code (messages name the graph and node index).
#include <gtest/gtest.h>

#include "dtensor/core/error.h"
#include "dtensor/ir/builder.h"
#include "dtensor/ir/verifier.h"
#include "tests/support/error_text.h"

namespace dt::ir {
namespace {

std::string verify_error(const Graph& g) {
  try {
    verify(g);
  } catch (const ParseError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Verifier, AcceptsAWellFormedGraph) {
  Graph g("ok");
  Builder b(g);
  b.group("tp", {0, 1});
  Value* x = b.input("x", DType::f32, {4, 2});
  Value* r = b.wait_tensor(b.all_reduce(x, "tp"));
  b.outputs({b.relu(r)});
  EXPECT_EQ(verify_error(g), "no error");
}

TEST(Verifier, OperandUsedBeforeItsDefinition) {
  Graph g("order");
  Builder b(g);
  Value* x = b.input("x", DType::f32, {4});
  Value* r = b.relu(x);
  b.outputs({r});
  // A node inserted at the front that reads the relu's result breaks topological order.
  g.insert(0, OpKind::silu, {r}, {}, {r->type}, {"early"});
  EXPECT_EQ(verify_error(g), "graph order, node 0 (silu): operand %0 of silu is used before it is defined");
}

TEST(Verifier, ResultTypeDisagreesWithInference) {
  Graph g("types");
  Builder b(g);
  Value* x = b.input("x", DType::f32, {4});
  g.append(OpKind::relu, {x}, {}, {TensorType{DType::f32, {5}}}, {"bad"});
  EXPECT_EQ(verify_error(g), "graph types, node 0 (relu): type of %bad is declared f32[5] but relu infers f32[4]");
}

// y = matmul(x [4, 3], w [5, 2]): inner dims that differ.
Graph mismatched_matmul() {
  Graph g("mm");
  Builder b(g);
  Value* x = b.input("x", DType::f32, {4, 3});
  Value* w = b.input("w", DType::f32, {5, 2});
  g.append(OpKind::matmul, {x, w}, {}, {TensorType{DType::f32, {4, 2}}}, {"y"});
  return g;
}

// An error of the op's inference keeps its type; the verifier prefixes graph and node (a graph
// built in code has no line) and says nothing else: message() is inference's own text.
TEST(Verifier, InferenceErrorKeepsItsTypeAndGainsTheNode) {
  Graph g = mismatched_matmul();
  try {
    verify(g);
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "graph mm, node 0 (matmul): matmul inner dims differ: f32[4, 3] x f32[5, 2]");
    EXPECT_EQ(e.message(), "matmul inner dims differ: f32[4, 3] x f32[5, 2]");
    EXPECT_EQ(e.line(), 0);
    EXPECT_TRUE(e.located());
  }
}

// After a pass, a violation is the pass's bug: InternalError naming it, whatever was found.
TEST(Verifier, AfterAPassEveryViolationIsInternal) {
  auto after_pass = [](const Graph& graph) {
    return test::error_text<InternalError>([&] { verify(graph, {.after_pass = "p"}); });
  };
  EXPECT_EQ(after_pass(mismatched_matmul()),
            "IR after pass p is invalid (a bug in that pass): graph mm, node 0 (matmul): matmul inner dims differ: "
            "f32[4, 3] x f32[5, 2]");
  Graph h("types");
  Value* y = Builder(h).input("y", DType::f32, {4});
  h.append(OpKind::relu, {y}, {}, {TensorType{DType::f32, {5}}}, {"bad"});
  EXPECT_EQ(after_pass(h), "IR after pass p is invalid (a bug in that pass): graph types, node 0 (relu): type of %bad is "
                           "declared f32[5] but relu infers f32[4]");
}

TEST(Verifier, UndeclaredGroup) {
  Graph g("groups");
  Builder b(g);
  Value* x = b.input("x", DType::f32, {4});
  g.append(OpKind::all_reduce, {x}, {Attr(std::string("dp")), Attr(std::string("sum")), Attr(int64_t(-1))}, {x->type},
           {"ar"});
  EXPECT_EQ(verify_error(g), "graph groups, node 0 (all_reduce): all_reduce names undeclared group dp");
}

// A graph with group tp = [0, 1] and input %x : f32[4], for the checks of collectives and waits.
struct TpGraph {
  Graph g;
  Builder b{g};
  Value* x = nullptr;
  explicit TpGraph(std::string name) : g(std::move(name)) {
    b.group("tp", {0, 1});
    x = b.input("x", DType::f32, {4});
  }
};

TEST(Verifier, MissingAndDoubleWaits) {
  {
    TpGraph t("nowait");
    t.b.outputs({t.b.all_gather_into_tensor(t.x, "tp")});
    EXPECT_EQ(verify_error(t.g), "graph nowait, node 0 (all_gather_into_tensor): result %0 of all_gather_into_tensor has no "
                                 "wait_tensor (every collective needs exactly one)");
  }
  {
    TpGraph t("twowaits");
    Value* c = t.b.all_gather_into_tensor(t.x, "tp");
    t.b.wait_tensor(c);
    t.b.wait_tensor(c);
    EXPECT_EQ(verify_error(t.g), "graph twowaits, node 2 (wait_tensor): %0 already has a wait_tensor (exactly one is allowed)");
  }
}

TEST(Verifier, ReadAfterWaitIsAllowed) {
  TpGraph t("late");
  Value* c = t.b.all_reduce(t.x, "tp");
  Value* w = t.b.wait_tensor(c);
  t.b.outputs({t.b.add(c, w)});
  EXPECT_EQ(verify_error(t.g), "no error");
}

TEST(Verifier, WrongAttributeKindInBuiltNode) {
  Graph g("attrs");
  Builder b(g);
  Value* x = b.input("x", DType::f32, {4});
  g.append(OpKind::softmax, {x}, {Attr(1.5)}, {x->type});
  EXPECT_EQ(verify_error(g), "graph attrs, node 0 (softmax): softmax attribute dim must be of kind int");
}

}  // namespace
}  // namespace dt::ir
