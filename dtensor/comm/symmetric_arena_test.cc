#include "dtensor/comm/symmetric_arena.h"

#include <gtest/gtest.h>

#include <mutex>

#include "dtensor/comm/threads/run_ranks.h"
#include "dtensor/core/error.h"

namespace dt {
namespace {

// The same allocation sequence gives the same offsets on 4 ranks in each of 3 iterations, and a
// peer's buffer is readable at base(peer) + offset.
TEST(SymmetricArena, SameOffsetsOnEveryRankAndIteration) {
  SymmetricArena arena(4, 1 << 16);
  const std::vector<size_t> sizes = {100, 0, 4096, 1, 64, 777};
  std::vector<std::vector<size_t>> offsets(4);  // per rank, all iterations
  run_ranks(4, [&](ProcessGroup& world) {
    const int r = world.rank();
    for (int it = 0; it < 3; ++it) {
      arena.begin_iteration(r);
      for (size_t s : sizes) {
        size_t off = arena.allocate(r, s);
        offsets[size_t(r)].push_back(off);
        std::memset(arena.base(r) + off, r + 1, s);
      }
      world.barrier()->wait();
      // Read every peer's last buffer through the symmetric offset.
      size_t off = offsets[size_t(r)].back();
      for (int p = 0; p < 4; ++p) EXPECT_EQ(int(arena.base(p)[off]), p + 1);
      world.barrier()->wait();
    }
  });
  for (int r = 1; r < 4; ++r) EXPECT_EQ(offsets[size_t(r)], offsets[0]);
  ASSERT_EQ(offsets[0].size(), sizes.size() * 3);
  for (size_t k = 0; k < sizes.size(); ++k) {
    EXPECT_EQ(offsets[0][k] % SymmetricArena::kAlignment, 0u);
    EXPECT_EQ(offsets[0][k + sizes.size()], offsets[0][k]);
    EXPECT_EQ(offsets[0][k + 2 * sizes.size()], offsets[0][k]);
  }
  EXPECT_EQ(offsets[0][1], 128u);  // 100 bytes rounded up to 64-byte alignment
}

TEST(SymmetricArena, RejectsAsymmetricSequencesAndOverflow) {
  SymmetricArena arena(2, 1024);
  arena.begin_iteration(0);
  arena.begin_iteration(1);
  arena.allocate(0, 100);
  arena.allocate(0, 100);  // at 128
  arena.allocate(1, 200);  // same offset 0, another size (an uneven shard): fine
  try {
    arena.allocate(1, 50);  // at 256, but rank 0's second buffer is at 128
    FAIL() << "no error";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 buffer 1 is 50 bytes at offset 256, but the agreed buffer is 100 "
                                         "bytes at offset 128"),
              std::string::npos)
        << e.what();
  }
  arena.begin_iteration(0);
  EXPECT_THROW(arena.place(0, 0, 4096), CommError);
  EXPECT_THROW(arena.place(0, 3, 8), ValueError);
}

TEST(SymmetricArena, TensorsViewTheRegion) {
  SymmetricArena arena(2, 256);
  Tensor t = arena.tensor(1, 64, DType::f32, {4});
  t.fill_(2.5);
  EXPECT_EQ(reinterpret_cast<float*>(arena.base(1) + 64)[3], 2.5f);
  EXPECT_EQ(reinterpret_cast<float*>(arena.base(0) + 64)[3], 0.0f);
}

}  // namespace
}  // namespace dt
