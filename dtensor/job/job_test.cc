// The job entry point on its own: a whole sharded run and sharded training steps driven through
// dtensor/job alone (no CLI), compared with the single-device run; checkpoints used as they are
// or resharded for another mesh and plan; the user errors a library caller can reach.
#include "dtensor/job/job.h"

#include <gtest/gtest.h>

#include <cmath>

#include "dtensor/core/error.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/job/train.h"
#include "dtensor/sharding/propagation.h"
#include "tests/support/ops_test_util.h"

namespace dt::job {
namespace {

const std::string kExamples = DTENSOR_EXAMPLES_DIR;

struct Gpt {
  ir::Graph graph;
  TensorMap weights, inputs;
};

// A small gpt (hidden 64, 4 heads, vocab 96 so that 3 ranks divide nothing evenly), seeded.
Gpt small_gpt(bool loss) {
  ir::GptConfig cfg{.vocab = 96, .hidden = 64, .heads = 4, .layers = 2, .max_seq = 16, .batch = 4, .seq = 8, .loss = loss};
  Gpt g{ir::build_gpt(cfg), {}, {}};
  g.weights = ir::random_weights(g.graph, /*seed=*/3);
  Generator gen(5);
  g.inputs["input"] = randint({cfg.batch, cfg.seq}, 0, cfg.vocab, gen);
  if (loss) g.inputs["target"] = randint({cfg.batch, cfg.seq}, 0, cfg.vocab, gen);
  return g;
}

// A job on `mesh` with the example plan examples/<plan>.json.
JobOptions options(const std::string& mesh, const std::string& plan) {
  JobOptions o;
  o.mesh = DeviceMesh::parse(mesh);
  o.plan = sharding::ParallelPlan::load(kExamples + "/" + plan + ".json");
  return o;
}

using test::max_abs_diff;

// One device: a job on mesh 1 with the empty plan.
std::vector<Tensor> single_device(const Gpt& g) {
  const Job job = Job::compile(g.graph, JobOptions{});
  return job.run(Weights::full(g.weights), g.inputs).outputs;
}

TEST(Job, ShardedRunMatchesSingleDevice) {
  const Gpt g = small_gpt(/*loss=*/false);
  const std::vector<Tensor> want = single_device(g);
  for (const std::string mesh : {"2", "3", "4"}) {
    const Job job = Job::compile(g.graph, options(mesh, "gpt_tp"));
    EXPECT_EQ(job.ranks().size(), size_t(job.mesh().size()));
    const RunResult r = job.run(Weights::full(g.weights), g.inputs);
    ASSERT_EQ(r.outputs.size(), want.size());
    EXPECT_LE(max_abs_diff(r.outputs[0], want[0]), 1e-5) << "mesh " << mesh;
    ASSERT_EQ(r.ranks.size(), size_t(job.mesh().size()));
    EXPECT_GT(r.collectives_per_kind.size(), 0u) << "tp issues collectives";
    // The plan leaves the logits replicated: every rank's local output is the whole.
    ASSERT_EQ(r.locals[0].size(), size_t(job.mesh().size()));
    for (const Tensor& t : r.locals[0]) EXPECT_EQ(max_abs_diff(t, r.outputs[0]), 0);
  }
}

TEST(Job, CheckpointOfThisLayoutIsUsedAsItIsAndOthersAreResharded) {
  const Gpt g = small_gpt(/*loss=*/false);
  const std::vector<Tensor> want = single_device(g);
  const Job tp4 = Job::compile(g.graph, options("4", "gpt_tp"));
  // A checkpoint written for tp 4, from the job's own shards.
  io::ShardedCheckpoint ckpt{tp4.mesh(), "tp", {}, {}, {}, {}};
  const Weights full = Weights::full(g.weights);
  for (const ir::Value* p : g.graph.params()) {
    ckpt.placements[p->name] = sharding::placements_of(tp4.sharding(), p);
    ckpt.shapes[p->name] = p->type.shape;
  }
  for (int r = 0; r < 4; ++r) ckpt.local.push_back(full.rank_shards(g.graph, tp4.sharding(), tp4.mesh(), r));
  const Weights from_ckpt = Weights::checkpoint(ckpt);
  EXPECT_TRUE(from_ckpt.matches(g.graph, tp4.sharding(), tp4.mesh()));
  EXPECT_LE(max_abs_diff(tp4.run(from_ckpt, g.inputs).outputs[0], want[0]), 1e-5);
  // The same checkpoint on another mesh and plan: assembled and cut again.
  const Job fsdp_tp = Job::compile(g.graph, options("2x2", "gpt_fsdp_tp"));
  EXPECT_FALSE(from_ckpt.matches(g.graph, fsdp_tp.sharding(), fsdp_tp.mesh()));
  EXPECT_LE(max_abs_diff(fsdp_tp.run(from_ckpt, g.inputs).outputs[0], want[0]), 1e-5);
  for (const auto& [name, t] : from_ckpt.full_tensors()) EXPECT_EQ(max_abs_diff(t, g.weights.at(name)), 0) << name;
}

TEST(Job, ShardedTrainingStepsMatchSingleDevice) {
  const Gpt g = small_gpt(/*loss=*/true);
  TrainOptions to;
  to.steps = 2;
  to.optimizer.lr = 0.1;
  const TrainResult one = train_single_device(g.graph.clone(), g.weights, g.inputs, to);
  for (const auto& [mesh, plan] : {std::pair{"2", "gpt_tp"}, std::pair{"2x2", "gpt_fsdp_tp"}}) {
    ShardedTrainOptions so;
    so.job = options(mesh, plan);
    if (so.job.mesh.ndim() == 2) so.job.plan.inputs["target"]["dp"] = Placement::shard(0);
    int compiled = 0;
    so.on_compiled = [&](const Job& job) {
      ++compiled;
      EXPECT_EQ(job.mesh().str(), DeviceMesh::parse(mesh).str());
    };
    const TrainResult r = train_sharded(g.graph.clone(), g.weights, g.inputs, to, so);
    EXPECT_EQ(compiled, 1) << "the step is compiled once for every step";
    ASSERT_EQ(r.losses.size(), one.losses.size());
    for (size_t s = 0; s < r.losses.size(); ++s)
      EXPECT_NEAR(r.losses[s], one.losses[s], 1e-5 * std::abs(one.losses[s])) << mesh << " step " << s + 1;
    for (const auto& [name, t] : one.state) EXPECT_LE(max_abs_diff(r.state.at(name), t), 1e-5) << mesh << " " << name;
  }
}

TEST(Job, UserErrorsNameTheProblem) {
  const Gpt g = small_gpt(/*loss=*/false);
  // 4 heads of hidden 64 over 128 ranks: q_proj has 64 rows, fewer than the mesh dim's ranks.
  try {
    Job::compile(g.graph, options("128", "gpt_tp"));
    FAIL() << "a mesh larger than the model's dims compiled";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("too many ranks for this model's dims: mesh dim tp has 128 ranks"),
              std::string::npos)
        << e.what();
  }
  const Job job = Job::compile(g.graph, options("2", "gpt_tp"));
  EXPECT_THROW(job.program(2), ValueError);
  JobOptions only = options("2", "gpt_tp");
  only.ranks = {1};
  const Job one_rank = Job::compile(g.graph, only);
  // Rank 1's program and one per orbit (tp on 2 ranks: rank 0 is the other orbit).
  EXPECT_NO_THROW(one_rank.program(1));
  EXPECT_LE(one_rank.ranks().size(), 2u);
  EXPECT_THROW(one_rank.run(Weights::full(g.weights), g.inputs), ValueError) << "a partial job cannot run";
  only.ranks = {7};
  EXPECT_THROW(Job::compile(g.graph, only), ValueError) << "rank outside the mesh";
  // Missing parameters: an IoError naming one.
  TensorMap missing = g.weights;
  missing.erase("lm_head.weight");
  EXPECT_THROW(job.run(Weights::full(missing), g.inputs), Error);
}

}  // namespace
}  // namespace dt::job
