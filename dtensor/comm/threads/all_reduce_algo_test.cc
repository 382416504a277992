// ProcessGroup::all_reduce_with_algo on the threads backend: the requested algorithm runs
// whatever the size threshold says, both give the same bits, and ranks requesting different
// algorithms get an error instead of a hang.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/comm/threads/threads_process_group.h"
#include "dtensor/core/error.h"

namespace dt {
namespace {

// Returns rank r's input: 1000 floats with rounding-sensitive values.
std::vector<float> input(int r) {
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 1.0f / float(i + 1) + float(r) * 1e-3f * float(i % 7);
  return v;
}

TEST(ThreadsAllReduceAlgo, RequestedAlgorithmRunsAndResultsAgreeBitwise) {
  for (size_t threshold : {size_t(0), SIZE_MAX}) {
    SCOPED_TRACE(testing::Message() << "one_shot_threshold " << threshold);
    CommOptions options;
    options.one_shot_threshold = threshold;
    std::array<int64_t, 3> runs{};
    run_ranks(
        4,
        [&](ProcessGroup& pg) {
          auto& world = dynamic_cast<threads::ThreadsProcessGroup&>(pg).world();
          std::vector<float> one = input(pg.rank()), two = one, autom = one;
          pg.all_reduce_with_algo(one.data(), one.size(), DType::f32, ReduceOp::sum, AllReduceAlgo::one_shot)->wait();
          pg.barrier()->wait();
          if (pg.rank() == 0) {
            EXPECT_EQ(world.all_reduce_runs(AllReduceAlgo::one_shot), 4);
          }
          pg.all_reduce_with_algo(two.data(), two.size(), DType::f32, ReduceOp::sum, AllReduceAlgo::two_shot)->wait();
          pg.all_reduce(autom.data(), autom.size(), DType::f32, ReduceOp::sum)->wait();
          EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
          EXPECT_EQ(std::memcmp(one.data(), autom.data(), one.size() * sizeof(float)), 0);
          pg.barrier()->wait();
          if (pg.rank() == 0)
            for (AllReduceAlgo a : {AllReduceAlgo::automatic, AllReduceAlgo::one_shot, AllReduceAlgo::two_shot})
              runs[size_t(a)] = world.all_reduce_runs(a);
        },
        options);
    // The plain all_reduce resolves by threshold: two-shot at 0, one-shot at SIZE_MAX.
    EXPECT_EQ(runs[size_t(AllReduceAlgo::one_shot)], threshold == 0 ? 4 : 8);
    EXPECT_EQ(runs[size_t(AllReduceAlgo::two_shot)], threshold == 0 ? 8 : 4);
    EXPECT_EQ(runs[size_t(AllReduceAlgo::automatic)], 0);
  }
}

TEST(ThreadsAllReduceAlgo, DifferentRequestsAcrossRanksFail) {
  try {
    run_ranks(2, [](ProcessGroup& pg) {
      std::vector<float> x(10, 1.0f);
      AllReduceAlgo a = pg.rank() == 0 ? AllReduceAlgo::one_shot : AllReduceAlgo::two_shot;
      pg.all_reduce_with_algo(x.data(), x.size(), DType::f32, ReduceOp::sum, a)->wait();
    });
    FAIL() << "expected a CommError";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("(algorithm one_shot vs two_shot)"), std::string::npos) << e.what();
  }
}

TEST(ThreadsAllReduceAlgo, ParsesAndNamesAlgorithms) {
  for (AllReduceAlgo a : {AllReduceAlgo::automatic, AllReduceAlgo::one_shot, AllReduceAlgo::two_shot})
    EXPECT_EQ(parse_all_reduce_algo(all_reduce_algo_name(a)), a);
  EXPECT_THROW(parse_all_reduce_algo("three_shot"), ValueError);
}

}  // namespace
}  // namespace dt
