// tp-overlap on the example gpt (examples/gpt_tp.json): the cost model splits where comm pays for
// the extra collectives and the concat and keeps tiny shapes (counted in all_reduces); forced on,
// the forward on tp 2 and 4 and the training losses and trained state on tp 2 are bitwise those of
// the plain order, with the cross-rank collective-order proof on after every pass (Job::compile).
#include <gtest/gtest.h>

#include <cstring>

#include "dtensor/core/rng.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/job/job.h"
#include "dtensor/job/train.h"
#include "dtensor/passes/tp_overlap.h"

namespace dt::passes {
namespace {

using Mode = PassOptions::TpOverlap;

// Large enough for chunks of whole GEMM row quanta (kernels/gemm_panels.h): 384 rows.
const ir::GptConfig kSmall = {.vocab = 64, .hidden = 128, .heads = 4, .layers = 2, .max_seq = 96, .batch = 4, .seq = 96};

job::JobOptions tp_options(int tp, Mode mode, int chunks) {
  job::JobOptions jo;
  jo.mesh = DeviceMesh::parse(std::to_string(tp));
  jo.plan = sharding::ParallelPlan::load(std::string(DTENSOR_SOURCE_DIR) + "/examples/gpt_tp.json");
  if (jo.plan.inputs.count("input")) jo.plan.inputs["target"] = jo.plan.inputs["input"];
  jo.passes.options.tp_overlap = mode;
  jo.passes.options.tp_overlap_chunks = chunks;
  jo.passes.options.one_shot_threshold_bytes = 0;  // the small model's chunks stay asynchronous
  return jo;
}

int all_reduces(const ir::Graph& g) {
  int n = 0;
  for (const auto& node : g.nodes())
    n += node->op == ir::OpKind::all_reduce_ || node->op == ir::OpKind::all_reduce || node->op == ir::OpKind::one_shot_all_reduce;
  return n;
}

int adds(const ir::Graph& g) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op == ir::OpKind::add;
  return n;
}

void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  Tensor x = a.contiguous(), y = b.contiguous();
  ASSERT_EQ(x.shape(), y.shape()) << what;
  EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()), 0) << what;
}

// Large (the anchor gpt) against tiny shapes, on a machine whose all_reduce is slow (1 GB/s): the
// anchor's 2 MiB all_reduces split, the tiny model's 8 KiB ones do not. With the default constants
// (10 GB/s) the concat costs more than the all_reduce it hides: nothing splits.
TEST(TpOverlap, CostModelSplitsLargeAndKeepsTiny) {
  const ir::GptConfig anchor = {.vocab = 4096, .hidden = 512, .heads = 8, .layers = 4, .max_seq = 256, .batch = 4, .seq = 256};
  const ir::GptConfig tiny = {.vocab = 64, .hidden = 32, .heads = 4, .layers = 4, .max_seq = 32, .batch = 2, .seq = 32};
  auto count = [](const ir::GptConfig& m, double beta_gbs) {
    job::JobOptions jo = tp_options(2, Mode::automatic, 0);
    jo.passes.options.one_shot_threshold_bytes = 256 * 1024;
    jo.passes.options.comm.beta_gbs = beta_gbs;
    jo.ranks = {0};
    return all_reduces(job::Job::compile(ir::build_gpt(m), std::move(jo)).program(0));
  };
  EXPECT_EQ(count(anchor, 10.0), 8);  // 4 layers x (o_proj, fc_out)
  EXPECT_GT(count(anchor, 1.0), 8 * 2);
  EXPECT_EQ(count(tiny, 1.0), 8);
  // The choice itself: k in [2, 8], below what the one-shot threshold would make blocking.
  PassOptions o;
  o.comm.beta_gbs = 1.0;
  const TpOverlapChoice c = choose_tp_overlap(2.0 * 1024 * 1024 * 512, 1024, 2 << 20, o);
  EXPECT_GE(c.chunks, 2);
  EXPECT_LT(c.chunks, 8);  // 8 chunks of 256 KiB would be one-shots
  EXPECT_EQ(c.chunk_rows % 48, 0);
  EXPECT_LT(c.split_us, c.plain_us);
  EXPECT_EQ(choose_tp_overlap(2.0 * 8 * 32 * 32, 8, 8 * 32 * 4, o).chunks, 1);
  o.tp_overlap = Mode::off;
  EXPECT_EQ(choose_tp_overlap(2.0 * 1024 * 1024 * 512, 1024, 2 << 20, o).chunks, 1);
}

TEST(TpOverlap, ForwardBitwiseOnTp2And4) {
  const ir::Graph model = ir::build_gpt(kSmall);
  const job::TensorMap weights = ir::random_weights(model, 3);
  Generator gen(5);
  const job::TensorMap inputs = {{"input", randint({kSmall.batch, kSmall.seq}, 0, kSmall.vocab, gen, DType::i64)}};
  for (auto [tp, chunks] : {std::pair{2, 2}, std::pair{2, 3}, std::pair{4, 2}}) {
    SCOPED_TRACE("tp " + std::to_string(tp) + ", " + std::to_string(chunks) + " chunks");
    const job::Job plain = job::Job::compile(model, tp_options(tp, Mode::off, 0));
    const job::Job split = job::Job::compile(model, tp_options(tp, Mode::on, chunks));
    // Per block, fc_out's all_reduce at least (o_proj's too where its chunks are large enough).
    EXPECT_GE(all_reduces(split.program(0)), all_reduces(plain.program(0)) + int(kSmall.layers) * (chunks - 1));
    // Group index 0 adds the residual to each chunk before its reduction (add_rule: the residual
    // added once); the other ranks add no residual, split or not.
    EXPECT_GE(adds(split.program(0)), adds(plain.program(0)) + int(kSmall.layers) * (chunks - 1));
    for (int r = 1; r < tp; ++r) EXPECT_EQ(adds(split.program(r)), adds(plain.program(r))) << "rank " << r;
    const job::RunResult a = plain.run(job::Weights::full(weights), inputs);
    const job::RunResult b = split.run(job::Weights::full(weights), inputs);
    ASSERT_EQ(a.outputs.size(), b.outputs.size());
    for (size_t k = 0; k < a.outputs.size(); ++k) expect_same_bits(a.outputs[k], b.outputs[k], "output");
  }
}

// The training step's backward has rowwise all_reduces too (the input gradients of the colwise
// linears): split as well, the losses and the trained state are the same bits.
TEST(TpOverlap, TrainingBitwiseOnTp2) {
  ir::GptConfig m = kSmall;
  m.loss = true;
  const ir::Graph model = ir::build_gpt(m);
  const job::TensorMap weights = ir::random_weights(model, 3);
  Generator gen(5);
  const job::TensorMap data = {{"input", randint({m.batch, m.seq}, 0, m.vocab, gen, DType::i64)},
                               {"target", randint({m.batch, m.seq}, 0, m.vocab, gen, DType::i64)}};
  job::TrainOptions opt;
  opt.steps = 3;
  auto train = [&](Mode mode, int* backward_splits) {
    job::ShardedTrainOptions so;
    so.job = tp_options(2, mode, 2);
    so.on_compiled = [&](const job::Job& j) { *backward_splits = all_reduces(j.program(0)); };
    return job::train_sharded(model.clone(), weights, data, opt, so);
  };
  int plain_ars = 0, split_ars = 0;
  const job::TrainResult a = train(Mode::off, &plain_ars);
  const job::TrainResult b = train(Mode::on, &split_ars);
  // Forward (each fc_out) and backward (each fc_in's input gradient) split; o_proj's and
  // lm_head's GEMMs are too small here for two whole chunks.
  EXPECT_GE(split_ars - plain_ars, 2 * int(m.layers));
  EXPECT_EQ(a.losses, b.losses);
  ASSERT_EQ(a.state.size(), b.state.size());
  for (const auto& [name, t] : a.state) expect_same_bits(t, b.state.at(name), name);
}

}  // namespace
}  // namespace dt::passes
