#include "dtensor/layout/dtensor_spec.h"

#include <gtest/gtest.h>

#include "dtensor/core/error.h"

namespace dt {
namespace {

DTensorSpec spec(const char* mesh, const char* placements, Shape shape) {
  return DTensorSpec(DeviceMesh::parse(mesh), parse_placements(placements), std::move(shape), DType::f32);
}

TEST(DTensorSpec, ChunkSemanticsOnOneDim) {
  // 10 rows over 4 ranks: chunk 3 -> 3, 3, 3, 1.
  DTensorSpec s = spec("4", "S(0)", {10, 5});
  EXPECT_EQ(s.local_shape(0), (Shape{3, 5}));
  EXPECT_EQ(s.local_shape(3), (Shape{1, 5}));
  EXPECT_EQ(s.global_offset(2), (Shape{6, 0}));
  EXPECT_EQ(s.global_offset(3), (Shape{9, 0}));
  // 2 rows over 4 ranks: 1, 1, 0, 0 (empty shards keep their offset clamped to the size).
  DTensorSpec e = spec("4", "S(0)", {2, 3});
  EXPECT_EQ(e.local_shape(2), (Shape{0, 3}));
  EXPECT_EQ(e.global_offset(3), (Shape{2, 0}));
  DTensorSpec z = spec("4", "S(1)", {2, 0});
  EXPECT_EQ(z.local_shape(1), (Shape{2, 0}));
}

// S(0,blocks=3) of 15 rows on 2 ranks: each block of 5 is chunked 3 + 2, so rank 0 holds 9 rows
// (offset 0 in each block) and rank 1 holds 6 (offset 3). The dim must divide into the blocks,
// and no other mesh dim may shard it.
TEST(DTensorSpec, BlockedShardChunksEachBlock) {
  DTensorSpec s = spec("2", "S(0,blocks=3)", {15, 4});
  EXPECT_EQ(s.local_shape(0), (Shape{9, 4}));
  EXPECT_EQ(s.local_shape(1), (Shape{6, 4}));
  EXPECT_EQ(s.global_offset(1), (Shape{3, 0}));
  EXPECT_THROW(spec("2", "S(0,blocks=4)", {15, 4}), ShapeError);
  EXPECT_THROW(spec("2x2", "S(0),S(0,blocks=3)", {12, 4}), ValueError);
  EXPECT_EQ(spec("2x2", "S(1),S(0,blocks=3)", {12, 4}).local_shape(3), (Shape{6, 2}));
}

TEST(DTensorSpec, NestedShardingSplitsInMeshDimOrder) {
  // The worked example of dtensor_spec.h: L = 10 on 2x2 with S(0),S(0).
  DTensorSpec s = spec("2x2", "S(0),S(0)", {10});
  std::vector<std::pair<int64_t, int64_t>> expected = {{0, 3}, {3, 2}, {5, 3}, {8, 2}};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(s.global_offset(r)[0], expected[size_t(r)].first) << r;
    EXPECT_EQ(s.local_shape(r)[0], expected[size_t(r)].second) << r;
  }
  DTensorSpec t = spec("2x2", "S(0),S(0)", {3});
  EXPECT_EQ(t.local_shape(3), (Shape{0}));
  EXPECT_EQ(t.global_offset(3), (Shape{3}));
  // Two tensor dims on a 2x4 mesh: rank 6 has coordinate (1, 2).
  DTensorSpec u = spec("2x4", "S(0),S(1)", {1023, 517});
  EXPECT_EQ(u.local_shape(6), (Shape{511, 130}));
  EXPECT_EQ(u.global_offset(6), (Shape{512, 260}));
  EXPECT_EQ(u.local_shape(7), (Shape{511, 127}));
}

TEST(DTensorSpec, NormalisesNegativeDims) {
  DTensorSpec s = spec("2", "S(-1)", {4, 6});
  EXPECT_EQ(s.placements()[0], Placement::shard(1));
  EXPECT_EQ(s.local_shape(1), (Shape{4, 3}));
}

TEST(DTensorSpec, ErrorsCarryTheValues) {
  try {
    spec("2x4", "S(0)", {4, 4});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()), "got 1 placements (S(0)) for a mesh of 2 dims");
  }
  try {
    spec("2", "S(2)", {4, 4});
    FAIL();
  } catch (const DimError& e) {
    EXPECT_EQ(std::string(e.what()), "shard dim 2 out of range for tensor of rank 2");
  }
  // Mixed partial ops are a layout (reduced from the last mesh dim to the first, issue 27.9).
  EXPECT_NO_THROW(spec("2x2", "P(sum),P(max)", {4}));
  EXPECT_NO_THROW(spec("2x2x2", "S(0),P(sum),P(min)", {4}));
  EXPECT_NO_THROW(spec("2x2", "P(prod),P(min)", {4}));
  EXPECT_NO_THROW(spec("2x2", "P(sum),P(avg)", {4}));
  EXPECT_NO_THROW(spec("2x2", "P(max),P(max)", {4}));
  EXPECT_THROW(spec("2", "R", {-1}), ValueError);
  EXPECT_THROW(spec("2", "R", {4}).local_shape(5), ValueError);
}

TEST(DTensorSpec, ShardExtentStopsAtTheGivenMeshDim) {
  Placements p = parse_placements("S(0),S(0)");
  // Before mesh dim 1 splits, coordinate (1, x) holds rows [5, 10) of 10.
  auto [off, len] = shard_extent({2, 2}, p, 10, 0, {1, 1}, 1);
  EXPECT_EQ(off, 5);
  EXPECT_EQ(len, 5);
  auto full = shard_extent({2, 2}, p, 10, 1 - 1, {1, 1}, 2);
  EXPECT_EQ(full, (std::pair<int64_t, int64_t>{8, 2}));
}

}  // namespace
}  // namespace dt
