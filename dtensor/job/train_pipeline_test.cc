// Pipeline-parallel training through the library's entry point (train_sharded with a plan that
// has a `pipeline` section) against single-device training of the same model: the gpt example cut
// into 2 and 4 stages, GPipe and 1F1B, 1, 2 and 4 micro-batches, even and uneven splits, gives the
// same losses and first-step gradients (1e-6 relative), also recomputing each stage's blocks (which
// lowers every rank's estimated peak memory); every plan error is one clear line; and the compile's
// work (programs partitioned and built) does not grow with the mesh.
#include <gtest/gtest.h>

#include <cmath>

#include "dtensor/core/error.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/builder.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/ir/printer.h"
#include "dtensor/job/report.h"
#include "dtensor/job/train_pipeline.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/passes/memory_estimate.h"
#include "dtensor/runtime/interpreter.h"
#include "dtensor/pipeline/stages.h"
#include "tests/support/error_text.h"

#include <tuple>
#include <utility>

namespace dt::job {
namespace {

// Small shapes for CI time: 4 layers (5 for the uneven splits), hidden 64 (512 in two cases),
// batch 8.
ir::GptConfig gpt_config(int64_t layers, int64_t hidden = 64, int64_t vocab = 64) {
  return {.vocab = vocab, .hidden = hidden, .heads = 4, .layers = layers, .max_seq = 8, .batch = 8, .seq = 8, .loss = true};
}

struct Data {
  std::map<std::string, Tensor> weights, data;
};

Data make_data(const ir::Graph& g, const ir::GptConfig& c) {
  Data d;
  d.weights = ir::random_weights(g, 7);
  Generator gen(11);
  // Two batches, one per step (the third step reuses the first).
  d.data["input"] = randint({2, c.batch, c.seq}, 0, c.vocab, gen);
  d.data["target"] = randint({2, c.batch, c.seq}, 0, c.vocab, gen);
  return d;
}

// A plan: `rest` (mesh_dims and styles; default: a pipeline alone) with the pipeline section.
std::string plan_json(const std::string& pipeline, const std::string& rest = R"("mesh_dims": ["pp"])") {
  return "{" + rest + R"(, "pipeline": )" + pipeline + "}";
}

// The plan examples/<example>.json, with a pp dim in front and `pipeline` when it has no
// pipeline section (gpt_tp: tensor parallelism within each stage); `pipeline` alone without one.
ShardedTrainOptions pipeline_options(const std::string& mesh, const std::string& example, const std::string& pipeline) {
  ShardedTrainOptions so;
  so.job.mesh = DeviceMesh::parse(mesh);
  if (example.empty()) {
    so.job.plan = sharding::ParallelPlan::parse(plan_json(pipeline), "pp.json");
    return so;
  }
  so.job.plan = sharding::ParallelPlan::load(std::string(DTENSOR_EXAMPLES_DIR) + "/" + example + ".json");
  if (!so.job.plan.pipeline) {
    so.job.plan.mesh_dims.insert(so.job.plan.mesh_dims.begin(), "pp");
    so.job.plan.pipeline = sharding::ParallelPlan::parse(plan_json(pipeline)).pipeline;
  }
  return so;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_doubles()) m = std::max(m, std::abs(v));
  return m;
}

struct Case {
  Case(std::string mesh, std::string pipeline, int64_t layers = 4, int64_t hidden = 64, std::string example = "",
       bool recompute = false, int64_t vocab = 64)
      : mesh(std::move(mesh)), pipeline(std::move(pipeline)), layers(layers), hidden(hidden), example(std::move(example)),
        recompute(recompute), vocab(vocab) {}
  std::string mesh;
  std::string pipeline;
  int64_t layers;
  int64_t hidden;
  std::string example;  // the plan within the stages (pipeline_options)
  bool recompute;  // the pipeline recomputes its stages' blocks in their backwards
  int64_t vocab;
};

class PipelineTraining : public ::testing::TestWithParam<Case> {};

TEST_P(PipelineTraining, MatchesSingleDevice) {
  const Case& c = GetParam();
  const ir::GptConfig cfg = gpt_config(c.layers, c.hidden, c.vocab);
  const ir::Graph g = ir::build_gpt(cfg);
  const Data d = make_data(g, cfg);
  TrainOptions opt;
  opt.steps = 3;
  opt.optimizer.momentum = 0.9;  // state carried across steps
  opt.keep_first_grads = true;
  const TrainResult want = train_single_device(g.clone(), d.weights, d.data, opt);
  TrainOptions pipelined = opt;
  if (c.recompute) pipelined.recompute = autodiff::Recompute::blocks;  // the same numbers as without
  const TrainResult got =
      train_sharded(g.clone(), d.weights, d.data, pipelined, pipeline_options(c.mesh, c.example, c.pipeline));
  ASSERT_EQ(got.losses.size(), want.losses.size());
  double loss_diff = 0, grad_diff = 0, scale = 0, param_diff = 0;
  for (size_t i = 0; i < want.losses.size(); ++i) {
    loss_diff = std::max(loss_diff, std::abs(got.losses[i] - want.losses[i]));
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-6 * std::abs(want.losses[i])) << "step " << i + 1;
  }
  for (const auto& [p, t] : want.first_grads) scale = std::max(scale, max_abs(t));
  ASSERT_EQ(got.first_grads.size(), want.first_grads.size());
  for (const auto& [p, t] : want.first_grads) {
    const double diff = max_abs(dt::sub(got.first_grads.at(p).to(DType::f64), t.to(DType::f64)));
    grad_diff = std::max(grad_diff, diff);
    EXPECT_LE(diff, 1e-6 * scale) << p;
  }
  for (const auto& [p, t] : want.state) {
    ASSERT_TRUE(got.state.count(p)) << p;
    param_diff = std::max(param_diff, max_abs(dt::sub(got.state.at(p).to(DType::f64), t.to(DType::f64))));
  }
  EXPECT_LE(param_diff, 1e-5);
  if (!c.example.empty()) {  // tensor parallel within the stage (the mesh's last dim): fc_in sharded
    const DeviceMesh mesh = DeviceMesh::parse(c.mesh);
    const std::string w = "h.0.mlp.fc_in.weight";
    EXPECT_NE(got.placements.at(w).find("S(0)"), std::string::npos) << got.placements.at(w);
    EXPECT_EQ(got.rank_state[0].at(w).size(0) * mesh.size(mesh.ndim() - 1), want.state.at(w).size(0));
  }
  std::printf("vocab %lld, hidden %lld, %lld layers, mesh %s %s %s%s: max loss diff %.3g, max first-grad diff %.3g (of |grad| %.3g), max param diff %.3g\n",
              (long long)c.vocab, (long long)c.hidden, (long long)c.layers, c.mesh.c_str(), c.example.c_str(), c.pipeline.c_str(), c.recompute ? " recompute" : "", loss_diff, grad_diff, scale, param_diff);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, PipelineTraining,
    ::testing::Values(
        Case{"2", R"({"split_before": ["h.2"], "microbatches": 1})"},
        Case{"2", R"({"split_before": ["h.2"], "microbatches": 2})"},
        Case{"2", R"({"split_before": ["h.2"], "microbatches": 4})"},
        Case{"2", R"({"stages": 2, "microbatches": 4, "schedule": "1f1b"})"},
        Case{"2", R"({"split_before": ["h.1"], "microbatches": 2, "schedule": "1f1b"})"},
        Case{"4", R"({"stages": 4, "microbatches": 1, "schedule": "gpipe"})"},
        Case{"4", R"({"stages": 4, "microbatches": 2, "schedule": "1f1b"})"},
        Case{"4", R"({"split_before": ["h.1", "h.2", "h.3"], "microbatches": 4, "schedule": "1f1b"})"},
        Case{"4", R"({"stages": 4, "microbatches": 4, "schedule": "gpipe"})"},
        // Uneven: 5 layers on 2 and 3 stages.
        Case{"2", R"({"stages": 2, "microbatches": 2, "schedule": "1f1b"})", 5},
        Case{"3", R"({"split_before": ["h.1", "h.4"], "microbatches": 4, "schedule": "1f1b"})", 5},
        // The issue's size: hidden 512.
        Case{"2", R"({"split_before": ["h.2"], "microbatches": 2, "schedule": "gpipe"})", 4, 512},
        Case{"4", R"({"stages": 4, "microbatches": 4, "schedule": "1f1b"})", 4, 512},
        // Within each stage, tensor parallelism (pp x tp) and data + tensor parallelism (pp x dp x tp).
        Case{"2x2", R"({"split_before": ["h.2"], "microbatches": 2, "schedule": "1f1b"})", 4, 64, "gpt_tp"},
        Case{"2x2", R"({"stages": 2, "microbatches": 4, "schedule": "gpipe"})", 5, 64, "gpt_tp"},
        Case{"4x2", R"({"stages": 4, "microbatches": 4, "schedule": "1f1b"})", 4, 64, "gpt_tp"},
        // Interleaved 1F1B: v = 2 model chunks per rank (stage s on rank s mod p), m = 2, 4, 8;
        // pp 4 cuts 8 layers into 8 stages; pp x tp within the chunks.
        Case{"2", R"({"stages": 2, "virtual_stages": 2, "microbatches": 2, "schedule": "interleaved-1f1b"})"},
        Case{"2", R"({"stages": 2, "virtual_stages": 2, "microbatches": 4, "schedule": "interleaved-1f1b"})", 4, 512},
        Case{"2", R"({"split_before": ["h.1", "h.2", "h.3"], "virtual_stages": 2, "microbatches": 8, "schedule": "interleaved-1f1b"})"},
        Case{"4", R"({"stages": 4, "virtual_stages": 2, "microbatches": 4, "schedule": "interleaved-1f1b"})", 8},
        Case{"4", R"({"stages": 4, "virtual_stages": 2, "microbatches": 8, "schedule": "interleaved-1f1b"})", 8, 512},
        Case{"2x2", R"({"stages": 2, "virtual_stages": 2, "microbatches": 2, "schedule": "interleaved-1f1b"})", 4, 64, "gpt_tp"},
        // examples/gpt_pp_dp_tp.json as it is (its own pipeline section).
        Case{"2x2x2", "", 4, 64, "gpt_pp_dp_tp"},
        // ... with a vocabulary tp 4 does not divide (67 = 3 x 17 + 16): the last tp rank of the
        // last stage holds the short lm_head shard, an orbit of its own (pipeline_orbits).
        Case{"2x1x4", "", 4, 64, "gpt_pp_dp_tp", false, 67},
        // Recomputing each stage's blocks in its backward: 1F1B, interleaved, pp x tp.
        Case{"2", R"({"stages": 2, "microbatches": 2, "schedule": "1f1b"})", 4, 64, "", true},
        Case{"2", R"({"stages": 2, "virtual_stages": 2, "microbatches": 2, "schedule": "interleaved-1f1b"})", 4, 64, "", true},
        Case{"2x2", R"({"stages": 2, "microbatches": 2, "schedule": "gpipe"})", 4, 64, "gpt_tp", true}));

// An mlp whose blocks all read one trained norm scale (tied across every stage) and one frozen
// norm bias (a const, as an export's RoPE tables): x = x + fc(layer_norm(x, tied, shared)).
ir::Graph tied_mlp(int64_t layers) {
  ir::Graph g("tied_mlp");
  ir::Builder b(g);
  const int64_t h = 16;
  ir::Value* x = b.input("input", DType::f32, {8, h});
  ir::Value* target = b.input("target", DType::f32, {8, h});
  ir::Value* scale = b.param("tied.weight", DType::f32, {h});
  ir::Value* bias = b.param("shared.bias", DType::f32, {h});
  bias->frozen = true;
  for (int64_t i = 0; i < layers; ++i) {
    ir::Value* w = b.param("layers." + std::to_string(i) + ".fc.weight", DType::f32, {h, h});
    x = b.add(x, b.linear(b.layer_norm(x, {h}, scale, bias, 1e-5), w));
  }
  b.outputs({b.named("loss").mse_loss(x, target)});
  return g;
}

// A trained parameter read in every stage is trained in each, its gradients summed over the
// pipeline ranks holding it before the update, and two stages of one rank (interleaved) share
// one copy; a const read everywhere is bound everywhere. 1F1B on 4 stages and interleaved 1F1B on
// 2 ranks x 2 virtual stages, SGD with momentum and AdamW, give the one-device losses and trained
// parameters, and every rank's copy of the tied weight is the same.
TEST(PipelineTraining, TiedWeightsAcrossStagesMatchSingleDevice) {
  const ir::Graph g = tied_mlp(4);
  const std::map<std::string, Tensor> weights = ir::random_weights(g, 5);
  Generator gen(3);
  const std::map<std::string, Tensor> data = {{"input", randn({8, 16}, gen)}, {"target", randn({8, 16}, gen)}};
  for (const char* optimizer : {"sgd", "adamw"}) {
    TrainOptions opt;
    opt.steps = 3;
    opt.optimizer.kind = optimizer;
    opt.optimizer.lr = std::string(optimizer) == "sgd" ? 0.1 : 1e-2;
    opt.optimizer.momentum = std::string(optimizer) == "sgd" ? 0.9 : 0.0;
    const TrainResult want = train_single_device(g.clone(), weights, data, opt);
    for (const auto& [mesh, pipeline] :
         {std::pair<std::string, std::string>{"4", R"({"stages": 4, "microbatches": 4, "schedule": "1f1b"})"},
          {"2", R"({"stages": 2, "virtual_stages": 2, "microbatches": 2, "schedule": "interleaved-1f1b"})"}}) {
      SCOPED_TRACE(std::string(optimizer) + " mesh " + mesh + " " + pipeline);
      const TrainResult got = train_sharded(g.clone(), weights, data, opt, pipeline_options(mesh, "", pipeline));
      ASSERT_EQ(got.losses.size(), want.losses.size());
      for (size_t i = 0; i < want.losses.size(); ++i)
        EXPECT_NEAR(got.losses[i], want.losses[i], 1e-6 * std::abs(want.losses[i])) << "step " << i + 1;
      for (const auto& [name, t] : want.state) {
        ASSERT_TRUE(got.state.count(name)) << name;
        EXPECT_LE(max_abs(dt::sub(got.state.at(name).to(DType::f64), t.to(DType::f64))), 1e-6) << name;
      }
      int holders = 0;  // the ranks whose stages read it (each cut falls before a block's linear)
      for (const auto& rs : got.rank_state) {
        if (!rs.count("tied.weight")) continue;
        ++holders;
        EXPECT_EQ(max_abs(dt::sub(rs.at("tied.weight"), got.rank_state[0].at("tied.weight"))), 0.0);
      }
      EXPECT_GE(holders, 2);
    }
  }
}

// Recomputation shrinks what each rank holds between a micro-batch's forward and its backward to
// the blocks' inputs: every rank's estimated peak (passes/memory_estimate.h, bytes of live values
// in program order) drops, GPipe's most (it holds all m micro-batches' activations at once).
TEST(PipelineRecompute, LowersEveryRanksPeakMemory) {
  const ir::GptConfig cfg = gpt_config(4);
  const ir::Graph g = ir::build_gpt(cfg);
  for (const char* pipeline : {R"({"stages": 2, "microbatches": 4, "schedule": "gpipe"})",
                               R"({"stages": 2, "microbatches": 4, "schedule": "1f1b"})"}) {
    const ShardedTrainOptions so = pipeline_options("2", "", pipeline);
    std::vector<int64_t> peak[2];
    for (const autodiff::Recompute r : {autodiff::Recompute::none, autodiff::Recompute::blocks}) {
      pipeline::ProgramOptions po;
      po.recompute = r;
      for (const pipeline::StageProgram& sp : compile_pipeline(g, so.job.plan, so.job.mesh, po).programs)
        peak[r == autodiff::Recompute::blocks].push_back(passes::estimate_peak_bytes(sp.step.graph));
    }
    ASSERT_EQ(peak[0].size(), 2u);
    for (size_t rank = 0; rank < 2; ++rank) {
      EXPECT_LT(peak[1][rank], peak[0][rank]) << pipeline << " rank " << rank;
      std::printf("%s rank %zu: estimated peak %lld bytes, %lld with recompute\n", pipeline, rank,
                  (long long)peak[0][rank], (long long)peak[1][rank]);
    }
  }
}

// Forward only (Job::run, as `dtensor run`): the logits (micro-batches concatenated) and the loss
// (their mean) of the single-device run.
TEST(PipelineRun, ForwardOnlyMatchesSingleDevice) {
  const ir::GptConfig cfg = gpt_config(4);
  const ir::Graph g = ir::build_gpt(cfg);
  const Data d = make_data(g, cfg);
  TensorMap batch;
  for (const auto& [name, t] : d.data) batch[name] = t.select(0, 0);
  runtime::Bindings bind(d.weights.begin(), d.weights.end());
  for (const auto& [name, t] : batch) bind[name] = t;
  const std::vector<Tensor> want = runtime::Interpreter(g).run(bind);
  for (const auto& [mesh, example, pipeline] :
       {std::tuple<std::string, std::string, std::string>{"2", "", R"({"split_before": ["h.2"], "microbatches": 2})"},
        {"4", "", R"({"stages": 4, "microbatches": 4})"},
        {"2", "", R"({"stages": 2, "virtual_stages": 2, "microbatches": 2, "schedule": "interleaved-1f1b"})"},
        {"2x2", "gpt_tp", R"({"stages": 2, "microbatches": 2})"}}) {
    JobOptions jo = pipeline_options(mesh, example, pipeline).job;
    const Job job = Job::compile(g, jo);
    ASSERT_TRUE(job.pipeline());
    const RunResult r = job.run(Weights::full(d.weights), batch);
    ASSERT_EQ(r.outputs.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k) {
      const double diff = max_abs(dt::sub(r.outputs[k].to(DType::f64), want[k].to(DType::f64)));
      EXPECT_LE(diff, 1e-5 * std::max(1.0, max_abs(want[k]))) << mesh << " " << pipeline << " output " << k;
      std::printf("run, mesh %s %s: output %zu max diff %.3g\n", mesh.c_str(), pipeline.c_str(), k, diff);
    }
  }
}

// Returns the message of the ValueError that pipeline training with `plan` on `mesh` throws.
std::string train_error(const std::string& mesh, const std::string& plan) {
  const ir::GptConfig cfg = gpt_config(2);
  const ir::Graph g = ir::build_gpt(cfg);
  const Data d = make_data(g, cfg);
  ShardedTrainOptions so;
  so.job.mesh = DeviceMesh::parse(mesh);
  try {
    so.job.plan = sharding::ParallelPlan::parse(plan, "pp.json");
    train_sharded(g.clone(), d.weights, d.data, TrainOptions{}, so);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

TEST(PipelinePlanErrors, AreOneClearLine) {
  auto expect = [](const std::string& mesh, const std::string& plan, const std::string& want) {
    const std::string e = train_error(mesh, plan);
    EXPECT_NE(e.find(want), std::string::npos) << "got: " << e;
  };
  expect("2", plan_json(R"({"split_before": ["h.7"]})"), "splits before 'h.7', which names no module of gpt");
  expect("2", plan_json(R"({"split_before": ["h.1.attn.q"]})"), "splits before 'h.1.attn.q', which names no module");
  expect("2", plan_json(R"({"split_before": ["h.1"], "microbatches": 3})"),
         "3 micro-batches, which do not divide the batch 8 of input input");
  expect("2", R"({"mesh_dims": ["tp"], "pipeline": {"stages": 2}})",
         "the pipeline runs on mesh dim 'pp' but the plan's mesh_dims are [tp]");
  expect("4", plan_json(R"({"split_before": ["h.1"]})"), "1 split points make 2 stages but mesh dim pp has 4 ranks");
  expect("2", plan_json(R"({"stages": 4})"), "asks for 4 stages but mesh dim pp has 2 ranks");
  expect("4", plan_json(R"({"stages": 4})"), "asks for 4 stages but gpt has only 2 block boundaries");
  expect("3", plan_json(R"({"split_before": ["h.1", "h.0"]})"), "split points must follow the model's order");
  expect("2", plan_json(R"({"split_before": ["h.1"], "schedule": "zb"})"), "unknown schedule 'zb'");
  expect("2", plan_json(R"({"split_before": ["h.1"], "stages": 2})"), "has both stages and split_before");
  expect("2", plan_json(R"({"microbatches": 2})"), "needs split_before (module names) or stages");
  expect("2", plan_json(R"({"stages": 2, "microbatches": 0})"), "microbatches is 0, expected an integer in [1, 65536]");
  expect("2", plan_json(R"({"stages": 2, "virtual": 2})"), "pipeline has unknown key 'virtual'");
  // Interleaved 1F1B's conditions (PyTorch's, and p >= 2 for chunks on other ranks).
  expect("2", plan_json(R"({"stages": 2, "virtual_stages": 2, "schedule": "1f1b"})"),
         "has virtual_stages 2 but schedule '1f1b': only interleaved-1f1b runs several stages per rank");
  expect("2", plan_json(R"({"stages": 2, "virtual_stages": 0, "schedule": "interleaved-1f1b"})"),
         "virtual_stages is 0, expected an integer in [1, 1024]");
  expect("2", plan_json(R"({"stages": 2, "virtual_stages": 2, "microbatches": 5, "schedule": "interleaved-1f1b"})"),
         "interleaved-1f1b needs the micro-batch count to be a multiple of its rounds max(1, m/p) = 2 (as PyTorch's "
         "ScheduleInterleaved1F1B), got m = 5 on p = 2");
  expect("1", plan_json(R"({"stages": 1, "virtual_stages": 2, "schedule": "interleaved-1f1b"})"),
         "interleaved-1f1b needs at least 2 pipeline ranks");
  expect("2", plan_json(R"({"stages": 2, "virtual_stages": 2, "schedule": "interleaved-1f1b"})"),
         "asks for 4 stages (2 ranks x 2 virtual stages) but gpt has only 2 block boundaries");
  expect("2", plan_json(R"({"split_before": ["h.1"], "virtual_stages": 2, "schedule": "interleaved-1f1b"})"),
         "1 split points make 2 stages but mesh dim pp has 2 ranks x 2 virtual stages");
  expect("2x2", plan_json(R"({"stages": 2})", R"("mesh_dims": ["pp", "tp"], "modules": [{"pattern": "h.*.mlp.fc_in", "style": "colwise", "mesh_dim": "pp"}])"),
         "plan pattern 'h.*.mlp.fc_in' names the pipeline's mesh dim 'pp'");
  expect("2x2", plan_json(R"({"stages": 2})", R"("mesh_dims": ["pp", "tp"], "modules": [{"pattern": "h.*.mlp.fc_x", "style": "colwise", "mesh_dim": "tp"}])"),
         "plan pattern 'h.*.mlp.fc_x' matches no module of gpt");
}

// Micro-batching a graph (pipeline::rebatch): a constant broadcast to the batch by an expand along
// a new or size-1 dim 0 (Hugging Face's position ids expanded to [batch, seq], which an importer
// keeps as one row and an expand) broadcasts to the micro-batch; a constant holding the whole batch,
// or a shape that cannot be split, is refused naming the node.
TEST(PipelineRebatch, ConstantsBroadcastToTheBatchFollowTheMicroBatch) {
  using ir::Value;
  for (const bool new_dim : {false, true}) {
    ir::Graph g("m");
    ir::Builder b(g);
    Value* x = b.input("x", DType::f32, {8, 4});
    Value* row = new_dim ? b.param("row", DType::f32, {4}) : b.param("row", DType::f32, {1, 4});
    row->frozen = true;
    Value* rows = b.record(ir::OpKind::expand, {row}, {{"shape", std::vector<int64_t>{8, 4}}})[0];
    g.set_outputs({b.add(x, rows)});
    const ir::Graph r = pipeline::rebatch(g, 2);
    EXPECT_EQ(r.outputs()[0]->type.shape, (Shape{4, 4})) << ir::print(r);
    EXPECT_EQ(r.find("row")->type.shape, row->type.shape);  // the constant itself is untouched
  }
  {  // an expand of a batched value keeps following its operand
    ir::Graph g("m");
    ir::Builder b(g);
    Value* x = b.input("x", DType::f32, {8, 1});
    g.set_outputs({b.record(ir::OpKind::expand, {x}, {{"shape", std::vector<int64_t>{8, 3}}})[0]});
    EXPECT_EQ(pipeline::rebatch(g, 4).outputs()[0]->type.shape, (Shape{2, 3}));
  }
  {  // a constant of the whole batch, rows unequal: refused, not broadcast
    ir::Graph g("m");
    ir::Builder b(g);
    Value* x = b.input("x", DType::f32, {8, 4});
    Value* c = b.param("table", DType::f32, {8, 4});
    c->frozen = true;
    g.set_outputs({b.add(x, c)});
    const std::string e = test::error_text<ValueError>([&] { pipeline::rebatch(g, 2); });
    EXPECT_NE(e.find("cannot cut m into 2 micro-batches: add %"), std::string::npos) << e;
    EXPECT_NE(e.find("mixes the micro-batch with a value that holds the whole batch"), std::string::npos) << e;
  }
  {  // a reshape giving the batch dim a size the micro-batches do not divide
    ir::Graph g("m");
    ir::Builder b(g);
    Value* x = b.input("x", DType::f32, {8, 6});
    g.set_outputs({b.reshape(x, {3, 16})});
    const std::string e = test::error_text<ValueError>([&] { pipeline::rebatch(g, 2); });
    EXPECT_NE(e.find("cannot cut m into 2 micro-batches: reshape %"), std::string::npos) << e;
    EXPECT_NE(e.find("gives the batch shape [3, 16]"), std::string::npos) << e;
  }
}

// Training a model without a scalar loss names the model's output type, not a micro-batch's.
TEST(PipelineRebatch, LossErrorsNameTheWholeBatch) {
  ir::Graph g("m");
  ir::Builder b(g);
  ir::Value* w = b.param("w", DType::f32, {4});
  g.set_outputs({b.mul(b.input("x", DType::f32, {8, 4}), w)});
  pipeline::StageSplit split;
  split.microbatches = 2;
  split.first_node = {0};
  const std::string e = test::error_text<ValueError>([&] { pipeline::build_stages(g, split, true); });
  EXPECT_NE(e.find("must be a floating scalar, got f32[8, 4]"), std::string::npos) << e;
}

TEST(PipelinePlan, RoundTripsThroughJson) {
  for (const char* pipeline : {R"({"split_before": ["h.2"], "microbatches": 4, "schedule": "1f1b"})",
                               R"({"stages": 2, "virtual_stages": 3, "microbatches": 4, "schedule": "interleaved-1f1b"})"}) {
    const auto plan = sharding::ParallelPlan::parse(plan_json(pipeline));
    const auto again = sharding::ParallelPlan::parse(plan.to_json());
    ASSERT_TRUE(again.pipeline);
    EXPECT_EQ(*again.pipeline, *plan.pipeline);
  }
}

// A pipeline's compile builds one program per orbit (train_pipeline.h), not one per rank: on
// 2x2x2 and 2x8x8 (8 and 128 ranks; every split even, so each stage's sub-mesh has 4 orbits: dp and
// tp coordinate 0 or not) the same stage programs are partitioned and the same pipeline programs
// built, and the report lists a stage's ranks as one range. Every rank's program, when all are
// built, is its orbit's but for renaming, and instantiating a rank gives the program built for it.
TEST(PipelineCompile, WorkDoesNotGrowWithTheMesh) {
  const ir::GptConfig cfg{.vocab = 64, .hidden = 64, .heads = 16, .layers = 4, .max_seq = 8, .batch = 64, .seq = 8,
                          .loss = true};
  const ir::Graph g = ir::build_gpt(cfg);
  pipeline::ProgramOptions po;
  po.training = false;
  std::vector<std::pair<int64_t, size_t>> work;  // per mesh: stage programs partitioned, programs built
  for (const char* mesh : {"2x2x2", "2x8x8"}) {
    const ShardedTrainOptions so = pipeline_options(mesh, "gpt_pp_dp_tp", "");
    const PipelinePrograms pp = compile_pipeline(g, so.job.plan, so.job.mesh, po, std::vector<int>{});
    EXPECT_EQ(pp.orbits.orbits.size(), 8u) << mesh;
    EXPECT_EQ(pp.orbits.total_ranks(), so.job.mesh.size()) << mesh;
    work.emplace_back(pp.stage_programs_partitioned, pp.programs.size());
    const int64_t half = so.job.mesh.size() / 2;
    const nlohmann::json report = pipeline_report_json(pp, *so.job.plan.pipeline);
    EXPECT_EQ(report["stage"][1]["ranks"], nlohmann::json::parse("[[" + std::to_string(half) + ", " +
                                                                  std::to_string(2 * half - 1) + "]]"))
        << mesh;
  }
  EXPECT_EQ(work[0], work[1]);
  EXPECT_EQ(work[1].second, 8u);  // of 128 ranks

  const ShardedTrainOptions so = pipeline_options("2x2x2", "gpt_pp_dp_tp", "");
  const PipelinePrograms all = compile_pipeline(g, so.job.plan, so.job.mesh, po);
  ASSERT_EQ(all.programs.size(), 8u);
  for (const pipeline::StageProgram& sp : all.programs) {
    const ir::Graph& mine = sp.step.graph;
    const ir::Graph& orbit = all.orbit_program(sp.rank).step.graph;
    ASSERT_EQ(mine.nodes().size(), orbit.nodes().size()) << "rank " << sp.rank;
    for (size_t i = 0; i < mine.nodes().size(); ++i) {
      const ir::Node& a = *mine.nodes()[i];
      const ir::Node& b = *orbit.nodes()[i];
      ASSERT_EQ(a.op, b.op) << "rank " << sp.rank << " node " << i;
      ASSERT_EQ(a.results.size(), b.results.size()) << "rank " << sp.rank << " node " << i;
      for (size_t k = 0; k < a.results.size(); ++k)
        ASSERT_EQ(a.results[k]->type.shape, b.results[k]->type.shape) << "rank " << sp.rank << " node " << i;
    }
  }
  EXPECT_EQ(ir::print(all.instantiate(7).step.graph), ir::print(all.program(7).step.graph));
}

// With a vocabulary that tp does not divide, the last tp rank of the last stage holds the short
// lm_head shard and is an orbit of its own; so are the ranks of the earlier stage that send to it
// (pipeline_orbits), or the deadlock proof by orbit would run their orbit-mates' transfers for
// theirs and report a deadlock that cannot happen (it did on every mesh with tp >= 4). On 2x4x4 and
// 2x8x8 the pipeline compiles with the same orbits and work: per stage, dp coordinate 0 or not x
// tp coordinate first, middle or last.
TEST(PipelineCompile, UnevenVocabularyOnTpIsProvedByOrbit) {
  const ir::GptConfig cfg{.vocab = 67, .hidden = 64, .heads = 16, .layers = 4, .max_seq = 8, .batch = 64, .seq = 8,
                          .loss = true};
  const ir::Graph g = ir::build_gpt(cfg);
  pipeline::ProgramOptions po;
  po.training = true;
  std::vector<std::pair<int64_t, size_t>> work;
  for (const char* mesh : {"2x4x4", "2x8x8"}) {
    const ShardedTrainOptions so = pipeline_options(mesh, "gpt_pp_dp_tp", "");
    const PipelinePrograms pp = compile_pipeline(g, so.job.plan, so.job.mesh, po, std::vector<int>{});
    EXPECT_EQ(pp.orbits.orbits.size(), 12u) << mesh;
    EXPECT_EQ(pp.orbits.total_ranks(), so.job.mesh.size()) << mesh;
    // The last tp rank of stage 0's first dp row and its peer in stage 1 are alone in their orbits.
    const int64_t tp = so.job.mesh.size(2), half = so.job.mesh.size() / 2;
    for (const int64_t rank : {tp - 1, half + tp - 1}) {
      const int o = pp.orbits.orbit_of(int(rank));
      ASSERT_GE(o, 0);
      EXPECT_EQ(pp.orbits.orbits[size_t(o)].representative, rank) << mesh;
    }
    work.emplace_back(pp.stage_programs_partitioned, pp.programs.size());
  }
  EXPECT_EQ(work[0], work[1]);
}

}  // namespace
}  // namespace dt::job
