// Parallel plans: parsing, resolution against a model, and clear errors naming the pattern.
#include <gtest/gtest.h>

#include "dtensor/core/error.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/sharding/parallel_plan.h"

namespace dt::sharding {
namespace {

// Returns the message of the ValueError thrown by resolving `json` on the gpt example.
std::string resolve_error(const std::string& json, const std::string& mesh = "2") {
  ir::Graph g = ir::build_gpt({.vocab = 32, .hidden = 16, .heads = 2, .layers = 1, .max_seq = 8, .batch = 1, .seq = 4});
  try {
    resolve_plan(ParallelPlan::parse(json, "bad.json"), g, DeviceMesh::parse(mesh));
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

TEST(ParallelPlan, UnknownModulePatternNamesThePattern) {
  std::string e = resolve_error(R"J({"modules": [{"pattern": "h.*.attn.qproj", "style": "colwise"}]})J");
  EXPECT_NE(e.find("bad.json"), std::string::npos) << e;
  EXPECT_NE(e.find("'h.*.attn.qproj' matches no module"), std::string::npos) << e;
}

TEST(ParallelPlan, StyleOnMissingMeshDimNamesThePattern) {
  std::string e = resolve_error(
      R"J({"mesh_dims": ["tp"], "modules": [{"pattern": "h.*.attn.q_proj", "style": "colwise", "mesh_dim": "tpp"}]})J");
  EXPECT_NE(e.find("'h.*.attn.q_proj' names mesh dim 'tpp' but the mesh dims are [tp]"), std::string::npos) << e;
  e = resolve_error(R"J({"mesh_dims": ["tp"], "modules": []})J", "2x2");
  EXPECT_NE(e.find("plan names 1 mesh dims but mesh 2x2 has 2"), std::string::npos) << e;
}

TEST(ParallelPlan, IncompatibleShapesNameThePattern) {
  std::string e = resolve_error(R"J({"modules": [{"pattern": "ln_f", "style": "colwise"}]})J");
  EXPECT_NE(e.find("'ln_f' (colwise) needs a 2-d weight but ln_f.weight is f32[16]"), std::string::npos) << e;
  e = resolve_error(R"J({"modules": [{"pattern": "h.0.ln_1", "style": "sequence", "dim": 5}]})J");
  EXPECT_NE(e.find("'h.0.ln_1' (sequence) shards dim 5"), std::string::npos) << e;
  e = resolve_error(R"J({"inputs": {"input": "S(2)"}})J");
  EXPECT_NE(e.find("shards dim 2 of a tensor of rank 2"), std::string::npos) << e;
}

TEST(ParallelPlan, MalformedPlansAreRefused) {
  EXPECT_THROW(ParallelPlan::parse("{", "x.json"), ValueError);
  EXPECT_THROW(ParallelPlan::parse(R"J({"modules": [{"pattern": "a", "style": "diagonal"}]})J"), ValueError);
  EXPECT_THROW(ParallelPlan::parse(R"J({"modulez": []})J"), ValueError);
  EXPECT_THROW(ParallelPlan::parse(R"J({"mesh_dims": ["dp", "tp"], "modules": [{"pattern": "a", "style": "fsdp"}]})J"),
               ValueError);
  EXPECT_NE(resolve_error(R"J({"inputs": {"ids": "S(0)"}})J").find("plan input 'ids' is not a data input"), std::string::npos);
}

TEST(ParallelPlan, ResolvesStylesToParameterPlacements) {
  ir::Graph g = ir::build_gpt({.vocab = 32, .hidden = 16, .heads = 2, .layers = 1, .max_seq = 8, .batch = 2, .seq = 4});
  ParallelPlan p = ParallelPlan::parse(R"J({"mesh_dims": ["dp", "tp"], "inputs": {"input": {"dp": "S(0)"}}, "modules": [
      {"pattern": "*", "style": "fsdp", "mesh_dim": "dp"},
      {"pattern": "h.*.attn.q_proj", "style": "colwise", "mesh_dim": "tp"},
      {"pattern": "h.*.attn.o_proj", "style": "rowwise", "mesh_dim": "tp"},
      {"pattern": "wte", "style": "colwise", "mesh_dim": "tp"}]})J");
  ResolvedPlan r = resolve_plan(p, g, DeviceMesh::parse("2x2"));
  auto at = [&](const char* name) { return placements_str(r.value_placements[size_t(g.find(name)->id)]); };
  // fsdp on dp over colwise on tp, both on dim 0: a strided shard (tp splits first), so the dp
  // gather rebuilds the tp shard (FSDP2 over TP).
  EXPECT_EQ(at("h.0.attn.q_proj.weight"), "SS(0),S(0)");
  EXPECT_EQ(at("h.0.attn.q_proj.bias"), "SS(0),S(0)");
  EXPECT_EQ(at("h.0.attn.o_proj.weight"), "S(0),S(1)");
  EXPECT_EQ(at("h.0.attn.o_proj.bias"), "S(0),R");
  EXPECT_EQ(at("wte.weight"), "S(0),S(1)");  // an embedding's colwise shards the hidden dim
  EXPECT_EQ(at("input"), "S(0),R");
  EXPECT_EQ(r.stored_only[size_t(g.find("wte.weight")->id)], 1u);  // fsdp on dp: gathered before use
  EXPECT_EQ(ParallelPlan::parse(p.to_json()).to_json(), p.to_json());
}

}  // namespace
}  // namespace dt::sharding

namespace dt::sharding {
namespace {

// Found by fuzzing (tests/fuzz/plan_json/huge-sequence-dim.json): a dim past int64 parses as a
// float whose conversion overflowed (undefined behaviour); it is a plan error now.
TEST(ParallelPlan, RefusesADimThatIsNotASmallInteger) {
  for (const char* dim : {"1e30", "333333333333333333333333333333", "1.5", "\"1\"", "18446744073709551615"}) {
    const std::string text = std::string(R"({"modules": [{"pattern": "ln_f", "style": "sequence", "dim": )") + dim + "}]}";
    EXPECT_THROW(ParallelPlan::parse(text, "p.json"), ValueError) << dim;
  }
  EXPECT_NO_THROW(ParallelPlan::parse(R"({"modules": [{"pattern": "ln_f", "style": "sequence", "dim": 1}]})"));
}

}  // namespace
}  // namespace dt::sharding
