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

// A blocked shard (a fused projection's layout): its text form, equality and the bad spellings.
TEST(Placement, BlockedShardText) {
  Placement p = Placement::parse("S(0,blocks=3)");
  EXPECT_TRUE(p.is_shard(0));
  EXPECT_TRUE(p.is_blocked());
  EXPECT_EQ(p.blocks(), 3);
  EXPECT_EQ(p.str(), "S(0,blocks=3)");
  EXPECT_NE(p, Placement::shard(0));
  EXPECT_EQ(Placement::parse("S(0, blocks=1)"), Placement::shard(0));
  EXPECT_EQ(p.with_dim(1).str(), "S(1,blocks=3)");
  for (const char* text : {"S(0,3)", "S(0,blocks=0)", "S(0,blocks=x)", "SS(0,blocks=2)", "S(0,blocks=)"})
    EXPECT_THROW(Placement::parse(text), ValueError) << text;
}

TEST(Placement, AcceptsPyTorchSpelling) {
  EXPECT_EQ(placements_str(parse_placements("(Shard(dim=0), Replicate())")), "S(0),R");
  EXPECT_EQ(placements_str(parse_placements("(Shard(dim=1),)")), "S(1)");
  EXPECT_EQ(placements_str(parse_placements(" S(1) , Partial(max) ")), "S(1),P(max)");
  EXPECT_EQ(Placement::parse("P"), Placement::partial(ReduceOp::sum));
}

TEST(Placement, RejectsBadText) {
  for (const char* text : {"", "X", "S()", "S(a)", "S(1", "P(xor)", "R(0)", "S(0),,R"}) {
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
