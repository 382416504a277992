// Differential numerics of every golden case: the pass's input and its expected output run on
// the interpreter over the threads backend (one thread per rank, world = the highest rank any
// group names + 1) with the same seeded random inputs, and every output must be bitwise equal:
// bucketing moves data without arithmetic and the threads backend reduces in rank order, so
// even the reduce_scatter and all_reduce buckets and one-shot vs two-shot agree to the bit.
// Then the default pipeline on each input must give the same bits too.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/comm/threads/threads_process_group.h"
#include "dtensor/core/rng.h"
#include "dtensor/ir/parser.h"
#include "dtensor/passes/buffer_planner.h"
#include "tests/support/golden_case.h"
#include "dtensor/passes/pass_manager.h"
#include "dtensor/runtime/interpreter.h"

namespace dt::passes {
namespace {

int world_size(const ir::Graph& g) {
  int n = 1;
  for (const ir::GroupDecl& d : g.groups())
    for (int r : d.ranks) n = std::max(n, r + 1);
  return n;
}

runtime::Bindings random_bindings(const ir::Graph& g, int rank) {
  runtime::Bindings b;
  auto bind = [&](const ir::Value* v) {
    Generator gen(uint64_t(1000 + rank) * 7919u + std::hash<std::string>{}(v->name) % 1000);
    if (is_floating(v->type.dtype))
      b[v->name] = randn(v->type.shape, gen, v->type.dtype);
    else
      b[v->name] = randint(v->type.shape, -50, 50, gen, v->type.dtype);
  };
  for (const ir::Value* v : g.inputs()) bind(v);
  for (const ir::Value* v : g.params()) bind(v);
  return b;
}

// Returns, per rank, the outputs of `g` run on its world; comm buffers the program placed
// (arena_offset) live in a symmetric arena shared by the ranks, as in `dtensor run`.
std::vector<std::vector<Tensor>> run_on_ranks(const ir::Graph& g, int n) {
  std::vector<std::vector<Tensor>> outs(static_cast<size_t>(n));
  const size_t arena_bytes = check_comm_buffer_plan(g);
  auto arena = arena_bytes ? std::make_shared<SymmetricArena>(n, arena_bytes) : nullptr;
  run_ranks(n, [&](ProcessGroup& world) {
    runtime::GroupMap groups = runtime::make_groups(g, world);
    // A per-rank program runs on the ranks of its groups; the others ([1, 3, 5] for a group
    // [0, 2, 4, 6]) have nothing to do.
    if (groups.size() != g.groups().size()) return;
    runtime::Interpreter interp(g);
    if (arena) interp.set_comm_arena(arena, world.rank());
    outs[size_t(world.rank())] = interp.run(random_bindings(g, world.rank()), groups);
  });
  return outs;
}

void expect_bitwise(const std::vector<std::vector<Tensor>>& a, const std::vector<std::vector<Tensor>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].size(), b[r].size());
    for (size_t i = 0; i < a[r].size(); ++i) {
      SCOPED_TRACE(testing::Message() << "rank " << r << " output " << i);
      Tensor x = a[r][i].contiguous(), y = b[r][i].contiguous();
      ASSERT_EQ(x.shape(), y.shape());
      ASSERT_EQ(x.dtype(), y.dtype());
      EXPECT_EQ(std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()), 0) << x.str();
    }
  }
}

TEST(PassesNumerics, GoldenOutputsComputeTheSameBits) {
  size_t n = 0;
  for (const PassInfo& info : registered_passes()) {
    for (const GoldenCase& c : golden_cases(DTENSOR_PASSES_GOLDEN_DIR, info.name)) {
      SCOPED_TRACE(c.input.string());
      ir::Graph before = ir::parse_file(c.input.string());
      ir::Graph after = ir::parse_file(c.expected.string());
      int world = world_size(before);
      auto ref = run_on_ranks(before, world);
      expect_bitwise(ref, run_on_ranks(after, world));
      ir::Graph full = ir::parse_file(c.input.string());
      PassManager pm;
      pm.add(parse_pipeline("default", c.options));
      pm.run(full);
      expect_bitwise(ref, run_on_ranks(full, world));
      ++n;
    }
  }
  EXPECT_GE(n, 15u);
}

// The `algo` that comm lowering puts on all_reduce_ (and one_shot_all_reduce's one-shot) is the
// algorithm the threads backend runs, whatever its size threshold would pick, and both
// algorithms give the same bits.
TEST(PassesNumerics, AllReduceAlgoAttributeIsHonoured) {
  ir::Graph g = ir::parse(R"(graph algo {
  group w = [0, 1, 2, 3]
  input %x : f32[4, 64]
  %x1 = clone(%x) : f32[4, 64]
  %a = all_reduce_(%x1) {group = w, algo = "one_shot"} : f32[4, 64]
  %aw = wait_tensor(%a) : f32[4, 64]
  %x2 = clone(%x) : f32[4, 64]
  %b = all_reduce_(%x2) {group = w, algo = "two_shot"} : f32[4, 64]
  %bw = wait_tensor(%b) : f32[4, 64]
  %c = one_shot_all_reduce(%x) {group = w} : f32[4, 64]
  return %aw, %bw, %c
})");
  // 1 KiB buffers: threshold 0 would pick two-shot for all, SIZE_MAX one-shot for all.
  for (size_t threshold : {size_t(0), SIZE_MAX}) {
    SCOPED_TRACE(testing::Message() << "one_shot_threshold " << threshold);
    CommOptions options;
    options.one_shot_threshold = threshold;
    options.check_collectives = true;
    std::vector<std::vector<Tensor>> outs(4);
    std::array<int64_t, 3> runs{};
    run_ranks(
        4,
        [&](ProcessGroup& world) {
          runtime::GroupMap groups = runtime::make_groups(g, world);
          runtime::Interpreter interp(g);
          outs[size_t(world.rank())] = interp.run(random_bindings(g, world.rank()), groups);
          world.barrier()->wait();  // every rank's all_reduce runs are counted
          if (world.rank() == 0) {
            auto& tw = dynamic_cast<threads::ThreadsProcessGroup&>(world).world();
            for (AllReduceAlgo a : {AllReduceAlgo::automatic, AllReduceAlgo::one_shot, AllReduceAlgo::two_shot})
              runs[size_t(a)] = tw.all_reduce_runs(a);
          }
        },
        options);
    EXPECT_EQ(runs[size_t(AllReduceAlgo::one_shot)], 8);  // %a and %c on 4 ranks
    EXPECT_EQ(runs[size_t(AllReduceAlgo::two_shot)], 4);  // %b on 4 ranks
    EXPECT_EQ(runs[size_t(AllReduceAlgo::automatic)], 0);
    for (size_t r = 0; r < 4; ++r) {
      SCOPED_TRACE(testing::Message() << "rank " << r);
      ASSERT_EQ(outs[r].size(), 3u);
      for (int i : {1, 2})
        EXPECT_EQ(std::memcmp(outs[r][0].contiguous().raw_data(), outs[r][size_t(i)].contiguous().raw_data(),
                              outs[r][0].nbytes()),
                  0)
            << "output " << i;
      if (r > 0) {
        EXPECT_EQ(std::memcmp(outs[0][0].contiguous().raw_data(), outs[r][0].contiguous().raw_data(),
                              outs[0][0].nbytes()),
                  0);
      }
    }
  }
}

}  // namespace
}  // namespace dt::passes
