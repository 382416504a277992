// Training on one device against PyTorch: the first step's gradients of the reference models match
// grads.safetensors (PyTorch 2.11, float32) within 1e-5 of the model's largest |grad| (not each
// parameter's: gpt's k_proj.bias gradients are zero in exact arithmetic — a bias on the keys adds
// the same q·b to every score of a row, which softmax cancels — so both sides hold float32 noise
// of about 1e-9 there), and 5
// SGD steps (lr 0.1) reproduce config.json's sgd_losses within 1e-4 relative. The optimizers are
// checked against this file's own loops over PyTorch's documented update formulas
// (torch.optim.SGD and torch.optim.AdamW, "Algorithm" sections of their docs), written
// independently of the kernels in kernels/ops_grad.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dtensor/autodiff/autodiff.h"
#include "dtensor/kernels/ops.h"
#include "dtensor/kernels/ops_grad.h"
#include "dtensor/core/rng.h"
#include "dtensor/io/safetensors.h"
#include "dtensor/passes/pass_manager.h"
#include "dtensor/passes/rank_pipeline.h"
#include "dtensor/ir/builder.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/ir/parser.h"
#include "dtensor/ir/printer.h"
#include "dtensor/runtime/interpreter.h"
#include "dtensor/job/train.h"

namespace dt::job {
namespace {

using runtime::Bindings;
using runtime::Interpreter;
using runtime::RunStats;

const std::string kRef = DTENSOR_REFERENCE_DIR;
// fsdp alone (no example file holds it): data parallel over dp with every parameter sharded.
const std::string kFsdp = R"json({"mesh_dims": ["dp"], "inputs": {"input": {"dp": "S(0)"}},
  "modules": [{"pattern": "*", "style": "fsdp", "mesh_dim": "dp"}]})json";

ir::Graph model(const std::string& name) {
  ir::Graph g = name == "mlp" ? ir::build_mlp({.loss = true}) : ir::build_gpt({.loss = true});
  return ir::parse(ir::print(g), name + ".dt");  // through the text form, as the CLI
}

// A sharded training run on the threads backend with plan `plan` (examples/<plan>.json, or "fsdp"
// for kFsdp) and the given pass pipeline ("none": the partitioner's programs as they are). The
// target is sharded like the input, as a training step's data.
ShardedTrainOptions sharded_options(const std::string& mesh, const std::string& plan, const std::string& passes) {
  ShardedTrainOptions so;
  so.job.mesh = DeviceMesh::parse(mesh);
  so.job.plan = plan == "fsdp" ? sharding::ParallelPlan::parse(kFsdp)
                               : sharding::ParallelPlan::load(std::string(DTENSOR_EXAMPLES_DIR) + "/" + plan + ".json");
  if (so.job.plan.inputs.count("input")) so.job.plan.inputs["target"] = so.job.plan.inputs["input"];
  so.job.passes.pipeline = passes;
  return so;
}

std::map<std::string, Tensor> load(const std::string& path) {
  std::map<std::string, Tensor> m;
  for (auto& [k, v] : io::read_safetensors(path)) m[k] = v;
  return m;
}

nlohmann::json config(const std::string& name) {
  std::ifstream f(kRef + "/" + name + "/config.json");
  return nlohmann::json::parse(f);
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_doubles()) m = std::max(m, std::abs(v));
  return m;
}

class Reference : public ::testing::TestWithParam<std::string> {};

TEST_P(Reference, FirstStepGradientsMatchPyTorch) {
  const std::string name = GetParam();
  const std::string dir = kRef + "/" + name;
  ASSERT_TRUE(std::filesystem::exists(dir + "/grads.safetensors")) << "reference gradients absent: " << dir;
  TrainOptions opt;
  opt.keep_first_grads = true;
  TrainResult r = train_single_device(model(name), load(dir + "/weights.safetensors"), load(dir + "/inputs.safetensors"), opt);
  auto torch = load(dir + "/grads.safetensors");
  ASSERT_EQ(r.first_grads.size(), torch.size());
  double worst = 0, scale = 0;
  for (auto& [p, expected] : torch) scale = std::max(scale, max_abs(expected));
  for (auto& [p, expected] : torch) {
    ASSERT_TRUE(r.first_grads.count(p)) << p;
    const Tensor& got = r.first_grads[p];
    ASSERT_EQ(got.shape(), expected.shape()) << p;
    const double diff = max_abs(dt::sub(got.to(DType::f64), expected.to(DType::f64)));
    worst = std::max(worst, diff / scale);
    EXPECT_LE(diff, 1e-5 * scale) << p << ": max |ours - torch| " << diff << ", the model's max |torch grad| " << scale;
  }
  std::printf("%s: worst gradient difference %.3g of max |grad|\n", name.c_str(), worst);
}

TEST_P(Reference, FiveSgdStepsMatchPyTorchLosses) {
  const std::string name = GetParam();
  const std::string dir = kRef + "/" + name;
  nlohmann::json cfg = config(name);
  TrainOptions opt;
  opt.steps = 5;
  opt.optimizer.lr = cfg["sgd_lr"].get<double>();
  TrainResult r = train_single_device(model(name), load(dir + "/weights.safetensors"), load(dir + "/inputs.safetensors"), opt);
  auto expected = cfg["sgd_losses"].get<std::vector<double>>();
  ASSERT_EQ(r.losses.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    std::printf("%s step %zu: loss %.9g vs torch %.9g\n", name.c_str(), i + 1, r.losses[i], expected[i]);
    EXPECT_NEAR(r.losses[i], expected[i], 1e-4 * std::abs(expected[i])) << "step " << i + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, Reference, ::testing::Values("mlp", "gpt"));

// Recomputing the blocks' activations (autodiff/recompute.h) runs the same ops on the same values:
// on one device the losses and first-step gradients are bitwise those without it.
TEST_P(Reference, RecomputeGivesBitwiseTheSameStepsOnOneDevice) {
  const std::string name = GetParam();
  const std::string dir = kRef + "/" + name;
  TrainOptions opt;
  opt.steps = 5;
  opt.optimizer.lr = config(name)["sgd_lr"].get<double>();
  opt.keep_first_grads = true;
  const auto weights = load(dir + "/weights.safetensors"), data = load(dir + "/inputs.safetensors");
  const TrainResult kept = train_single_device(model(name), weights, data, opt);
  opt.recompute = autodiff::Recompute::blocks;
  const TrainResult rec = train_single_device(model(name), weights, data, opt);
  EXPECT_EQ(rec.losses, kept.losses);
  for (const auto& [p, g] : kept.first_grads) EXPECT_EQ(rec.first_grads.at(p).to_doubles(), g.to_doubles()) << p;
}

// Sharded training: the reference models' 5 SGD losses on each mesh and plan, within 1e-4
// relative of PyTorch's, and the first step's full gradients within 1e-4 of max |grad|.
struct ShardedCase {
  std::string model, mesh, plan;
  // Recompute the blocks (with the default passes, whose cse must not merge the recomputation
  // back into the forward), and compare with the same run without it too.
  bool recompute = false;
};

class Sharded : public ::testing::TestWithParam<ShardedCase> {};

TEST_P(Sharded, SgdLossesAndGradientsMatchPyTorch) {
  const ShardedCase& c = GetParam();
  const std::string dir = kRef + "/" + c.model;
  nlohmann::json cfg = config(c.model);
  TrainOptions opt;
  opt.steps = 5;
  opt.optimizer.lr = cfg["sgd_lr"].get<double>();
  opt.keep_first_grads = true;
  const ShardedTrainOptions so = sharded_options(c.mesh, c.plan, c.recompute ? "default" : "none");
  if (c.recompute) opt.recompute = autodiff::Recompute::blocks;
  TrainResult r = train_sharded(model(c.model), load(dir + "/weights.safetensors"), load(dir + "/inputs.safetensors"),
                                opt, so);
  auto expected = cfg["sgd_losses"].get<std::vector<double>>();
  ASSERT_EQ(r.losses.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(r.losses[i], expected[i], 1e-4 * std::abs(expected[i])) << "step " << i + 1;
  auto torch = load(dir + "/grads.safetensors");
  double scale = 0;
  for (auto& [p, t] : torch) scale = std::max(scale, max_abs(t));
  for (auto& [p, t] : torch)
    EXPECT_LE(max_abs(dt::sub(r.first_grads.at(p).to(DType::f64), t.to(DType::f64))), 1e-4 * scale) << p;
  std::printf("%s mesh %s%s: losses %.7g .. %.7g, %lld bytes sent per step by the busiest rank\n", c.model.c_str(),
              c.mesh.c_str(), c.recompute ? " recompute" : "", r.losses.front(), r.losses.back(),
              (long long)r.bytes_sent_per_step.front());
  if (!c.recompute) return;
  // Against the same run without recomputation: the same numbers (within 1e-6: the passes may
  // order collectives' reductions differently) and more bytes sent (the recomputed collectives).
  opt.recompute = autodiff::Recompute::none;
  TrainResult kept = train_sharded(model(c.model), load(dir + "/weights.safetensors"),
                                   load(dir + "/inputs.safetensors"), opt, so);
  for (size_t i = 0; i < kept.losses.size(); ++i)
    EXPECT_NEAR(r.losses[i], kept.losses[i], 1e-6 * std::abs(kept.losses[i])) << "step " << i + 1;
  for (auto& [p, t] : kept.first_grads)
    EXPECT_LE(max_abs(dt::sub(r.first_grads.at(p).to(DType::f64), t.to(DType::f64))), 1e-6 * scale) << p;
}

INSTANTIATE_TEST_SUITE_P(Meshes, Sharded,
                         ::testing::Values(ShardedCase{"mlp", "2", "mlp_tp"}, ShardedCase{"mlp", "3", "mlp_tp"},
                                           ShardedCase{"mlp", "4", "mlp_tp"}, ShardedCase{"mlp", "2", "fsdp"},
                                           ShardedCase{"mlp", "4", "fsdp"}, ShardedCase{"gpt", "2", "gpt_tp"},
                                           ShardedCase{"gpt", "4", "gpt_tp"}, ShardedCase{"gpt", "2", "fsdp"},
                                           ShardedCase{"gpt", "2x2", "gpt_fsdp_tp"},
                                           ShardedCase{"mlp", "4", "fsdp", true}, ShardedCase{"gpt", "2", "gpt_tp", true},
                                           ShardedCase{"gpt", "4", "gpt_tp", true}, ShardedCase{"gpt", "2", "fsdp", true},
                                           ShardedCase{"gpt", "2x2", "gpt_fsdp_tp", true}));

// FSDP training issues what FSDP does: one all_gather per parameter (before bucketing, which the
// passes do) and one reduce_scatter per parameter gradient into its shard; no gradient is
// all-reduced or gathered whole. (The two other gathers are mse_loss's operands: its rule keeps
// them whole.)
TEST(ShardedCollectives, FsdpReduceScattersEveryGradientIntoItsShard) {
  const ShardedTrainOptions so = sharded_options("2", "fsdp", "none");
  TrainOptions opt;
  TrainResult r = train_sharded(model("mlp"), load(kRef + "/mlp/weights.safetensors"),
                                load(kRef + "/mlp/inputs.safetensors"), opt, so);
  EXPECT_EQ(r.collectives["reduce_scatter_tensor"], 12);
  EXPECT_EQ(r.collectives["all_gather_into_tensor"], 12 + 2);
  EXPECT_EQ(r.collectives.count("all_reduce"), 0u);
}

// The gradients of `g`'s loss for the given parameters (autodiff, already checked above and by
// grad_check_test), used to drive the independent optimizer loops below.
std::map<std::string, std::vector<double>> gradients(const ir::Graph& forward, const Bindings& bind) {
  ir::Graph g = forward.clone();
  std::vector<ir::Value*> params(g.params().begin(), g.params().end());
  std::vector<ir::Value*> grads = autodiff::append_gradients(g, autodiff::find_loss(g), params);
  g.set_outputs(grads);
  // The gradients here round as the training step's do: on either f32 GEMM path a linear whose
  // weight is writable (these, and the step's, which it updates in place) multiplies the same way
  // (gemm_f32_packed.h). AdamW, which divides by the gradients' own scale, would turn last-bit
  // differences near zero into whole steps (5.8e-5 on fc1 when the two paths differed).
  std::vector<Tensor> out = Interpreter(g).run(bind);
  std::map<std::string, std::vector<double>> m;
  for (size_t i = 0; i < params.size(); ++i) m[params[i]->name] = out[i].to_doubles();
  return m;
}

// Runs `steps` steps of `opt` through train_single_device and through this file's loop (in
// double, from the same gradients), and compares the trained parameters.
void expect_optimizer_matches(const autodiff::OptimizerConfig& opt, int steps) {
  ir::Graph forward = model("mlp");
  auto weights = load(kRef + "/mlp/weights.safetensors");
  auto data = load(kRef + "/mlp/inputs.safetensors");
  TrainOptions to;
  to.steps = steps;
  to.optimizer = opt;
  TrainResult r = train_single_device(forward.clone(), weights, data, to);

  Bindings bind(weights.begin(), weights.end());
  for (auto& [k, v] : data) bind[k] = v;
  std::map<std::string, std::vector<double>> p, m, v, buf;
  for (auto& [k, t] : weights) p[k] = t.to_doubles();
  for (int t = 1; t <= steps; ++t) {
    for (auto& [k, vals] : p) bind[k] = Tensor::from_doubles(vals, weights[k].shape(), DType::f32);
    auto g = gradients(forward, bind);
    for (auto& [k, w] : p) {
      auto& gk = g[k];
      auto& mk = m[k];
      auto& vk = v[k];
      auto& bk = buf[k];
      mk.resize(w.size());
      vk.resize(w.size());
      bk.resize(w.size());
      for (size_t i = 0; i < w.size(); ++i) {
        if (opt.kind == "sgd") {  // torch.optim.SGD, dampening 0, nesterov off
          double d = gk[i] + opt.weight_decay * w[i];
          if (opt.momentum != 0) d = bk[i] = t == 1 ? d : opt.momentum * bk[i] + d;
          w[i] -= opt.lr * d;
        } else {  // torch.optim.AdamW, amsgrad off
          w[i] *= 1 - opt.lr * opt.weight_decay;
          mk[i] = opt.beta1 * mk[i] + (1 - opt.beta1) * gk[i];
          vk[i] = opt.beta2 * vk[i] + (1 - opt.beta2) * gk[i] * gk[i];
          const double mhat = mk[i] / (1 - std::pow(opt.beta1, t));
          const double vhat = vk[i] / (1 - std::pow(opt.beta2, t));
          w[i] -= opt.lr * mhat / (std::sqrt(vhat) + opt.eps);
        }
      }
    }
  }
  for (auto& [k, w] : p) {
    const Tensor expected = Tensor::from_doubles(w, weights[k].shape(), DType::f64);
    const double diff = max_abs(dt::sub(r.state[k].to(DType::f64), expected));
    EXPECT_LE(diff, 1e-5 * std::max(max_abs(expected), 1e-3)) << opt.kind << " " << k;
  }
  if (opt.kind == "adamw") {
    ASSERT_TRUE(r.state.count("layers.0.fc1.weight.step"));
    EXPECT_EQ(r.state["layers.0.fc1.weight.step"].item(), double(steps));
  }
}

TEST(Optimizers, AdamWMatchesTorchFormulas) {
  expect_optimizer_matches({.kind = "adamw", .lr = 1e-2, .weight_decay = 0.01}, 5);
}

TEST(Optimizers, SgdMomentumWeightDecayMatchesTorchFormulas) {
  expect_optimizer_matches({.kind = "sgd", .lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3}, 4);
}

// The updates run in place as one fused loop per parameter (kernels/ops_grad.cc); they must give
// bitwise what the composed tensor ops gave when the updates were functional (every intermediate
// rounded to the storage dtype), for f32, f64 and bf16, and through a non-contiguous parameter
// (updated in a contiguous copy, then copied back). 3x257 elements from a fixed seed.
TEST(Optimizers, InPlaceUpdatesAreBitwiseTheComposedTensorOps) {
  Generator gen(7);
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    auto rand = [&](double lo, double hi) { return dt::add(dt::mul(randn({257, 3}, gen), hi - lo), lo).to(dt); };
    const Tensor p = rand(-1, 1), g = rand(-1, 1), m = rand(-1, 1), v = dt::abs(rand(0, 1));
    {  // SGD with momentum and weight decay: torch's formulas as whole-tensor ops
      const double lr = 0.05, mom = 0.9, wd = 1e-3;
      const Tensor gd = dt::add(g, dt::mul(p, wd));
      const Tensor buf = dt::add(dt::mul(m, mom), gd);
      const Tensor want_p = dt::sub(p, dt::mul(buf, lr));
      Tensor base = p.transpose(0, 1).contiguous();  // the parameter as a transposed view of base
      Tensor param = base.transpose(0, 1), got_m = m.clone();
      dt::sgd_update_(param, g, got_m, lr, mom, wd);
      EXPECT_EQ(param.to_doubles(), want_p.to_doubles());
      EXPECT_EQ(got_m.to_doubles(), buf.to_doubles());
      Tensor plain = p.clone();  // momentum 0: p -= lr * (g + wd * p), no buffer
      dt::sgd_update_(plain, g, Tensor(), lr, 0, wd);
      EXPECT_EQ(plain.to_doubles(), dt::sub(p, dt::mul(gd, lr)).to_doubles());
    }
    {  // AdamW at step 3 (2 taken) with weight decay
      const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01, t = 3;
      const Tensor pd = dt::mul(p, 1 - lr * wd);
      const Tensor m2 = dt::add(dt::mul(m, b1), dt::mul(g, 1 - b1));
      const Tensor v2 = dt::add(dt::mul(v, b2), dt::mul(dt::mul(g, g), 1 - b2));
      const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      const Tensor denom = dt::add(dt::mul(dt::sqrt(v2), 1 / std::sqrt(bc2)), eps);
      const Tensor want_p = dt::sub(pd, dt::mul(dt::div(m2, denom), lr / bc1));
      Tensor param = p.clone(), got_m = m.clone(), got_v = v.clone();
      dt::adamw_update_(param, g, got_m, got_v, t - 1, lr, b1, b2, eps, wd);
      EXPECT_EQ(param.to_doubles(), want_p.to_doubles());
      EXPECT_EQ(got_m.to_doubles(), m2.to_doubles());
      EXPECT_EQ(got_v.to_doubles(), v2.to_doubles());
    }
  }
}

// The step graph's updates write into their operands. Run by a plain interpreter, the caller's
// parameter tensors are copied first and never change; handed over (as the training loop does),
// they are the updated tensors themselves, with the same values and a smaller peak (the new
// parameters and state are not extra results).
TEST(TrainLoop, InPlaceUpdatesWriteBoundParametersOnlyWhenHandedOver) {
  autodiff::TrainStep step = autodiff::make_train_step(model("mlp"), {.kind = "sgd", .lr = 0.1, .momentum = 0.9});
  auto weights = load(kRef + "/mlp/weights.safetensors");
  Bindings bind(weights.begin(), weights.end());
  for (auto& [k, t] : autodiff::fresh_state(step)) bind[k] = t;
  for (auto& [k, v] : load(kRef + "/mlp/inputs.safetensors")) bind[k] = v;
  Bindings before;
  for (auto& [k, t] : bind) before[k] = t.clone();
  Interpreter copying(step.graph);
  RunStats copied_stats, handed_stats;
  const std::vector<Tensor> copied = copying.run(bind, {}, &copied_stats);
  for (auto& [k, t] : bind) EXPECT_EQ(t.to_doubles(), before[k].to_doubles()) << k << " changed";

  Bindings own;
  for (auto& [k, t] : bind) own[k] = t.clone();
  Interpreter handed(step.graph);
  handed.set_update_params_in_place(true);
  const std::vector<Tensor> out = handed.run(own, {}, &handed_stats);
  ASSERT_EQ(out.size(), copied.size());
  for (size_t k = 0; k < step.updates.size(); ++k) {
    const std::string& name = step.updates[k];
    EXPECT_EQ(out[k + 1].raw_data(), own[name].raw_data()) << name << " not updated in place";
    EXPECT_EQ(out[k + 1].to_doubles(), copied[k + 1].to_doubles()) << name;
    EXPECT_NE(out[k + 1].to_doubles(), before[name].to_doubles()) << name << " did not change";
  }
  EXPECT_EQ(out[0].item(), copied[0].item());
  EXPECT_LT(handed_stats.peak_bytes, copied_stats.peak_bytes);
}

// Training copies the weights once at load: the caller's tensors are the same after training, on
// one device and sharded (where ranks would otherwise share a replicated tensor).
TEST(TrainLoop, CallersWeightsAreNeverModified) {
  const auto weights = load(kRef + "/mlp/weights.safetensors");
  const auto data = load(kRef + "/mlp/inputs.safetensors");
  std::map<std::string, std::vector<double>> before;
  for (auto& [k, t] : weights) before[k] = t.to_doubles();
  TrainOptions opt;
  opt.optimizer = {.kind = "sgd", .lr = 0.1, .momentum = 0.9};
  opt.steps = 2;
  const TrainResult one = train_single_device(model("mlp"), weights, data, opt);
  const ShardedTrainOptions so = sharded_options("2", "fsdp", "none");
  const TrainResult two = train_sharded(model("mlp"), weights, data, opt, so);
  for (auto& [k, t] : weights) {
    EXPECT_EQ(t.to_doubles(), before[k]) << k;
    EXPECT_NE(one.state.at(k).to_doubles(), before[k]) << k << " was not trained";
    EXPECT_NE(two.state.at(k).to_doubles(), before[k]) << k << " was not trained";
  }
}

TEST(TrainLoop, ResumingFromSavedStateContinuesTheSameRun) {
  auto weights = load(kRef + "/mlp/weights.safetensors");
  auto data = load(kRef + "/mlp/inputs.safetensors");
  TrainOptions opt;
  opt.optimizer = {.kind = "sgd", .lr = 0.1, .momentum = 0.9};
  opt.steps = 4;
  TrainResult whole = train_single_device(model("mlp"), weights, data, opt);
  opt.steps = 2;
  TrainResult first = train_single_device(model("mlp"), weights, data, opt);
  TrainResult second = train_single_device(model("mlp"), first.state, data, opt);
  ASSERT_EQ(second.losses.size(), 2u);
  EXPECT_DOUBLE_EQ(second.losses[0], whole.losses[2]);
  EXPECT_DOUBLE_EQ(second.losses[1], whole.losses[3]);
}

TEST(TrainLoop, LeadingDimHoldsOneBatchPerStep) {
  auto weights = load(kRef + "/mlp/weights.safetensors");
  auto data = load(kRef + "/mlp/inputs.safetensors");
  // Two batches: the reference batch and its negation; step 3 uses batch 0 again.
  std::map<std::string, Tensor> two;
  for (auto& [k, t] : data) two[k] = dt::cat({t.unsqueeze(0), dt::neg(t).unsqueeze(0)}, 0);
  TrainOptions opt;
  opt.optimizer.lr = 0;  // no update: the loss depends on the batch only
  opt.steps = 3;
  TrainResult r = train_single_device(model("mlp"), weights, two, opt);
  EXPECT_DOUBLE_EQ(r.losses[0], r.losses[2]);
  EXPECT_NE(r.losses[0], r.losses[1]);
}

TEST(TrainLoop, ClearErrors) {
  auto weights = load(kRef + "/mlp/weights.safetensors");
  auto data = load(kRef + "/mlp/inputs.safetensors");
  auto message = [&](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  TrainOptions opt;
  auto bad = data;
  bad["input"] = Tensor::zeros({3, 64});
  EXPECT_NE(message([&] { train_single_device(model("mlp"), weights, bad, opt); }).find("data input has shape [3, 64]"),
            std::string::npos)
      << message([&] { train_single_device(model("mlp"), weights, bad, opt); });
  auto with_adam_state = weights;
  with_adam_state["layers.0.ln.weight.exp_avg"] = Tensor::zeros({64});
  EXPECT_NE(message([&] { train_single_device(model("mlp"), with_adam_state, data, opt); }).find("neither a parameter"),
            std::string::npos);
  opt.optimizer.kind = "adam";
  EXPECT_NE(message([&] { train_single_device(model("mlp"), weights, data, opt); }).find("sgd or adamw"),
            std::string::npos);
  opt.optimizer.kind = "sgd";
  opt.steps = 0;
  EXPECT_NE(message([&] { train_single_device(model("mlp"), weights, data, opt); }).find("steps must be >= 1"),
            std::string::npos);

  // A gradient through an op without a rule names the op.
  ir::Graph g("no_rule");
  ir::Builder b(g);
  ir::Value* w = b.param("w", DType::f32, {4, 6});
  ir::Value* m = b.record(ir::OpKind::cross_entropy_max, {w})[0];
  b.outputs({b.named("loss").sum(m)});
  opt.steps = 1;
  EXPECT_NE(message([&] { train_single_device(std::move(g), {{"w", Tensor::zeros({4, 6})}}, {}, opt); })
                .find("op cross_entropy_max has no gradient rule"),
            std::string::npos);

  // A parameter the loss does not read.
  ir::Graph h("unused");
  ir::Builder hb(h);
  ir::Value* a = hb.param("a", DType::f32, {2});
  hb.param("unused", DType::f32, {2});
  hb.outputs({hb.named("loss").sum(a)});
  EXPECT_NE(message([&] {
              train_single_device(std::move(h), {{"a", Tensor::zeros({2})}, {"unused", Tensor::zeros({2})}}, {}, opt);
            }).find("does not depend on parameter unused"),
            std::string::npos);
}

}  // namespace
}  // namespace dt::job
