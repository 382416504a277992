// A whole gpt forward at hidden 512 (8 heads, vocabulary 1000, 2 layers, 2 x 64 tokens; seeded
// weights and tokens) is bitwise identical for 1, 2 and 3 threads per rank (dtensor/core/parallel.h):
// every GEMM, attention, layer_norm, gelu and add on the way splits at these sizes.
#include <gtest/gtest.h>

#include <cstring>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/core/parallel.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/example_models.h"
#include "dtensor/runtime/interpreter.h"

namespace dt::runtime {
namespace {

TEST(ParallelGpt, ForwardAtHidden512BitwiseAcrossThreadCounts) {
  const ir::Graph g = ir::build_gpt({.vocab = 1000, .hidden = 512, .heads = 8, .layers = 2, .max_seq = 64,
                                     .batch = 2, .seq = 64});
  Bindings b;
  for (auto& [name, t] : ir::random_weights(g, 7)) b[name] = t;
  Generator gen(11);
  b["input"] = randint({2, 64}, 0, 1000, gen);
  auto forward = [&](int threads) {
    set_threads_per_rank(threads);
    std::vector<Tensor> out;
    run_ranks(1, [&](ProcessGroup& world) { out = Interpreter(g).run(b, make_groups(g, world)); });
    return out.at(0).contiguous();
  };
  const Tensor ref = forward(1);
  ASSERT_EQ(ref.shape(), (Shape{2, 64, 1000}));
  for (int n : {2, 3}) {
    const Tensor got = forward(n);
    ASSERT_EQ(got.shape(), ref.shape());
    EXPECT_EQ(std::memcmp(got.raw_data(), ref.raw_data(), size_t(ref.numel()) * sizeof(float)), 0)
        << "gpt logits differ with " << n << " threads";
  }
  set_threads_per_rank(1);
}

}  // namespace
}  // namespace dt::runtime
