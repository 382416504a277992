// One test per parse or verification error: each checks the file:line:col and the message.
#include <gtest/gtest.h>

#include <type_traits>

#include "dtensor/core/error.h"
#include "dtensor/ir/parser.h"

namespace dt::ir {
namespace {

// Returns the message of the error of type E (a ParseError, or the type an op's inference threw)
// that parsing `body` (wrapped in a graph with inputs %x f32[8, 64] and %w f32[256, 64]) throws,
// or "no error".
template <typename E = ParseError>
std::string error_of(const std::string& body) {
  std::string text = "graph t {\n  input %x : f32[8, 64]\n  param %w : f32[256, 64]\n" + body + "}\n";
  try {
    parse(text, "t.dt");
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "no error";
}

// Line 4 is the first line of `body`.
TEST(ParseErrors, UnknownOp) {
  EXPECT_EQ(error_of("  %y = lnear(%x, %w) : f32[8, 256]\n  return %y\n"), "t.dt:4:8: unknown op 'lnear'");
}

TEST(ParseErrors, WrongArity) {
  EXPECT_EQ(error_of("  %y = linear(%x) : f32[8, 256]\n  return %y\n"),
            "t.dt:4:8: linear expects 2 to 3 operands (x, weight, bias?), got 1");
  EXPECT_EQ(error_of("  %y = relu(%x, %x) : f32[8, 64]\n  return %y\n"),
            "t.dt:4:8: relu expects 1 operands (x), got 2");
  EXPECT_EQ(error_of("  %y = cat() : f32[8, 64]\n  return %y\n"),
            "t.dt:4:8: cat expects at least 1 operands (xs...), got 0");
}

TEST(ParseErrors, UndefinedValue) {
  EXPECT_EQ(error_of("  %y = linear(%x, %w2) : f32[8, 256]\n  return %y\n"), "t.dt:4:19: undefined value %w2");
  EXPECT_EQ(error_of("  %y = relu(%x) : f32[8, 64]\n  return %z\n"), "t.dt:5:10: undefined value %z");
}

TEST(ParseErrors, UseBeforeDefinitionIsUndefined) {
  EXPECT_EQ(error_of("  %y = relu(%z) : f32[8, 64]\n  %z = relu(%x) : f32[8, 64]\n  return %y\n"),
            "t.dt:4:13: undefined value %z");
}

TEST(ParseErrors, RedefinedValue) {
  EXPECT_EQ(error_of("  %x = relu(%x) : f32[8, 64]\n  return %x\n"), "t.dt:4:3: value %x is already defined at line 2");
  EXPECT_EQ(error_of("  %a, %a = split(%x) {split_size = 4} : f32[4, 64], f32[4, 64]\n  return %a\n"),
            "t.dt:4:7: value %a is already defined at line 4");
  EXPECT_EQ(error_of("  input %w : f32[1]\n  return %x\n"), "t.dt:4:9: value %w is already defined at line 3");
}

TEST(ParseErrors, UnknownAttribute) {
  EXPECT_EQ(error_of("  %y = relu(%x) {alpha = 1} : f32[8, 64]\n  return %y\n"),
            "t.dt:4:18: relu has no attribute 'alpha' (it takes none)");
  EXPECT_EQ(error_of("  %y = softmax(%x) {axis = 1} : f32[8, 64]\n  return %y\n"),
            "t.dt:4:21: softmax has no attribute 'axis' (expected one of dim)");
}

TEST(ParseErrors, AttributeOfTheWrongKind) {
  EXPECT_EQ(error_of("  %y = softmax(%x) {dim = 1.5} : f32[8, 64]\n  return %y\n"),
            "t.dt:4:27: attribute dim of softmax expects an int, found number 1.5");
  EXPECT_EQ(error_of("  %y = gelu(%x) {approximate = tanh} : f32[8, 64]\n  return %y\n"),
            "t.dt:4:32: attribute approximate of gelu expects a string, found 'tanh'");
  EXPECT_EQ(error_of("  %y = view(%x) {shape = [8, x]} : f32[8, 64]\n  return %y\n"),
            "t.dt:4:30: attribute shape of view expects ints, found 'x'");
}

TEST(ParseErrors, MissingOrRepeatedAttribute) {
  EXPECT_EQ(error_of("  %y = softmax(%x) : f32[8, 64]\n  return %y\n"), "t.dt:4:8: softmax needs attribute dim");
  EXPECT_EQ(error_of("  %y = softmax(%x) {dim = 1, dim = 0} : f32[8, 64]\n  return %y\n"),
            "t.dt:4:30: attribute dim is given twice");
}

TEST(ParseErrors, BadAttributeValueFromInference) {
  EXPECT_EQ(error_of<ValueError>("  %y = gelu(%x) {approximate = \"fast\"} : f32[8, 64]\n  return %y\n"),
            "t.dt:4:8: gelu approximate must be \"none\" or \"tanh\", got \"fast\"");
  EXPECT_EQ(error_of<DimError>("  %y = softmax(%x) {dim = 2} : f32[8, 64]\n  return %y\n"),
            "t.dt:4:8: dim 2 out of range for tensor of rank 2");
}

// The location is structured too: file, line and column as fields, the message without them.
TEST(ParseErrors, LocationIsCarriedAsFields) {
  std::string text = "graph t {\n  input %x : f32[8, 64]\n  %y = nosuchop(%x) : f32[8, 64]\n  return %y\n}\n";
  try {
    parse(text, "t.dt");
    FAIL() << "no error";
  } catch (const ParseError& e) {
    EXPECT_EQ(e.file(), "t.dt");
    EXPECT_EQ(e.line(), 3);
    EXPECT_EQ(e.column(), 8);
    EXPECT_EQ(e.message(), "unknown op 'nosuchop'");
    EXPECT_EQ(std::string(e.what()), "t.dt:3:8: unknown op 'nosuchop'");
  }
}

// An error of an op's inference keeps its type (ShapeError here, not ParseError): the verifier
// adds the node's location to the same exception, as fields and in what().
TEST(ParseErrors, InferenceErrorKeepsItsTypeAndGainsTheLocation) {
  std::string text = "graph t {\n  input %x : f32[8, 64]\n  param %w : f32[256, 64]\n  %y = matmul(%x, %w) : f32[8, 64]\n"
                     "  return %y\n}\n";
  try {
    parse(text, "t.dt");
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_EQ(e.file(), "t.dt");
    EXPECT_EQ(e.line(), 4);
    EXPECT_EQ(e.column(), 8);
    EXPECT_EQ(e.message(), "matmul inner dims differ: f32[8, 64] x f32[256, 64]");
    EXPECT_STREQ(e.what(), "t.dt:4:8: matmul inner dims differ: f32[8, 64] x f32[256, 64]");
  } catch (const std::exception& e) {
    FAIL() << "wrong exception type: " << e.what();
  }
  // A location, once given, is not replaced by an outer one.
  ShapeError e("bad");
  e.locate("a.dt", 3, 4);
  e.locate("b.dt", 5, 6, "graph g: ");
  EXPECT_STREQ(e.what(), "a.dt:3:4: bad");
}

// Internal errors are not user errors: a handler of dt::Error (a cost search, the CLI's exit code
// 2) cannot catch a failed DT_CHECK.
static_assert(!std::is_base_of_v<Error, InternalError>);
TEST(Errors, InternalErrorIsNotCaughtAsAUserError) {
  bool user = false, internal = false;
  try {
    try {
      DT_CHECK(1 + 1 == 3) << "arithmetic";
    } catch (const Error&) {
      user = true;
    }
  } catch (const InternalError& e) {
    internal = true;
    EXPECT_NE(std::string(e.what()).find("check failed: 1 + 1 == 3 arithmetic"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(user);
  EXPECT_TRUE(internal);
}

TEST(ParseErrors, ShapeMismatchWithInference) {
  EXPECT_EQ(error_of("  %y = linear(%x, %w) : f32[8, 255]\n  return %y\n"),
            "t.dt:4:25: type of %y is declared f32[8, 255] but linear infers f32[8, 256]");
}

TEST(ParseErrors, DtypeMismatchWithInference) {
  EXPECT_EQ(error_of("  %y = relu(%x) : bf16[8, 64]\n  return %y\n"),
            "t.dt:4:19: type of %y is declared bf16[8, 64] but relu infers f32[8, 64]");
}

TEST(ParseErrors, OperandShapesThatDoNotAgree) {
  EXPECT_EQ(error_of<ShapeError>("  %y = matmul(%x, %w) : f32[8, 64]\n  return %y\n"),
            "t.dt:4:8: matmul inner dims differ: f32[8, 64] x f32[256, 64]");
  EXPECT_EQ(error_of<ShapeError>("  %y = add(%x, %w) : f32[8, 64]\n  return %y\n"),
            "t.dt:4:8: shapes [8, 64] and [256, 64] do not broadcast (dim 0: 8 vs 256)");
}

TEST(ParseErrors, AttentionHeadsMasksAndDtypes) {
  const std::string qkv = "  %q = view(%x) {shape = [1, 8, 8, 8]} : f32[1, 8, 8, 8]\n"
                          "  %ks = slice(%w) {dim = 0, end = 3} : f32[3, 64]\n"
                          "  %k = view(%ks) {shape = [1, 3, 8, 8]} : f32[1, 3, 8, 8]\n";
  const std::string tail = "  return %y\n";
  EXPECT_EQ(error_of<ShapeError>(qkv + "  %y = scaled_dot_product_attention(%q, %x, %x) : f32[1, 8, 8, 8]\n" + tail),
            "t.dt:7:8: scaled_dot_product_attention shapes do not agree: q [1, 8, 8, 8], k [8, 64], v [8, 64]");
  EXPECT_EQ(error_of<ShapeError>(qkv + "  %y = scaled_dot_product_attention(%q, %k, %k) : f32[1, 8, 8, 8]\n" + tail),
            "t.dt:7:8: scaled_dot_product_attention: k/v heads 3 do not divide q heads 8 (grouped-query attention "
            "needs Hq a multiple of Hkv): q [1, 8, 8, 8], k [1, 3, 8, 8], v [1, 3, 8, 8]");
  EXPECT_EQ(error_of<ShapeError>(qkv + "  %y = scaled_dot_product_attention(%q, %q, %q, %x) : f32[1, 8, 8, 8]\n" + tail),
            "t.dt:7:8: scaled_dot_product_attention: mask [8, 64] does not broadcast to the scores [1, 8, 8, 8] "
            "(q's leading dims, then [S, Sk])");
  EXPECT_EQ(error_of<DTypeError>(qkv + "  %m = cast(%q) {dtype = i64} : i64[1, 8, 8, 8]\n"
                           "  %y = scaled_dot_product_attention(%q, %q, %q, %m) : f32[1, 8, 8, 8]\n" + tail),
            "t.dt:8:8: scaled_dot_product_attention: mask must be bool (true = keep) or q's dtype f32, got i64[1, 8, 8, 8]");
  EXPECT_EQ(error_of<DTypeError>(qkv + "  %qd = cast(%q) {dtype = f64} : f64[1, 8, 8, 8]\n"
                           "  %y = scaled_dot_product_attention(%qd, %q, %q) : f64[1, 8, 8, 8]\n" + tail),
            "t.dt:8:8: scaled_dot_product_attention: q, k and v must have one dtype, got q f64[1, 8, 8, 8], k f32[1, 8, 8, 8]");
}

TEST(ParseErrors, WrongNumberOfResultTypes) {
  EXPECT_EQ(error_of("  %a, %b = split(%x) {split_size = 4} : f32[4, 64]\n  return %a\n"),
            "t.dt:4:41: expected 2 result types, found 1");
  EXPECT_EQ(error_of("  %a = split(%x) {split_size = 4} : f32[4, 64]\n  return %a\n"),
            "t.dt:4:8: split declares 1 results but infers 2");
}

TEST(ParseErrors, UndeclaredGroup) {
  EXPECT_EQ(error_of("  %y = all_reduce(%x) {group = tp} : f32[8, 64]\n  %z = wait_tensor(%y) : f32[8, 64]\n  return %z\n"),
            "t.dt:4:32: undeclared group tp (declare it with `group tp = [...]`)");
}

TEST(ParseErrors, BadGroupDeclaration) {
  EXPECT_EQ(error_of("  group tp = [0, 1, 1]\n  return %x\n"), "t.dt:4:21: rank 1 appears twice in group tp");
  EXPECT_EQ(error_of("  group tp = []\n  return %x\n"), "t.dt:4:9: group tp has no ranks");
  EXPECT_EQ(error_of("  group tp = [0]\n  group tp = [1]\n  return %x\n"), "t.dt:5:9: group tp is already declared");
}

TEST(ParseErrors, UnknownReduceOp) {
  EXPECT_EQ(error_of("  group tp = [0]\n  %y = all_reduce(%x) {group = tp, op = prod} : f32[8, 64]\n  return %y\n"),
            "t.dt:5:41: unknown reduce op 'prod' (expected sum, avg, max or min)");
}

TEST(ParseErrors, PointToPointPeersTagsAndShapes) {
  const std::string g = "  group pp = [0, 1]\n";
  EXPECT_EQ(error_of<ValueError>(g + "  %s = send(%x) {group = pp, peer = 2} : f32[8, 64]\n  %w2 = wait_tensor(%s) : f32[8, 64]\n  return %x\n"),
            "t.dt:5:8: send peer 2 out of range for group size 2");
  EXPECT_EQ(error_of<ValueError>(g + "  %s = send(%x) {group = pp, peer = 1, tag = -1} : f32[8, 64]\n  %w2 = wait_tensor(%s) : f32[8, 64]\n  return %x\n"),
            "t.dt:5:8: send tag -1 is negative");
  EXPECT_EQ(error_of<ValueError>(g + "  %r = recv() {group = pp, peer = -1, shape = [2]} : f32[2]\n  %w2 = wait_tensor(%r) : f32[2]\n  return %w2\n"),
            "t.dt:5:8: recv peer -1 out of range for group size 2");
  EXPECT_EQ(error_of<ShapeError>(g + "  %r = recv() {group = pp, peer = 1, shape = [2, -3]} : f32[2]\n  %w2 = wait_tensor(%r) : f32[2]\n  return %w2\n"),
            "t.dt:5:8: recv shape [2, -3] has a negative size");
  EXPECT_EQ(error_of(g + "  %r = recv() {group = pp, peer = 1, shape = [2], dtype = f64} : f32[2]\n  %w2 = wait_tensor(%r) : f32[2]\n  return %w2\n"),
            "t.dt:5:66: type of %r is declared f32[2] but recv infers f64[2]");
  EXPECT_EQ(error_of(g + "  %s = send(%x) {group = pp, peer = 1} : f32[8, 64]\n  return %x\n"),
            "t.dt:5:8: result %s of send has no wait_tensor (every collective needs exactly one)");
}

TEST(ParseErrors, CollectiveWithoutWait) {
  EXPECT_EQ(error_of("  group tp = [0, 1]\n  %y = all_reduce(%x) {group = tp} : f32[8, 64]\n  return %y\n"),
            "t.dt:5:8: result %y of all_reduce has no wait_tensor (every collective needs exactly one)");
}

TEST(ParseErrors, CollectiveReadBeforeWait) {
  EXPECT_EQ(error_of("  group tp = [0, 1]\n  %y = all_reduce(%x) {group = tp} : f32[8, 64]\n"
                     "  %z = relu(%y) : f32[8, 64]\n  %w2 = wait_tensor(%y) : f32[8, 64]\n  return %z\n"),
            "t.dt:6:8: relu reads %y of all_reduce before its wait_tensor");
}

TEST(ParseErrors, CollectiveWithTwoWaits) {
  EXPECT_EQ(error_of("  group tp = [0, 1]\n  %y = all_reduce(%x) {group = tp} : f32[8, 64]\n"
                     "  %a = wait_tensor(%y) : f32[8, 64]\n  %b = wait_tensor(%y) : f32[8, 64]\n  return %a\n"),
            "t.dt:7:8: %y already has a wait_tensor (exactly one is allowed)");
}

TEST(ParseErrors, WaitOnANonCollective) {
  EXPECT_EQ(error_of<ValueError>("  %y = wait_tensor(%x) : f32[8, 64]\n  return %y\n"),
            "t.dt:4:8: wait_tensor expects the result of a collective, got %x");
}

TEST(ParseErrors, SyntaxErrorsSayWhatWasExpected) {
  EXPECT_EQ(error_of("  %y = relu(%x) f32[8, 64]\n  return %y\n"), "t.dt:4:17: expected ':' before the result types, found 'f32'");
  EXPECT_EQ(error_of("  %y = relu(%x : f32[8, 64]\n  return %y\n"), "t.dt:4:16: expected ',' or ')' after an operand, found ':'");
  EXPECT_EQ(error_of("  %y = relu(%x) : f32[8, 64\n  return %y\n"), "t.dt:5:3: expected ',' or ']' in the shape, found 'return'");
  EXPECT_EQ(error_of("  %y = relu(%x) : f33[8, 64]\n  return %y\n"),
            "t.dt:4:19: unknown dtype 'f33' (expected f32, f64, bf16, f16, i64, i32 or bool)");
  EXPECT_EQ(error_of("  %y = relu(%x) : f32[8, -64]\n  return %y\n"), "t.dt:4:26: dim size -64 out of range [0, 1099511627776]");
  EXPECT_EQ(error_of("  relu(%x)\n"), "t.dt:4:3: expected 'group', 'input', 'param', 'const', a node or 'return', found 'relu'");
  EXPECT_EQ(error_of("  return %x\n  %y = relu(%x) : f32[8, 64]\n"), "t.dt:5:3: expected '}' after return, found %y");
  EXPECT_EQ(error_of("  %y = relu(%x) : f32[8, 64] $\n"), "t.dt:4:30: unexpected character '$'");
  EXPECT_EQ(error_of("  %y = gelu(%x) {approximate = \"tanh} : f32[8, 64]\n  return %y\n"), "t.dt:4:32: unterminated string");
}

// Issue 13: a shape with no elements whose strides overflow int64 was accepted.
TEST(ParseErrors, ShapesWhoseStridesOverflowAreRefusedWhateverTheElementCount) {
  EXPECT_EQ(error_of("  param %z : f32[0, 1099511627776, 1099511627776, 1099511627776]\n  return %x\n"),
            "t.dt:4:36: shape has more than 1125899906842624 elements (counting size 0 as 1)");
  EXPECT_EQ(error_of("  param %z : f32[0, 1099511627776]\n  return %x\n"), "no error");
}

TEST(ParseErrors, MissingGraphHeaderAndTrailingText) {
  try {
    parse("grap t {}", "h.dt");
    FAIL();
  } catch (const ParseError& e) {
    EXPECT_STREQ(e.what(), "h.dt:1:1: expected 'graph', found 'grap'");
  }
  try {
    parse("graph t {\n  return\n}\nextra", "h.dt");
    FAIL();
  } catch (const ParseError& e) {
    EXPECT_STREQ(e.what(), "h.dt:4:1: expected end of file after '}', found 'extra'");
  }
  try {
    parse("graph t {\n  input %x : f32[2]\n", "h.dt");
    FAIL();
  } catch (const ParseError& e) {
    EXPECT_STREQ(e.what(), "h.dt:3:1: expected 'group', 'input', 'param', 'const', a node or 'return', found end of file");
  }
}

// The collective variants check their operands like the single collectives.
TEST(ParseErrors, CollectiveVariants) {
  const std::string group = "  group g = [0, 1, 2]\n";
  EXPECT_EQ(error_of<ShapeError>(group + "  %a, %b = reduce_scatter_tensor_coalesced(%x, %w) {group = g} : f32[4, 64], f32[128, 64]\n"
                             "  return %a\n"),
            "t.dt:5:12: reduce_scatter_tensor_coalesced input f32[8, 64] dim 0 is not divisible by group size 3");
  EXPECT_EQ(error_of<ShapeError>(group + "  %o = all_gather_into_tensor_out(%x, %w) {group = g} : f32[24, 64]\n  return %o\n"),
            "t.dt:5:8: all_gather_into_tensor_out: out is f32[256, 64] but gathering f32[8, 64] gives f32[24, 64]");
  EXPECT_EQ(error_of(group + "  %a = all_reduce_coalesced() {group = g} : f32[8, 64]\n  return %a\n"),
            "t.dt:5:8: all_reduce_coalesced expects at least 1 operands (x...), got 0");
}

TEST(ParseErrors, PositionIndexedAndLogicalOpsSayWhatIsWrong) {
  // A dt::Error (the inference errors keep their ShapeError/DTypeError/DimError type) whose message
  // holds `want`; error_of prefixes any other exception with "wrong exception type".
  auto has = [](const std::string& got, const std::string& want) {
    return got.rfind("wrong exception type", 0) != 0 && got.find(want) != std::string::npos;
  };
  std::string e = error_of<Error>("  %y = gather(%w, %x) : f32[8, 64, 64]\n  return %y\n");
  EXPECT_TRUE(has(e, "t.dt:4:8: gather expects i64 or i32 indices, got f32[8, 64]")) << e;
  e = error_of<Error>("  %y = argmax(%x) {dim = 2} : i64[8]\n  return %y\n");
  EXPECT_TRUE(has(e, "dim 2 out of range")) << e;
  e = error_of<Error>("  %e = slice(%x) {dim = 1, start = 0, end = 0} : f32[8, 0]\n  %y = argmin(%e) {dim = 1} : i64[8]\n  return %y\n");
  EXPECT_TRUE(has(e, "argmin over dim 1 of f32[8, 0], which is empty")) << e;
  e = error_of<Error>("  %s = sum(%x) {dims = [1]} : f32[8]\n  %y = triu(%s) : f32[8]\n  return %y\n");
  EXPECT_TRUE(has(e, "triu expects operand x of rank >= 2, got f32[8]")) << e;
  e = error_of<Error>("  %y = logical_and(%x, %x) : bool[8, 64]\n  return %y\n");
  EXPECT_TRUE(has(e, "logical_and expects a bool a, got f32[8, 64]")) << e;
  e = error_of<Error>("  %b = gt(%x, %x) : bool[8, 64]\n  %y = cumsum(%b) : bool[8, 64]\n  return %y\n");
  EXPECT_TRUE(has(e, "cumsum expects a numeric operand, got bool[8, 64]")) << e;
  e = error_of<Error>("  %i = arange() {end = 8} : i64[8]\n"
               "  %y = gather_backward(%x, %i) {shape = [1099511627776, 2048]} : f32[1, 64]\n  return %y\n");
  EXPECT_TRUE(has(e, "gather_backward shape [1099511627776, 2048] is too large")) << e;
  e = error_of<Error>("  %i = arange() {end = 4} : i64[4]\n  %y = gather_backward(%x, %i) {shape = [9, 64]} : f32[9, 64]\n  return %y\n");
  EXPECT_TRUE(has(e, "gather_backward grad f32[8, 64] is not the gather [4, 64] of [9, 64] on dim 0")) << e;
}

}  // namespace
}  // namespace dt::ir

namespace dt::ir {
namespace {

// The ops autodiff writes check their shape attributes as the parser checks declared types (their
// inference throws ShapeError or ValueError: any located dt::Error).
TEST(ParseErrors, GradientOpsRefuseHugeOrBadShapes) {
  auto has = [](const std::string& got, const std::string& want) { return got.find(want) != std::string::npos; };
  std::string e = error_of<Error>("  %f = full() {shape = [1099511627776, 1099511627776]} : f32[1, 1]\n  return %f\n");
  EXPECT_TRUE(has(e, "full shape [1099511627776, 1099511627776] is too large")) << e;
  e = error_of<Error>("  %f = full() {shape = [-1]} : f32[1]\n  return %f\n");
  EXPECT_TRUE(has(e, "full shape [-1] has a negative size")) << e;
  e = error_of<Error>("  %e = expand(%x) {shape = [3, 8, 64]} : f32[3, 8, 64]\n  %b = expand(%x) {shape = [4, 64]} : f32[4, 64]\n  return %e\n");
  EXPECT_TRUE(has(e, "expand of f32[8, 64] to [4, 64]: dim 0 of size 8 cannot become 4")) << e;
  e = error_of<Error>("  %s = slice_backward(%x) {shape = [8, 1099511627776, 1099511627776], dim = 1} : f32[8, 1, 1]\n  return %s\n");
  EXPECT_TRUE(has(e, "slice_backward shape")) << e;
  e = error_of<Error>("  %g = relu_backward(%w, %x) : f32[8, 64]\n  return %g\n");
  EXPECT_TRUE(has(e, "relu_backward grad f32[256, 64] does not match x f32[8, 64]")) << e;
}

}  // namespace
}  // namespace dt::ir
