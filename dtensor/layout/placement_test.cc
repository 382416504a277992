#include "dtensor/layout/placement.h"

#include <gtest/gtest.h>

#include "dtensor/core/error.h"

namespace dt {
namespace {

TEST(Placement, ParsesAndPrintsTextForm) {
  Placements p = parse_placements("S(0),R,P(sum)");
  ASSERT_EQ(p.size(), 3u);
  EXPECT_TRUE(p[0].is_shard(0));
  EXPECT_TRUE(p[1].is_replicate());
  EXPECT_TRUE(p[2].is_partial());
  EXPECT_EQ(p[2].op(), ReduceOp::sum);
  EXPECT_EQ(placements_str(p), "S(0),R,P(sum)");
  for (const char* text : {"S(1)", "R", "P(sum)", "P(avg)", "P(max)", "P(min)", "S(-1)"})
    EXPECT_EQ(Placement::parse(text).str(), text);
}

TEST(Placement, AcceptsPyTorchSpelling) {
  EXPECT_EQ(placements_str(parse_placements("(Shard(dim=0), Replicate())")), "S(0),R");
  EXPECT_EQ(placements_str(parse_placements("(Shard(dim=1),)")), "S(1)");
  EXPECT_EQ(placements_str(parse_placements(" S(1) , Partial(max) ")), "S(1),P(max)");
  EXPECT_EQ(Placement::parse("P"), Placement::partial(ReduceOp::sum));
}

TEST(Placement, RejectsBadText) {
  for (const char* text : {"", "X", "S()", "S(a)", "S(1", "P(prod)", "R(0)", "S(0),,R"}) {
    try {
      parse_placements(text);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("bad placement"), std::string::npos) << e.what();
    }
  }
}

TEST(Placement, NormalisesNegativeShardDims) {
  EXPECT_EQ(Placement::shard(-1).normalized(2), Placement::shard(1));
  EXPECT_EQ(Placement::shard(-2).normalized(2), Placement::shard(0));
  EXPECT_EQ(Placement::replicate().normalized(2), Placement::replicate());
  try {
    Placement::shard(3).normalized(2);
    FAIL();
  } catch (const DimError& e) {
    EXPECT_STREQ(e.what(), "shard dim 3 out of range for tensor of rank 2");
  }
  EXPECT_THROW(Placement::shard(-3).normalized(2), DimError);
}

TEST(Placement, Equality) {
  EXPECT_EQ(Placement::shard(0), Placement::shard(0));
  EXPECT_NE(Placement::shard(0), Placement::shard(1));
  EXPECT_NE(Placement::partial(ReduceOp::sum), Placement::partial(ReduceOp::max));
  EXPECT_NE(Placement::replicate(), Placement::partial());
}

}  // namespace
}  // namespace dt
