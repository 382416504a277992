// Activation recomputation (recompute.h) on small example models (hidden 32-64, 2-3 layers:
// runs in milliseconds): the step graph keeps only block inputs and outputs for the backward,
// prints and parses back, and computes bitwise the same loss, gradients and update as without it.
#include "dtensor/autodiff/recompute.h"

#include <gtest/gtest.h>

#include <set>

#include "tests/support/train_memory.h"
#include "dtensor/autodiff/train_step.h"
#include "dtensor/core/error.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/ir/parser.h"
#include "dtensor/ir/printer.h"
#include "dtensor/ir/verifier.h"
#include "dtensor/runtime/interpreter.h"

namespace dt::autodiff {
namespace {

const ir::GptConfig kGpt{.vocab = 61, .hidden = 32, .heads = 2, .layers = 3, .max_seq = 8, .batch = 2, .seq = 8,
                         .loss = true};

bool is_recompute(const ir::Value* v) { return v->name.find(".recompute") != std::string::npos; }

// The forward values the backward and update of `step` read (autodiff appends after the forward's
// `nf` nodes; recomputed nodes are not forward nodes).
std::set<std::string> saved(const TrainStep& step, size_t nf) {
  std::set<const ir::Node*> fwd;
  for (const ir::Node* n : step.graph.nodes())
    if (fwd.size() < nf && !is_recompute(n->result())) fwd.insert(n);
  std::set<std::string> out;
  for (const ir::Node* n : step.graph.nodes())
    if (!fwd.count(n))
      for (const ir::Value* v : n->operands)
        if (v->producer && fwd.count(v->producer)) out.insert(v->name);
  return out;
}

TEST(Recompute, GptKeepsOnlyBlockInputsAndRecomputesTheRest) {
  const ir::Graph fwd = ir::build_gpt(kGpt);
  const size_t nf = fwd.nodes().size();
  OptimizerConfig opt;
  const TrainStep kept = make_train_step(fwd.clone(), opt);
  const TrainStep rec = make_train_step(fwd.clone(), opt, false, Recompute::blocks);
  ir::verify(rec.graph);
  // The forward nodes are unchanged and come first.
  for (size_t i = 0; i < nf; ++i) EXPECT_FALSE(is_recompute(rec.graph.nodes()[i]->result())) << i;
  const std::set<std::string> before = saved(kept, nf), after = saved(rec, nf);
  // Every block's internals are recomputed: what the backward still reads from the forward is
  // the blocks' inputs (the embedding sum and each block's output), the final layer norm and
  // the logits side, all outside the blocks, and fewer values than before.
  EXPECT_LT(after.size(), before.size());
  for (const std::string& name : after) EXPECT_TRUE(before.count(name) || name == "2") << name;
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(after.count("h." + std::to_string(i) + ".out")) << "block output h." << i;
  EXPECT_FALSE(after.count("h.0.attn.out")) << "inside block h.0: recomputed";
  // One block input view per block, and the first backward reader of each block's values
  // follows all its recomputed ops.
  int views = 0;
  for (const ir::Node* n : rec.graph.nodes())
    if (is_recompute(n->result()) && n->op == ir::OpKind::reshape && n->operands[0]->producer &&
        !is_recompute(n->operands[0]))
      ++views;
  EXPECT_EQ(views, 3);
  // Prints, parses back and verifies.
  const ir::Graph reparsed = ir::parse(ir::print(rec.graph));
  ir::verify(reparsed);
  EXPECT_EQ(reparsed.nodes().size(), rec.graph.nodes().size());
  // Fewer saved bytes: at most the kept activations minus two layers' (three blocks, one
  // block's worth of recomputation is live at a time but not saved).
  const int64_t a_kept = saved_activation_bytes(fwd, opt, Recompute::none);
  const int64_t a_rec = saved_activation_bytes(fwd, opt, Recompute::blocks);
  EXPECT_LT(a_rec * 2, a_kept) << a_rec << " vs " << a_kept;
}

// Runs the step graph once and returns every output (loss, updates, gradients).
std::vector<Tensor> run_step(const TrainStep& step, const std::map<std::string, Tensor>& weights,
                             const std::map<std::string, Tensor>& data) {
  runtime::Bindings bind(weights.begin(), weights.end());
  for (const auto& [k, v] : data) bind[k] = v;
  for (const auto& [k, v] : fresh_state(step)) bind[k] = v;
  runtime::Interpreter interp(step.graph);
  return interp.run(bind);
}

void expect_bitwise_equal_steps(const ir::Graph& fwd, const std::map<std::string, Tensor>& data,
                                const OptimizerConfig& opt) {
  const std::map<std::string, Tensor> weights = ir::random_weights(fwd, /*seed=*/3);
  const TrainStep a = make_train_step(fwd.clone(), opt, /*with_grads=*/true);
  const TrainStep b = make_train_step(fwd.clone(), opt, /*with_grads=*/true, Recompute::blocks);
  const std::vector<Tensor> ra = run_step(a, weights, data), rb = run_step(b, weights, data);
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t i = 0; i < ra.size(); ++i) {
    const Tensor x = ra[i].to(DType::f64), y = rb[i].to(DType::f64);
    ASSERT_EQ(x.shape(), y.shape()) << "output " << i;
    const double* px = x.data<double>();
    const double* py = y.data<double>();
    for (int64_t k = 0; k < x.numel(); ++k) ASSERT_EQ(px[k], py[k]) << "output " << i << " element " << k;
  }
}

TEST(Recompute, GptStepIsBitwiseTheSame) {
  const ir::Graph fwd = ir::build_gpt(kGpt);
  Generator gen(5);
  expect_bitwise_equal_steps(fwd, {{"input", randint({2, 8}, 0, 61, gen)}, {"target", randint({2, 8}, 0, 61, gen)}},
                             OptimizerConfig{.kind = "adamw", .lr = 1e-3, .weight_decay = 0.01});
}

TEST(Recompute, MlpStepIsBitwiseTheSame) {
  const ir::Graph fwd = ir::build_mlp({.hidden = 64, .layers = 2, .batch = 8, .loss = true});
  Generator gen(6);
  expect_bitwise_equal_steps(fwd, {{"input", randn({8, 64}, gen)}, {"target", randn({8, 64}, gen)}},
                             OptimizerConfig{.momentum = 0.9});
}

TEST(Recompute, Errors) {
  EXPECT_THROW(parse_recompute("all"), ValueError);
  EXPECT_EQ(parse_recompute("blocks"), Recompute::blocks);
  EXPECT_EQ(parse_recompute("none"), Recompute::none);
  ir::Graph g = ir::parse(R"(graph flat {
  input %x : f32[4, 3]
  input %t : f32[4, 2]
  param %w : f32[2, 3]
  param %layer.weight_1 : f32[2]
  %y = linear(%x, %w, %layer.weight_1) : f32[4, 2]
  %loss = mse_loss(%y, %t) : f32[]
  return %loss
})");
  try {
    make_train_step(std::move(g), OptimizerConfig{}, false, Recompute::blocks);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("has no blocks"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dt::autodiff
