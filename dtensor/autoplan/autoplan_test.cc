// The plan search: on the example gpt and mlp, meshes 2, 3, 4 and 2x2, the auto plan runs through
// job::Job and matches the single-device run, and its estimate is no worse than the estimate of
// every hand plan in examples/ for that model and mesh; a memory limit below tensor parallelism's
// per-rank parameters forces fsdp and the compiled programs stay under it; an impossible limit is
// a clear error; the search is deterministic; shapes the mesh does not divide give valid plans.
#include "dtensor/autoplan/search.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "dtensor/core/error.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/job/job.h"
#include "dtensor/job/train.h"
#include "dtensor/sharding/propagation.h"

namespace dt::autoplan {
namespace {

const std::string kExamples = DTENSOR_EXAMPLES_DIR;

struct Model {
  std::string name;  // gpt | mlp: the prefix of its example plans
  ir::Graph graph;
  job::TensorMap weights, inputs;
};

Model gpt(int64_t vocab = 96, bool loss = false) {
  ir::GptConfig cfg{.vocab = vocab, .hidden = 64, .heads = 4, .layers = 2, .max_seq = 16, .batch = 4, .seq = 8, .loss = loss};
  Model m{"gpt", ir::build_gpt(cfg), {}, {}};
  m.weights = ir::random_weights(m.graph, 3);
  Generator gen(5);
  m.inputs["input"] = randint({cfg.batch, cfg.seq}, 0, cfg.vocab, gen);
  if (loss) m.inputs["target"] = randint({cfg.batch, cfg.seq}, 0, cfg.vocab, gen);
  return m;
}

Model mlp() {
  Model m{"mlp", ir::build_mlp({.hidden = 64, .layers = 2, .batch = 8}), {}, {}};
  m.weights = ir::random_weights(m.graph, 4);
  Generator gen(6);
  m.inputs["input"] = randn({8, 64}, gen);
  return m;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const std::vector<double> x = a.to_doubles(), y = b.to_doubles();
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

std::vector<Tensor> run(const Model& m, const std::string& mesh, const sharding::ParallelPlan& plan,
                        std::vector<std::string>* warnings = nullptr) {
  job::JobOptions o;
  o.mesh = DeviceMesh::parse(mesh);
  o.plan = plan;
  const job::Job j = job::Job::compile(m.graph, o);
  if (warnings) *warnings = j.warnings();
  return j.run(job::Weights::full(m.weights), m.inputs).outputs;
}

// The estimate of a plan under the same model the search uses.
double hand_estimate(const ir::Graph& g, const sharding::ParallelPlan& plan, const DeviceMesh& mesh) {
  const sharding::ResolvedPlan r = sharding::resolve_plan(plan, g, mesh);
  return estimate_time(g, sharding::propagate(g, mesh, r)).step_us;
}

// The example plans of model `name` whose mesh dims fit `mesh`.
std::vector<std::string> hand_plans(const std::string& name, const DeviceMesh& mesh) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(kExamples)) {
    const std::string f = e.path().filename().string();
    if (f.rfind(name + "_", 0) != 0 || e.path().extension() != ".json") continue;
    if (int64_t(sharding::ParallelPlan::load(e.path().string()).mesh_dims.size()) == mesh.ndim()) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(PlanSearch, AutoPlanRunsLikeOneDeviceAndBeatsEveryHandPlan) {
  std::vector<Model> models;
  models.push_back(gpt());
  models.push_back(mlp());
  for (const Model& m : models) {
    const std::vector<Tensor> want = run(m, "1", {});
    int compared = 0;
    for (const std::string mesh_text : {"2", "3", "4", "2x2"}) {
      SCOPED_TRACE(m.name + " mesh " + mesh_text);
      const DeviceMesh mesh = DeviceMesh::parse(mesh_text);
      const SearchResult r = search(m.graph, mesh);
      EXPECT_FALSE(r.plan.modules.empty() && r.plan.inputs.empty()) << "something is parallelised";
      EXPECT_GE(r.estimate.step_us, r.lower_bound_us);
      std::vector<std::string> warnings;
      const std::vector<Tensor> got = run(m, mesh_text, r.plan, &warnings);
      EXPECT_TRUE(warnings.empty());
      ASSERT_EQ(got.size(), want.size());
      EXPECT_LE(max_abs_diff(got[0], want[0]), 1e-4) << r.plan.to_json();
      for (const std::string& path : hand_plans(m.name, mesh)) {
        sharding::ParallelPlan hand = sharding::ParallelPlan::load(path);
        EXPECT_LE(r.estimate.step_us, hand_estimate(m.graph, hand, mesh) + 1e-6) << path << "\n" << explain(r);
        ++compared;
      }
      // The estimate the search reports is the one the compiled job gives.
      job::JobOptions o;
      o.mesh = mesh;
      o.plan = r.plan;
      o.passes.pipeline = "none";
      const job::Job j = job::Job::compile(m.graph, o);
      EXPECT_NEAR(estimate(j.graph(), j.compiled()).step_us, r.estimate.step_us, 1e-6);
    }
    EXPECT_GT(compared, 0) << m.name << ": no hand plan was compared";
  }
}

TEST(PlanSearch, MemoryLimitBelowTensorParallelismForcesAnotherPlan) {
  // A vocabulary large enough that tp's replicated embedding dominates its per-rank parameters.
  const Model m = gpt(/*vocab=*/512);
  const DeviceMesh mesh = DeviceMesh::parse("4");
  job::JobOptions tp;
  tp.mesh = mesh;
  tp.plan = sharding::ParallelPlan::load(kExamples + "/gpt_tp.json");
  tp.passes.pipeline = "none";
  const job::Job tp_job = job::Job::compile(m.graph, tp);
  const Estimate tp_est = estimate(tp_job.graph(), tp_job.compiled());
  SearchOptions so;
  so.max_memory_per_rank = tp_est.peak_bytes * 9 / 10;  // tp itself does not fit
  const SearchResult free = search(m.graph, mesh);
  const SearchResult r = search(m.graph, mesh, so);
  EXPECT_LE(r.estimate.peak_bytes, so.max_memory_per_rank);
  EXPECT_LT(r.estimate.param_bytes, tp_est.param_bytes) << "more of the parameters sharded than tp shards";
  EXPECT_GE(r.estimate.step_us, free.estimate.step_us) << "the limit can only cost time";
  // Every rank's compiled program stays under the limit, and the plan runs like one device.
  job::JobOptions o;
  o.mesh = mesh;
  o.plan = r.plan;
  o.passes.pipeline = "none";
  const job::Job j = job::Job::compile(m.graph, o);
  EXPECT_LE(estimate(j.graph(), j.compiled()).peak_bytes, so.max_memory_per_rank);
  const std::vector<Tensor> want = run(m, "1", {});
  EXPECT_LE(max_abs_diff(j.run(job::Weights::full(m.weights), m.inputs).outputs[0], want[0]), 1e-4);
}

TEST(PlanSearch, ImpossibleLimitNamesTheSmallestFeasible) {
  const Model m = mlp();
  SearchOptions so;
  so.max_memory_per_rank = 1000;
  try {
    search(m.graph, DeviceMesh::parse("2"), so);
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("no plan fits --max-memory-per-rank"), std::string::npos) << msg;
    EXPECT_NE(msg.find("smallest per-rank memory found is"), std::string::npos) << msg;
    // The smallest named is feasible: asking for exactly it succeeds.
    const size_t open = msg.rfind('('), close = msg.rfind(" bytes)");
    ASSERT_NE(open, std::string::npos);
    so.max_memory_per_rank = std::stoll(msg.substr(open + 1, close - open - 1));
    EXPECT_LE(search(m.graph, DeviceMesh::parse("2"), so).estimate.peak_bytes, so.max_memory_per_rank);
  }
}

TEST(PlanSearch, Deterministic) {
  const Model m = gpt();
  for (const std::string mesh : {"4", "2x2"}) {
    const SearchResult a = search(m.graph, DeviceMesh::parse(mesh));
    const SearchResult b = search(m.graph, DeviceMesh::parse(mesh));
    EXPECT_EQ(a.plan.to_json(), b.plan.to_json());
    EXPECT_EQ(to_json(a), to_json(b));
    EXPECT_EQ(explain(a), explain(b));
  }
}

TEST(PlanSearch, VocabularyAndHeadsTheMeshDoesNotDivide) {
  const Model m = gpt(/*vocab=*/97);  // 4 heads on 3 ranks, 97 rows on 2, 3 and 4
  const std::vector<Tensor> want = run(m, "1", {});
  for (const std::string mesh : {"3", "4"}) {
    const SearchResult r = search(m.graph, DeviceMesh::parse(mesh));
    std::vector<std::string> warnings;
    EXPECT_LE(max_abs_diff(run(m, mesh, r.plan, &warnings)[0], want[0]), 1e-4) << mesh;
    EXPECT_TRUE(warnings.empty()) << mesh;
  }
}

TEST(PlanSearch, TrainingStepPlanTrainsLikeOneDevice) {
  const Model m = gpt(96, /*loss=*/true);
  SearchOptions so;
  so.train = true;
  const SearchResult r = search(m.graph, DeviceMesh::parse("2"), so);
  EXPECT_GT(r.estimate.step_us, 0);
  job::TrainOptions t;
  t.steps = 2;
  const job::TrainResult one = job::train_single_device(m.graph.clone(), m.weights, m.inputs, t);
  job::ShardedTrainOptions sh;
  sh.job.mesh = DeviceMesh::parse("2");
  sh.job.plan = r.plan;
  const job::TrainResult two = job::train_sharded(m.graph.clone(), m.weights, m.inputs, t, sh);
  ASSERT_EQ(two.losses.size(), 2u);
  for (size_t s = 0; s < 2; ++s) EXPECT_NEAR(two.losses[s], one.losses[s], 1e-4);
}

}  // namespace
}  // namespace dt::autoplan
