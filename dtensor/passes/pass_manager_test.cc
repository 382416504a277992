#include "dtensor/passes/pass_manager.h"

#include <gtest/gtest.h>

#include <sstream>

#include "dtensor/core/error.h"
#include "dtensor/ir/parser.h"
#include "tests/support/error_text.h"

namespace dt::passes {
namespace {

const char* kTwoGathers = R"(graph g {
  group tp = [0, 1]
  input %a : f32[2, 3]
  input %b : f32[4]
  %ag0 = all_gather_into_tensor(%a) {group = tp} : f32[4, 3]
  %ag1 = all_gather_into_tensor(%b) {group = tp} : f32[8]
  %w0 = wait_tensor(%ag0) : f32[4, 3]
  %w1 = wait_tensor(%ag1) : f32[8]
  return %w0, %w1
}
)";

TEST(PassManager, ParsesPipelines) {
  EXPECT_EQ(parse_pipeline("none").size(), 0u);
  EXPECT_EQ(parse_pipeline("default").size(), default_pipeline().size());
  auto p = parse_pipeline("cse, dce,bucket-all-gather");
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0]->name(), "cse");
  EXPECT_EQ(p[2]->name(), "bucket-all-gather");
  for (const PassInfo& info : registered_passes()) {
    EXPECT_FALSE(info.summary.empty());
    EXPECT_EQ(parse_pipeline(info.name).at(0)->name(), info.name);
  }
}

TEST(PassManager, RejectsUnknownPassesWithTheKnownList) {
  try {
    parse_pipeline("cse,bucketing");
    FAIL() << "no error";
  } catch (const ValueError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("unknown pass 'bucketing'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("bucket-all-gather"), std::string::npos) << msg;
  }
  EXPECT_THROW(parse_pipeline("cse,,dce"), ValueError);
  EXPECT_THROW(parse_pipeline(""), ValueError);
}

TEST(PassManager, ParsesBucketCaps) {
  EXPECT_EQ(parse_bucket_caps("1,4"), (std::vector<double>{1.0, 4.0}));
  EXPECT_EQ(parse_bucket_caps("0.5"), (std::vector<double>{0.5}));
  EXPECT_THROW(parse_bucket_caps("1,x"), ValueError);
  EXPECT_THROW(parse_bucket_caps("0"), ValueError);
  EXPECT_THROW(parse_bucket_caps(""), ValueError);
}

TEST(PassManager, PrintsAfterEveryPass) {
  ir::Graph g = ir::parse(kTwoGathers);
  PassManager pm;
  pm.add(parse_pipeline("bucket-all-gather,dce"));
  std::ostringstream out;
  pm.enable_print_after_all(out);
  auto timings = pm.run(g);
  ASSERT_EQ(timings.size(), 2u);
  EXPECT_TRUE(timings[0].changed);
  EXPECT_FALSE(timings[1].changed);
  std::string text = out.str();
  EXPECT_NE(text.find("// -----// IR after bucket-all-gather //----- //"), std::string::npos);
  EXPECT_NE(text.find("// -----// IR after dce //----- //"), std::string::npos);
  EXPECT_NE(text.find("bucket_copy_in(%a, %b)"), std::string::npos) << text;
}

// A pass that breaks the IR (drops every wait): the verify hook names it.
bool drop_waits(ir::Graph& g) {
  for (size_t i = g.nodes().size(); i-- > 0;)
    if (g.nodes()[i]->op == ir::OpKind::wait_tensor) {
      g.replace_all_uses(g.nodes()[i]->result(), g.nodes()[i]->operands[0]);
      g.erase(i);
    }
  return true;
}

// What a pass manager running `pass` alone on g throws as InternalError, or "no error".
std::string pipeline_error(ir::Graph& g, PassPtr pass) {
  PassManager pm;
  pm.add(std::move(pass));
  return test::error_text<InternalError>([&] { pm.run(g); });
}

TEST(PassManager, VerifyHookNamesTheBrokenPass) {
  ir::Graph g = ir::parse(kTwoGathers);
  const std::string error = pipeline_error(g, make_pass("breaker", "drops every wait", drop_waits));
  EXPECT_NE(error.find("IR after pass breaker is invalid"), std::string::npos) << error;
}

// A pass that leaves shapes inference refuses: the ShapeError the verifier meets is still the
// pass's bug, reported as InternalError (exit code 3 in the CLI), with the located message.
bool misshape_weight(ir::Graph& g) {
  g.params()[0]->type.shape = {3, 5};
  return true;
}

TEST(PassManager, VerifyHookBlamesThePassForAnInferenceError) {
  ir::Graph g = ir::parse("graph g {\n  input %x : f32[8, 64]\n  param %w : f32[64, 32]\n"
                          "  %y = matmul(%x, %w) : f32[8, 32]\n  return %y\n}\n",
                          "g.dt");
  EXPECT_EQ(pipeline_error(g, make_pass("shape-breaker", "gives the weight a wrong shape", misshape_weight)),
            "IR after pass shape-breaker is invalid (a bug in that pass): g.dt:4:8: matmul inner dims differ: f32[8, "
            "64] x f32[3, 5]");
}

}  // namespace
}  // namespace dt::passes
