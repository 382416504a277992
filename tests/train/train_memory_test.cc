// The fsdp memory of a training step (compile only: the per-rank programs are built and their
// peak estimated with passes/memory_estimate.h, which is the interpreter's own accounting of live
// results; nothing runs, so the anchor config of `dtensor bench train` is cheap here).
//
// gpt hidden 512, 4 layers, 8 heads, vocabulary 4096, batch 4, seq 256, SGD with momentum 0.9, on
// fsdp over 4 ranks with the default passes. A rank's peak (its parameter and state shards plus its
// estimated peak of live results) must stay within 1/4 of the one-device parameter + gradient +
// state bytes plus one layer's gathered parameters plus every layer's saved activations on 1/4 of
// the batch (tests/support/train_memory.h): gathered parameters are freed after the forward and
// gathered again for the backward (reshard-after-forward), gathers are prefetched one ahead, and
// the loss never gathers the logits rows. Without those the peak held the whole gathered model
// and the whole batch's logits (109 MiB of results instead of 49). The issue's own goal counts
// one layer's activations only: with the blocks' activations recomputed in the backward
// (autodiff/recompute.h) the peak is within it on 4 ranks and, since the optimizer updates write
// in place, on 2.
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/support/train_memory.h"
#include "dtensor/autodiff/train_step.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/passes/memory_estimate.h"
#include "dtensor/passes/pass_manager.h"
#include "dtensor/passes/rank_pipeline.h"
#include "dtensor/sharding/compiler.h"
#include "dtensor/sharding/train_step_placement.h"
#include "tests/train/fsdp_plan.h"

namespace dt::sharding {
namespace {

const ir::GptConfig kAnchor{.vocab = 4096, .hidden = 512, .heads = 8, .layers = 4, .max_seq = 256, .batch = 4,
                            .seq = 256, .loss = true};

// The largest rank peak (held shards + estimated live results) of the step on `ranks` ranks after
// the pipeline `passes`.
int64_t rank_peak(const autodiff::OptimizerConfig& opt, int ranks, const std::string& passes,
                  autodiff::Recompute recompute = autodiff::Recompute::none) {
  autodiff::TrainStep step = autodiff::make_train_step(ir::build_gpt(kAnchor), opt, false, recompute);
  CompiledModel c = compile_train_step(step, fsdp_plan(), DeviceMesh::parse(std::to_string(ranks)));
  passes::PassManager pm;
  pm.add(passes::parse_pipeline(passes));
  passes::run_rank_pipelines(pm, c.programs, c.ranks);
  int64_t peak = 0;
  for (const ir::Graph& program : c.programs) {
    int64_t held = 0;
    for (const ir::Value* p : program.params()) held += int64_t(p->type.nbytes());
    peak = std::max(peak, held + passes::estimate_peak_bytes(program));
  }
  return peak;
}

// The default pipeline without one pass.
std::string default_without(std::string_view pass) {
  std::string spec;
  for (std::string_view p : passes::default_pipeline())
    if (p != pass) spec.append(spec.empty() ? "" : ",").append(p);
  return spec;
}

TEST(TrainMemory, FsdpFourRanksPeakWithinShardedStatePlusOneLayerPlusActivations) {
  autodiff::OptimizerConfig opt;
  opt.momentum = 0.9;
  const autodiff::FsdpMemoryTerms t = autodiff::fsdp_memory_terms(kAnchor, opt);
  EXPECT_EQ(t.state, t.params) << "momentum: one buffer per parameter";
  const int64_t peak = rank_peak(opt, 4, "default");
  const int64_t kept = rank_peak(opt, 4, default_without("reshard-after-forward"));
  const double mib = 1 << 20;
  std::printf("fsdp 4: rank peak %.1f MiB (gathered parameters kept for the backward: %.1f MiB); goal with every "
              "layer's activations %.1f MiB, the issue's goal (one layer's) %.1f MiB (peak/goal %.2f)\n",
              double(peak) / mib, double(kept) / mib, double(t.goal_keeping_activations(4)) / mib,
              double(t.goal(4)) / mib, double(peak) / double(t.goal(4)));
  EXPECT_LE(peak, t.goal_keeping_activations(4));
  // Resharding after the forward is what brings it there: kept, the gathered model is live at once.
  EXPECT_LT(peak + t.layer_params, kept);
}

// Asserts that a rank's fsdp peak on `ranks` ranks with recompute (SGD with momentum) is within
// the goal as written: one layer's gathered parameters and activations.
void expect_recompute_peak_within_goal(int ranks) {
  autodiff::OptimizerConfig opt;
  opt.momentum = 0.9;
  const autodiff::FsdpMemoryTerms t = autodiff::fsdp_memory_terms(kAnchor, opt);
  const int64_t peak = rank_peak(opt, ranks, "default", autodiff::Recompute::blocks);
  const double mib = 1 << 20;
  std::printf("fsdp %d with recompute: rank peak %.1f MiB, the issue's goal %.1f MiB (peak/goal %.2f)\n", ranks,
              double(peak) / mib, double(t.goal(ranks)) / mib, double(peak) / double(t.goal(ranks)));
  EXPECT_LE(peak, t.goal(ranks));
}

TEST(TrainMemory, FsdpFourRanksWithRecomputeWithinTheGoalAsWritten) { expect_recompute_peak_within_goal(4); }

// Two ranks hold half the model each, so the optimizer weighs more: with the updates written in
// place (ops_optim.cc) a rank never holds its parameter and state shards twice, which is what took
// the peak over the goal (133.7 MiB against 124.9 when the updates were functional), and each
// update runs as soon as its gradient is complete (101.6 MiB estimated when written).
TEST(TrainMemory, FsdpTwoRanksWithRecomputeWithinTheGoalAsWritten) { expect_recompute_peak_within_goal(2); }

}  // namespace
}  // namespace dt::sharding
