#include "dtensor/layout/device_mesh.h"

#include <gtest/gtest.h>

#include "dtensor/core/error.h"

namespace dt {
namespace {

TEST(DeviceMesh, ParsesShapeAndDefaultRanks) {
  DeviceMesh m = DeviceMesh::parse("2x4");
  EXPECT_EQ(m.shape(), (Shape{2, 4}));
  EXPECT_EQ(m.size(), 8);
  EXPECT_EQ(m.ranks(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(DeviceMesh::parse("8").shape(), (Shape{8}));
  EXPECT_EQ(DeviceMesh::parse("2x2x2").ndim(), 3);
  EXPECT_EQ(m.str(), "2x4");
}

TEST(DeviceMesh, SubMeshIsTheRanksAtOneIndexOfADim) {
  const DeviceMesh m = DeviceMesh::parse("2x2x2");
  EXPECT_EQ(m.sub_mesh(0, 1), DeviceMesh(Shape{2, 2}, {4, 5, 6, 7}));
  EXPECT_EQ(m.sub_mesh(1, 0), DeviceMesh(Shape{2, 2}, {0, 1, 4, 5}));
  EXPECT_EQ(m.sub_mesh(2, 1), DeviceMesh(Shape{2, 2}, {1, 3, 5, 7}));
  EXPECT_EQ(DeviceMesh::parse("4").sub_mesh(0, 3), DeviceMesh(Shape{1}, {3}));  // one rank
  EXPECT_EQ(DeviceMesh(Shape{2, 2}, {3, 2, 1, 0}).sub_mesh(0, 0), DeviceMesh(Shape{2}, {3, 2}));
  EXPECT_THROW(m.sub_mesh(3, 0), DimError);
  EXPECT_THROW(m.sub_mesh(0, 2), ValueError);
  EXPECT_THROW(m.sub_mesh(0, -1), ValueError);
}

TEST(DeviceMesh, RejectsBadText) {
  for (const char* text : {"", "x", "2x", "0x4", "2x-1", "a", "2y4"})
    EXPECT_THROW(DeviceMesh::parse(text), ValueError) << text;
}

TEST(DeviceMesh, CoordinatesAndGroupsFollowDesign) {
  DeviceMesh m = DeviceMesh::parse("2x4");
  EXPECT_EQ(*m.coordinate(6), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(m.rank_at({1, 2}), 6);
  EXPECT_FALSE(m.coordinate(8).has_value());
  EXPECT_EQ(m.group_ranks(0, 6), (std::vector<int>{2, 6}));
  EXPECT_EQ(m.group_ranks(1, 6), (std::vector<int>{4, 5, 6, 7}));
  auto g0 = m.all_groups(0);
  ASSERT_EQ(g0.size(), 4u);
  EXPECT_EQ(g0[0], (std::vector<int>{0, 4}));
  EXPECT_EQ(g0[3], (std::vector<int>{3, 7}));
  auto g1 = m.all_groups(1);
  ASSERT_EQ(g1.size(), 2u);
  EXPECT_EQ(g1[1], (std::vector<int>{4, 5, 6, 7}));
  EXPECT_THROW(m.group_ranks(2, 0), DimError);
  EXPECT_THROW(m.group_ranks(0, 9), ValueError);
}

TEST(DeviceMesh, ExplicitRanksNeedNotBeContiguous) {
  DeviceMesh m({2, 2}, {0, 2, 4, 6});
  EXPECT_EQ(m.group_ranks(1, 4), (std::vector<int>{4, 6}));
  EXPECT_EQ(m.group_ranks(0, 2), (std::vector<int>{2, 6}));
  EXPECT_EQ(*m.coordinate(6), (std::vector<int64_t>{1, 1}));
  EXPECT_FALSE(m.contains(1));
  EXPECT_EQ(m.str(), "2x2[0,2,4,6]");
  EXPECT_NE(m, DeviceMesh(Shape{2, 2}));
}

TEST(DeviceMesh, RejectsDuplicateAndMismatchedRanks) {
  try {
    DeviceMesh({2, 2}, {0, 1, 1, 3});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("duplicate rank 1"), std::string::npos) << e.what();
  }
  try {
    DeviceMesh({2, 4}, {0, 1, 2, 3, 4, 5});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("needs 8 ranks, got 6"), std::string::npos) << e.what();
  }
  EXPECT_THROW(DeviceMesh({2}, {0, -1}), ValueError);
  EXPECT_THROW(DeviceMesh(Shape{}), ValueError);
}

std::string mesh_error(const std::string& text) {
  try {
    DeviceMesh::parse(text);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no error";
}

// Issue 13: a mesh of more than 8 dims reached a sharding check (and 1u << m for m >= 32), and
// --mesh 99999999999 ended in std::bad_alloc; both are user errors now, checked before allocating.
TEST(DeviceMesh, RejectsTooManyDimsAndRanks) {
  EXPECT_EQ(mesh_error("1x1x1x1x1x1x1x1x1"), "mesh [1, 1, 1, 1, 1, 1, 1, 1, 1] has 9 dims, more than the limit of 8");
  EXPECT_EQ(mesh_error("1x1x1x1x1x1x1x1"), "no error");
  std::string thirty_three = "2";
  for (int i = 0; i < 32; ++i) thirty_three += "x2";
  EXPECT_NE(mesh_error(thirty_three).find("has 33 dims"), std::string::npos);
  EXPECT_EQ(mesh_error("99999999999"), "mesh [99999999999] has more than 65536 ranks, the limit");
  EXPECT_EQ(mesh_error("65536"), "no error");
  EXPECT_EQ(mesh_error("256x257"), "mesh [256, 257] has more than 65536 ranks, the limit");
  // Products that overflow int64 are caught by the same test.
  EXPECT_EQ(mesh_error("4294967296x4294967296"), "mesh [4294967296, 4294967296] has more than 65536 ranks, the limit");
  EXPECT_NE(mesh_error("99999999999999999999999").find("bad mesh"), std::string::npos);
  EXPECT_THROW(DeviceMesh({1}, {1 << 30}), ValueError);
}

TEST(DeviceMesh, ChecksWorldSize) {
  DeviceMesh m = DeviceMesh::parse("2x4");
  EXPECT_NO_THROW(m.check_fits(8));
  try {
    m.check_fits(4);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("needs rank 7 but the world has 4 ranks"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dt
