// One rank's compile at cluster scale (issue: cluster scale): orbits instead of every rank.
//
// 1. The orbit claim on uneven shards: on meshes whose dims do not divide the model's (vocabulary
//    509 or 97, sequence 30), every rank's program is its orbit representative's up to renaming, after
//    partitioning and after every default pass (run_rank_pipelines checks each program given
//    against its representative), and the orbits cover every rank once.
// 2. A divergent program is refused with the message of the check over every rank: on 2x2 and 4x4,
//    where every rank's program is available, the orbit check names the same group, collective
//    and ranks; on 64x128 where only one orbit diverges, it still names the group and the real
//    ranks.
// 3. The work of compiling rank 0 of a 64x128, a 256x256 and a 1-d 65,536 mesh is bounded by a
//    constant: the programs partitioned, transformed by the passes and read by the check are
//    counted, never timed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "dtensor/core/error.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/ir/op_registry.h"
#include "dtensor/passes/pass_manager.h"
#include "dtensor/passes/rank_consistency.h"
#include "dtensor/passes/rank_pipeline.h"
#include "dtensor/sharding/compiler.h"
#include "tests/support/error_text.h"

namespace dt::passes {
namespace {

using test::error_text;

const std::string kRoot = DTENSOR_SOURCE_DIR;

sharding::ParallelPlan plan_for(const std::string& style, int64_t ndim) {
  if (style == "fsdp_tp") return sharding::ParallelPlan::load(kRoot + "/examples/gpt_fsdp_tp.json");
  if (style == "fsdp") {
    sharding::ParallelPlan p;
    p.mesh_dims = {"dp"};
    p.modules.push_back({"*", sharding::Style::fsdp, "dp"});
    p.inputs["input"]["dp"] = Placement::shard(0);
    return p;
  }
  sharding::ParallelPlan p = sharding::ParallelPlan::load(kRoot + "/examples/" + style + ".json");
  if (ndim == 2) {
    p.mesh_dims = {"dp", "tp"};
    p.inputs["input"]["dp"] = Placement::shard(0);
  }
  return p;
}

sharding::CompileOptions with_orbits(std::vector<int> ranks = {}) {
  return {.ranks = std::move(ranks), .verify = true, .orbits = true, .adjust_plan = {}};
}

RankPipelineStats run_default(sharding::CompiledModel& c) {
  PassManager pm;
  pm.add(parse_pipeline("default"));
  return run_rank_pipelines(pm, c.programs, c.ranks, {.orbits = &c.orbits});
}

TEST(RankOrbits, EveryRankIsItsRepresentativeUpToRenamingOnUnevenShards) {
  struct Case {
    const char* mesh;
    const char* style;
  };
  const Case cases[] = {{"3", "gpt_tp_vocab"}, {"4", "gpt_sp"},      {"8", "fsdp"},     {"16", "fsdp"},
                        {"2x3", "gpt_tp"},     {"4x2", "fsdp_tp"},   {"4x4", "fsdp_tp"}, {"3x5", "gpt_tp_vocab"},
                        {"2x8", "gpt_sp"}};
  // Vocabulary 509: logits large enough to be gathered. 97: small enough that the planner turns each
  // rank's chunk of them into a partial value (the op's identity around it) and all_reduces once
  // over both mesh dims, whose lowering must not give each member its own shapes.
  for (const int64_t vocab : {509, 97}) {
    const ir::Graph g = ir::build_gpt({.vocab = vocab, .hidden = 128, .heads = 4, .layers = 1, .max_seq = 32, .batch = 6,
                                       .seq = 30});
    for (const Case& k : cases) {
      SCOPED_TRACE(std::string(k.mesh) + " " + k.style + " vocab " + std::to_string(vocab));
      const DeviceMesh mesh = DeviceMesh::parse(k.mesh);
      sharding::CompiledModel c = sharding::compile(g, plan_for(k.style, mesh.ndim()), mesh, with_orbits());
      ASSERT_EQ(c.programs.size(), size_t(mesh.size()));  // every rank: each is checked against its orbit
      EXPECT_EQ(c.orbits.total_ranks(), mesh.size());
      for (size_t o = 0; o < c.orbits.orbits.size(); ++o)
        EXPECT_EQ(c.orbits.orbit_of(c.orbits.orbits[o].representative), int(o));
      const RankPipelineStats st = run_default(c);
      EXPECT_EQ(st.programs_transformed, size_t(mesh.size()));
      EXPECT_LE(st.orbits, size_t(mesh.size()));
    }
  }
}

// Sets the reduce op of the k-th all_reduce on `group` in `program` to max (a program that would
// hang against its peers' sums); returns false when there is none.
bool diverge(ir::Graph& program, const std::string& group, int k) {
  for (ir::Node* n : program.nodes()) {
    if (ir::op_def(n->op).attr_index("op") < 0 || !ir::op_def(n->op).is_collective()) continue;
    if (n->attr_str("group") != group || k-- > 0) continue;
    n->attrs[size_t(ir::op_def(n->op).attr_index("op"))] = std::string("max");
    return true;
  }
  return false;
}

TEST(RankOrbits, DivergenceIsReportedAsByTheCheckOverEveryRank) {
  const ir::Graph g = ir::build_gpt({.vocab = 512, .hidden = 128, .heads = 4, .layers = 1, .max_seq = 32, .batch = 8,
                                     .seq = 32});
  for (const char* text : {"2x2", "4x4"}) {
    SCOPED_TRACE(text);
    const DeviceMesh mesh = DeviceMesh::parse(text);
    sharding::CompiledModel c = sharding::compile(g, plan_for("fsdp_tp", 2), mesh, with_orbits());
    // Every member of the last orbit diverges alike (its programs stay one orbit).
    const size_t last = c.orbits.orbits.size() - 1;
    for (size_t i = 0; i < c.programs.size(); ++i) {
      if (size_t(c.orbits.orbit_of(c.ranks[i])) == last) {
        ASSERT_TRUE(diverge(c.programs[i], "tp", 0));
      }
    }
    std::vector<const ir::Graph*> all, reps;
    for (const ir::Graph& p : c.programs) all.push_back(&p);
    for (const ir::RankOrbit& o : c.orbits.orbits)
      for (size_t i = 0; i < c.ranks.size(); ++i)
        if (c.ranks[i] == o.representative) reps.push_back(&c.programs[i]);
    const std::string every =
        error_text<InternalError>([&] { check_rank_consistency(all, c.ranks, "after partitioning"); });
    const std::string by_orbit =
        error_text<InternalError>([&] { check_orbit_consistency(reps, c.orbits, "after partitioning"); });
    EXPECT_NE(every.find("group tp ["), std::string::npos) << every;
    EXPECT_EQ(by_orbit, every);
    // And through the pipeline, from the representatives only.
    PassManager pm;
    pm.add(parse_pipeline("default"));
    EXPECT_THROW(run_rank_pipelines(pm, c.programs, c.ranks, {.orbits = &c.orbits}), InternalError);
  }
}

TEST(RankOrbits, OneDivergentOrbitOfALargeMeshIsRefused) {
  const ir::Graph g = ir::build_gpt({.vocab = 512, .hidden = 256, .heads = 4, .layers = 1, .max_seq = 32,
                                     .batch = 64, .seq = 32});
  const DeviceMesh mesh = DeviceMesh::parse("64x128");
  sharding::CompiledModel c = sharding::compile(g, plan_for("fsdp_tp", 2), mesh, with_orbits({0}));
  ASSERT_LT(c.programs.size(), size_t(64));
  // The orbit of rank 1 (dp 0, tp 1): rank 0's tp group meets it.
  const int target = c.orbits.orbit_of(1);
  ASSERT_GT(target, 0);
  for (size_t i = 0; i < c.ranks.size(); ++i) {
    if (c.ranks[i] == c.orbits.orbits[size_t(target)].representative) {
      ASSERT_TRUE(diverge(c.programs[i], "tp", 0));
    }
  }
  PassManager pm;
  pm.add(parse_pipeline("default"));
  const std::string msg =
      error_text<InternalError>([&] { run_rank_pipelines(pm, c.programs, c.ranks, {.orbits = &c.orbits}); });
  EXPECT_NE(msg.find("not rank-consistent after partitioning: group tp [0, 1, 2, "), std::string::npos) << msg;
  EXPECT_NE(msg.find(": rank 0 issues all_reduce("), std::string::npos) << msg;
  EXPECT_NE(msg.find("sum) ("), std::string::npos) << msg;
  EXPECT_NE(msg.find("but rank 1 issues all_reduce("), std::string::npos) << msg;
  EXPECT_NE(msg.find("max) ("), std::string::npos) << msg;
}

// The representative of an orbit stands for it: a rank whose program differs from its
// representative's (here made to) is refused when it is compiled, before it can hang.
TEST(RankOrbits, AProgramUnlikeItsRepresentativeIsRefused) {
  const ir::Graph g = ir::build_gpt({.vocab = 512, .hidden = 128, .heads = 4, .layers = 1, .max_seq = 32, .batch = 8,
                                     .seq = 32});
  const DeviceMesh mesh = DeviceMesh::parse("4x4");
  sharding::CompiledModel c = sharding::compile(g, plan_for("fsdp_tp", 2), mesh, with_orbits({6}));
  ASSERT_EQ(c.ranks[0], 6);
  ASSERT_NE(c.orbits.orbits[size_t(c.orbits.orbit_of(6))].representative, 6);
  ASSERT_TRUE(diverge(c.programs[0], "tp", 0));
  PassManager pm;
  pm.add(parse_pipeline("none"));
  const std::string msg = error_text<InternalError>([&] { run_rank_pipelines(pm, c.programs, c.ranks, {.orbits = &c.orbits}); });
  const int stands_for = c.orbits.orbits[c.orbits.program_orbit(size_t(c.orbits.orbit_of(6)))].representative;
  EXPECT_NE(msg.find("rank 6's program is not rank " + std::to_string(stands_for) + "'s up to renaming after partitioning"),
            std::string::npos)
      << msg;
}

// Compiles rank 0 as `dtensor compile --rank 0` does and returns what the pipeline looked at.
struct Work {
  size_t partitioned = 0, orbits = 0;
  RankPipelineStats stats;
};
Work compile_rank0(const ir::Graph& g, const sharding::ParallelPlan& plan, const DeviceMesh& mesh) {
  sharding::CompiledModel c =
      sharding::compile(g, plan, mesh, with_orbits({mesh.ranks().front()}));
  Work w{c.programs.size(), c.orbits.orbits.size(), run_default(c)};
  EXPECT_EQ(c.orbits.total_ranks(), mesh.size());
  EXPECT_EQ(c.ranks[0], 0);
  return w;
}

// The bound: orbits come from the model's sizes (how many chunk lengths its dims split into), not
// from the number of ranks; this gpt gives at most a few per mesh dim.
constexpr size_t kMaxPrograms = 32;

TEST(RankScale, CompilingRankZeroLooksAtBoundedlyManyPrograms) {
  struct Case {
    const char* mesh;
    const char* style;
  };
  const char* only = std::getenv("DT_SCALE_MESH");  // one case, for a quick look
  for (const Case& k : {Case{"64x128", "fsdp_tp"}, Case{"256x256", "fsdp_tp"}, Case{"65536", "fsdp"}}) {
    if (only && std::string(only) != k.mesh) continue;
    SCOPED_TRACE(k.mesh);
    const DeviceMesh mesh = DeviceMesh::parse(k.mesh);
    const ir::Graph g = ir::build_gpt({.vocab = 1024, .hidden = 256, .heads = 4, .layers = 1, .max_seq = 16,
                                       .batch = std::max<int64_t>(4, mesh.size(0)), .seq = 16});
    const Work w = compile_rank0(g, plan_for(k.style, mesh.ndim()), mesh);
    EXPECT_LE(w.orbits, kMaxPrograms);  // partitioned: one representative per orbit (and rank 0)
    EXPECT_LE(w.partitioned, w.orbits);  // kept: one per distinct program
    EXPECT_EQ(w.stats.programs_transformed, w.partitioned);
    EXPECT_LE(w.stats.programs_checked, kMaxPrograms);
    EXPECT_EQ(w.stats.orbits, w.orbits);
    EXPECT_GE(w.orbits, size_t(2));
    std::printf("%s: %zu orbits partitioned, %zu distinct programs kept, %zu transformed, %zu checked\n", k.mesh, w.orbits,
                w.partitioned, w.stats.programs_transformed, w.stats.programs_checked);
  }
}

}  // namespace
}  // namespace dt::passes
