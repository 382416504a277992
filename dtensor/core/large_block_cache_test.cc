#include "dtensor/core/large_block_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "dtensor/core/tensor.h"

namespace dt::detail {
namespace {

TEST(LargeBlockCache, RecyclesBlocksOfTheSameRoundedSize) {
  LargeBlockCache& cache = LargeBlockCache::instance();
  const size_t n = (size_t(3) << 20) + 5;  // rounds to a 4 MiB block
  EXPECT_EQ(LargeBlockCache::block_size(n), size_t(4) << 20);
  bool zeroed = false;
  void* a = cache.take(n, &zeroed);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % LargeBlockCache::kAlign, 0u);
  if (zeroed) {
    EXPECT_EQ(static_cast<unsigned char*>(a)[n - 1], 0);
  }
  std::memset(a, 0xab, n);
  cache.give(a, n);
  void* b = cache.take((size_t(4) << 20) - 1, &zeroed);  // same rounded size: the same block back
  EXPECT_EQ(a, b);
  EXPECT_FALSE(zeroed);
  EXPECT_EQ(static_cast<unsigned char*>(b)[0], 0xab);
  cache.give(b, n);
}

TEST(LargeBlockCache, StaysWithinBudget) {
  LargeBlockCache& cache = LargeBlockCache::instance();
  // Giving more than the budget unmaps the oldest blocks; the newest is still handed back.
  const size_t n = size_t(64) << 20;
  std::vector<void*> blocks;
  bool zeroed;
  for (size_t i = 0; i < LargeBlockCache::kBudgetBytes / n + 2; ++i) blocks.push_back(cache.take(n, &zeroed));
  for (void* p : blocks) cache.give(p, n);
  EXPECT_EQ(cache.take(n, &zeroed), blocks.back());
  cache.give(blocks.back(), n);
}

TEST(LargeBlockCache, ZerosAndUninitializedTensorsOfLargeSize) {
  // A recycled buffer must still come back zero-filled from Tensor::zeros.
  const int64_t n = (int64_t(8) << 20) / 4;
  {
    Tensor t = Tensor::uninitialized({n});
    std::memset(t.raw_data(), 0xff, t.nbytes());
  }
  Tensor z = Tensor::zeros({n});
  const float* p = z.data<float>();
  bool all_zero = true;
  for (int64_t i = 0; i < n; ++i) all_zero = all_zero && p[i] == 0.0f;
  EXPECT_TRUE(all_zero);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(z.raw_data()) % 64, 0u);
}

}  // namespace
}  // namespace dt::detail
