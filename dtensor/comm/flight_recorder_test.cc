#include "dtensor/comm/flight_recorder.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace dt {
namespace {

TEST(FlightRecorder, KeepsTheLastEntriesAndTheirStates) {
  FlightRecorder rec(/*rank=*/3, /*capacity=*/64);
  std::vector<uint64_t> ids;
  for (int i = 1; i <= 100; ++i) ids.push_back(rec.record_issued("all_reduce", "all_reduce(f32, 1, sum)", {0, 3}, i, 4));
  rec.record_completed(ids[99]);
  rec.record_failed(ids[98], "peer gone");
  rec.record_started(ids[0]);  // evicted: ignored
  std::vector<FlightRecord> entries = rec.entries();
  ASSERT_EQ(entries.size(), 64u);
  EXPECT_EQ(entries.front().seq, 37);
  EXPECT_EQ(entries.back().seq, 100);
  EXPECT_EQ(entries.back().state, FlightState::completed);
  EXPECT_EQ(entries[62].state, FlightState::failed);
  EXPECT_EQ(entries[62].error, "peer gone");
  EXPECT_EQ(entries[0].state, FlightState::issued);
  nlohmann::json j = nlohmann::json::parse(rec.to_json().dump());
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["entries"].size(), 64u);
  EXPECT_EQ(j["entries"][63]["state"], "completed");
  EXPECT_EQ(j["entries"][62]["group"], nlohmann::json({0, 3}));
}

}  // namespace
}  // namespace dt
