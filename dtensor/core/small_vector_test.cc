#include "dtensor/core/small_vector.h"

#include <gtest/gtest.h>

#include <list>
#include <numeric>
#include <utility>
#include <vector>

namespace dt {
namespace {

using Vec = SmallVector<int64_t, 6>;

// Returns {0, 1, ..., n-1}.
Vec iota_vec(size_t n) {
  Vec v(n);
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

std::vector<int64_t> to_std(const Vec& v) { return std::vector<int64_t>(v.begin(), v.end()); }

TEST(SmallVector, StaysInlineUpToCapacityThenMovesToHeap) {
  Vec v;
  EXPECT_TRUE(v.empty());
  for (int64_t i = 0; i < 6; ++i) v.push_back(i);
  EXPECT_TRUE(v.is_inline());
  EXPECT_EQ(v.size(), 6u);
  v.push_back(6);
  EXPECT_FALSE(v.is_inline());
  for (int64_t i = 7; i < 100; ++i) v.push_back(i);
  ASSERT_EQ(v.size(), 100u);
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(v[size_t(i)], i);
  EXPECT_EQ(v.front(), 0);
  EXPECT_EQ(v.back(), 99);
  v.pop_back();
  EXPECT_EQ(v.back(), 98);
  EXPECT_EQ(v.size(), 99u);
}

TEST(SmallVector, PushBackOfOwnElementWhileGrowing) {
  Vec v = iota_vec(6);
  v.push_back(v[2]);  // the reference dies when the elements move to the heap
  EXPECT_EQ(to_std(v), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 2}));
}

// Copies and moves, from inline and from heap storage, into empty, inline and heap targets.
class SmallVectorCopyMove : public ::testing::TestWithParam<std::pair<size_t, size_t>> {};

TEST_P(SmallVectorCopyMove, CopyAndMoveKeepTheElements) {
  auto [source_size, target_size] = GetParam();
  const Vec source = iota_vec(source_size);
  const std::vector<int64_t> want = to_std(source);

  Vec copied(source);
  EXPECT_EQ(to_std(copied), want);
  EXPECT_EQ(copied.is_inline(), source_size <= 6);
  if (!want.empty()) {
    EXPECT_NE(copied.data(), source.data());
  }

  Vec assigned = iota_vec(target_size);
  assigned = source;
  EXPECT_EQ(to_std(assigned), want);

  Vec from = source;
  const int64_t* heap = from.data();
  Vec moved(std::move(from));
  EXPECT_EQ(to_std(moved), want);
  EXPECT_TRUE(from.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty and usable
  EXPECT_TRUE(from.is_inline());
  if (source_size > 6) {
    EXPECT_EQ(moved.data(), heap);  // the heap block changes hands
  }
  from.push_back(7);
  EXPECT_EQ(to_std(from), (std::vector<int64_t>{7}));

  Vec move_assigned = iota_vec(target_size);
  Vec from2 = source;
  move_assigned = std::move(from2);
  EXPECT_EQ(to_std(move_assigned), want);
  EXPECT_TRUE(from2.empty());  // NOLINT(bugprone-use-after-move)

  Vec self = source;
  Vec& alias = self;
  self = alias;
  EXPECT_EQ(to_std(self), want);
}

INSTANTIATE_TEST_SUITE_P(InlineAndHeap, SmallVectorCopyMove,
                         ::testing::Values(std::pair<size_t, size_t>{0, 0}, std::pair<size_t, size_t>{1, 0},
                                           std::pair<size_t, size_t>{6, 3}, std::pair<size_t, size_t>{7, 2},
                                           std::pair<size_t, size_t>{3, 9}, std::pair<size_t, size_t>{13, 20},
                                           std::pair<size_t, size_t>{20, 13}));

TEST(SmallVector, Equality) {
  EXPECT_EQ(Vec({1, 2, 3}), Vec({1, 2, 3}));
  EXPECT_NE(Vec({1, 2, 3}), Vec({1, 2}));
  EXPECT_NE(Vec({1, 2, 3}), Vec({1, 2, 4}));
  EXPECT_EQ(Vec(), Vec());
  EXPECT_EQ(iota_vec(10), iota_vec(10));  // heap vs heap
  Vec grown = iota_vec(10);
  grown.resize(3);  // heap storage, 3 elements
  EXPECT_EQ(grown, iota_vec(3));
  EXPECT_TRUE(Vec({1, 2}) == (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE((std::vector<int64_t>{1, 2}) != Vec({1, 3}));
  EXPECT_TRUE(Vec({1, 2}) < Vec({1, 3}));
  EXPECT_FALSE(Vec({1, 2}) < Vec({1, 2}));
}

TEST(SmallVector, Construction) {
  EXPECT_EQ(to_std(Vec(3)), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(to_std(Vec(8, 5)), std::vector<int64_t>(8, 5));
  std::list<int64_t> list{4, 5, 6, 7, 8, 9, 10};  // a non-contiguous range, past the inline size
  EXPECT_EQ(to_std(Vec(list.begin(), list.end())), (std::vector<int64_t>{4, 5, 6, 7, 8, 9, 10}));
  std::vector<int64_t> std_vec{1, 2, 3};
  Vec from_std = std_vec;
  EXPECT_EQ(to_std(from_std), std_vec);
  std::vector<int64_t> back = from_std;
  EXPECT_EQ(back, std_vec);
}

TEST(SmallVector, InsertAndErase) {
  Vec v{1, 2, 3};
  auto it = v.insert(v.begin(), 0);
  EXPECT_EQ(*it, 0);
  v.insert(v.end(), 4);
  v.insert(v.begin() + 2, {10, 11});
  EXPECT_EQ(to_std(v), (std::vector<int64_t>{0, 1, 10, 11, 2, 3, 4}));
  EXPECT_FALSE(v.is_inline());
  v.insert(v.begin() + 1, size_t{2}, 9);
  EXPECT_EQ(to_std(v), (std::vector<int64_t>{0, 9, 9, 1, 10, 11, 2, 3, 4}));
  it = v.erase(v.begin() + 1, v.begin() + 3);
  EXPECT_EQ(*it, 1);
  it = v.erase(v.begin());
  EXPECT_EQ(*it, 1);
  v.erase(v.end() - 1);
  EXPECT_EQ(to_std(v), (std::vector<int64_t>{1, 10, 11, 2, 3}));
  // Insert a range of the vector into itself, growing past the inline size.
  Vec w{1, 2, 3, 4};
  w.insert(w.begin() + 1, w.begin(), w.end());
  EXPECT_EQ(to_std(w), (std::vector<int64_t>{1, 1, 2, 3, 4, 2, 3, 4}));
  w.clear();
  EXPECT_TRUE(w.empty());
}

TEST(SmallVector, ResizeAndAssign) {
  Vec v{1, 2};
  v.resize(4, 7);
  EXPECT_EQ(to_std(v), (std::vector<int64_t>{1, 2, 7, 7}));
  v.resize(9);
  EXPECT_EQ(to_std(v), (std::vector<int64_t>{1, 2, 7, 7, 0, 0, 0, 0, 0}));
  v.resize(1);
  EXPECT_EQ(to_std(v), (std::vector<int64_t>{1}));
  v.assign(3, 4);
  EXPECT_EQ(to_std(v), (std::vector<int64_t>{4, 4, 4}));
  v.assign({5, 6});
  EXPECT_EQ(to_std(v), (std::vector<int64_t>{5, 6}));
  std::vector<int64_t> src{1, 2, 3, 4, 5, 6, 7, 8};
  v.assign(src.begin(), src.end());
  EXPECT_EQ(to_std(v), src);
}

TEST(SmallVector, HoldsPointers) {
  int a = 0, b = 1;
  SmallVector<int*, 2> v{&a, &b, &a};
  EXPECT_EQ(v.size(), 3u);
  EXPECT_EQ(*v[1], 1);
  EXPECT_EQ(v[2], &a);
}

}  // namespace
}  // namespace dt
