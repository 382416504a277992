// Fault handling of the threads backend: failed, missing and exited ranks, mismatched collectives
// in check mode, abandoned collectives, and the flight-recorder dump. Every test finishes quickly:
// detection of failed or exited peers never waits for the timeout (the default 60 s timeout is
// kept where the failure must be detected without it, so a regression shows up as a slow test and
// a "did not arrive" message, which the tests reject).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "dtensor/comm/threads/run_ranks.h"

namespace dt {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Collects the CommError messages ranks saw.
struct Messages {
  std::mutex mu;
  std::map<int, std::string> by_rank;
  void add(int rank, const std::string& m) {
    std::lock_guard<std::mutex> lock(mu);
    by_rank[rank] = m;
  }
};

TEST(Faults, RankThrowsBeforeCollective) {
  Messages seen;
  try {
    run_ranks(4, [&](ProcessGroup& pg) {
      if (pg.rank() == 2) throw std::runtime_error("boom on rank 2");
      std::vector<float> x(10, 1.0f);
      try {
        pg.all_reduce(x.data(), x.size(), DType::f32, ReduceOp::sum)->wait();
      } catch (const CommError& e) {
        seen.add(pg.rank(), e.what());
        throw;
      }
    });
    FAIL() << "run_ranks did not throw";
  } catch (const std::runtime_error& e) {
    // The root cause, not a peer's CommError.
    EXPECT_EQ(std::string(e.what()), "boom on rank 2");
  }
  ASSERT_EQ(seen.by_rank.size(), 3u);
  for (auto& [rank, m] : seen.by_rank) {
    EXPECT_TRUE(contains(m, "all_reduce #1 on group [0, 1, 2, 3] failed on rank " + std::to_string(rank))) << m;
    EXPECT_TRUE(contains(m, "rank 2 failed before arriving (boom on rank 2)")) << m;
    EXPECT_FALSE(contains(m, "did not arrive within")) << m;
  }
}

// Runs 3 ranks where rank 1 throws ValueError("bad input") at once and the others call
// all_reduce `calls` times, handing check(error, i) each call's CommError (i from 0); returns how
// many calls failed.
template <typename Check>
int all_reduces_after_rank1_fails(int calls, Check check) {
  std::atomic<int> failures{0};
  EXPECT_THROW(run_ranks(3, [&](ProcessGroup& pg) {
                 if (pg.rank() == 1) throw ValueError("bad input");
                 float x = 1;
                 for (int i = 0; i < calls; ++i) {
                   try {
                     pg.all_reduce(&x, 1, DType::f32, ReduceOp::sum)->wait();
                   } catch (const CommError& e) {
                     check(e, i);
                     ++failures;
                   }
                 }
               }),
               ValueError);
  return failures.load();
}

TEST(Faults, LaterCollectivesAfterFailureFailToo) {
  const int failures = all_reduces_after_rank1_fails(3, [](const CommError& e, int i) {
    EXPECT_TRUE(contains(e.what(), "all_reduce #" + std::to_string(i + 1))) << e.what();
    EXPECT_TRUE(contains(e.what(), "rank 1 failed")) << e.what();
  });
  EXPECT_EQ(failures, 6);
}

// The failed collective's sequence number and group are fields of the CommError, not only text.
TEST(Faults, CommErrorCarriesSequenceAndRanks) {
  const int failures = all_reduces_after_rank1_fails(2, [](const CommError& e, int i) {
    EXPECT_EQ(e.sequence(), i + 1) << e.what();
    EXPECT_EQ(e.ranks(), (std::vector<int>{0, 1, 2})) << e.what();
  });
  EXPECT_EQ(failures, 4);
}

TEST(Faults, RankNeverArrivesTimesOut) {
  CommOptions options;
  options.timeout = Duration(200);
  Messages seen;
  std::atomic<int> timed_out{0};
  EXPECT_THROW(run_ranks(3, [&](ProcessGroup& pg) {
                 float x = 1;
                 if (pg.rank() == 1) {
                   // Alive but late: arrives only after the others gave up.
                   timed_out.wait(0);
                   while (timed_out.load() < 2) timed_out.wait(timed_out.load());
                 }
                 try {
                   pg.all_reduce(&x, 1, DType::f32, ReduceOp::sum)->wait();
                 } catch (const CommError& e) {
                   seen.add(pg.rank(), e.what());
                   ++timed_out;
                   timed_out.notify_all();
                   throw;
                 }
               }, options),
               CommError);
  ASSERT_EQ(seen.by_rank.size(), 3u);
  EXPECT_TRUE(contains(seen.by_rank[0], "all_reduce #1 on group [0, 1, 2] failed on rank 0: ranks [1] did not arrive within 200 ms"))
      << seen.by_rank[0];
  // The late rank finds the collective already aborted, with the same cause.
  EXPECT_TRUE(contains(seen.by_rank[1], "failed on rank 1: ranks [1] did not arrive within 200 ms")) << seen.by_rank[1];
}

TEST(Faults, RankExitsWithoutIssuing) {
  Messages seen;
  EXPECT_THROW(run_ranks(2, [&](ProcessGroup& pg) {
                 if (pg.rank() == 1) return;
                 float x = 1;
                 try {
                   pg.all_reduce(&x, 1, DType::f32, ReduceOp::sum)->wait();
                 } catch (const CommError& e) {
                   seen.add(pg.rank(), e.what());
                   throw;
                 }
               }),
               CommError);
  EXPECT_TRUE(contains(seen.by_rank[0], "all_reduce #1 on group [0, 1] failed on rank 0: rank 1 exited without issuing it"))
      << seen.by_rank[0];
}

// Sets a flag when destroyed: declared before a Work, it fires after the Work's destructor ran.
struct SetOnDestroy {
  std::atomic<bool>& flag;
  ~SetOnDestroy() {
    flag = true;
    flag.notify_all();
  }
};

TEST(Faults, PendingCollectiveOfThrowingRankIsAbandoned) {
  Messages seen;
  std::atomic<bool> abandoned{false};
  try {
    run_ranks(2, [&](ProcessGroup& pg) {
      std::vector<float> x(1000, 1.0f);
      if (pg.rank() == 1) {
        SetOnDestroy after_work{abandoned};
        WorkPtr w = pg.all_reduce(x.data(), x.size(), DType::f32, ReduceOp::sum);
        throw std::runtime_error("boom with a collective in flight");  // ~Work abandons it
      }
      // Rank 0 issues the matching collective only after rank 1 abandoned it (and freed x).
      abandoned.wait(false);
      try {
        pg.all_reduce(x.data(), x.size(), DType::f32, ReduceOp::sum)->wait();
      } catch (const CommError& e) {
        seen.add(0, e.what());
        throw;
      }
    });
    FAIL() << "run_ranks did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "boom with a collective in flight");
  }
  const std::string& m = seen.by_rank[0];
  EXPECT_TRUE(contains(m, "all_reduce #1 on group [0, 1] failed on rank 0: rank 1 abandoned all_reduce #1 on group [0, 1] while unwinding an exception"))
      << m;
}

// Runs issue(pg, in, out) on 2 ranks (in: 1000 floats, out: 2000), expecting every rank's wait to
// fail with a CommError; returns the messages by rank.
std::map<int, std::string> mismatched(const std::function<WorkPtr(ProcessGroup&, float*, float*)>& issue, const CommOptions& options = {}) {
  Messages seen;
  EXPECT_THROW(run_ranks(2, [&](ProcessGroup& pg) {
                 std::vector<float> in(1000, 1.0f), out(2000);
                 WorkPtr w = issue(pg, in.data(), out.data());
                 try {
                   w->wait();
                 } catch (const CommError& e) {
                   seen.add(pg.rank(), e.what());
                   throw;
                 }
               }, options),
               CommError);
  return std::move(seen.by_rank);
}

TEST(Faults, CheckModeReportsMismatchedOps) {
  CommOptions options;
  options.check_collectives = true;
  std::map<int, std::string> seen = mismatched([](ProcessGroup& pg, float* in, float* out) {
    return pg.rank() == 0 ? pg.all_reduce(in, 1000, DType::f32, ReduceOp::sum) : pg.all_gather(in, out, 1000, DType::f32);
  }, options);
  std::string want = "collective #1 on group [0, 1] mismatch: rank 0 issued all_reduce(f32, 1000, sum), rank 1 issued all_gather(f32, 1000)";
  EXPECT_EQ(seen[0], want);
  EXPECT_EQ(seen[1], want);
}

// A gather along a later dim against a stacked one would interleave blocks differently on the
// two ranks: checked with the counts, in every mode.
TEST(Faults, AllGatherRowsMustAgree) {
  std::map<int, std::string> seen = mismatched([](ProcessGroup& pg, float* in, float* out) {
    return pg.rank() == 0 ? pg.all_gather_rows(in, out, 1000, 2, DType::f32) : pg.all_gather(in, out, 1000, DType::f32);
  });
  EXPECT_EQ(seen[0], "collective #1 on group [0, 1] mismatch: rank 0 issued all_gather(f32, 1000, rows=2), rank 1 issued all_gather(f32, 1000)");
}

TEST(Faults, CheckModeCatchesValueOnlyMismatches) {
  // A reduce op or dtype mismatch of the same width cannot corrupt memory: only check mode reports
  // it. Without check mode the collective runs (and the results are meaningless).
  for (bool check : {false, true}) {
    CommOptions options;
    options.check_collectives = check;
    std::atomic<int> errors{0};
    auto body = [&](ProcessGroup& pg) {
      float x = 1;
      try {
        pg.all_reduce(&x, 1, DType::f32, pg.rank() == 0 ? ReduceOp::sum : ReduceOp::max)->wait();
      } catch (const CommError& e) {
        EXPECT_TRUE(contains(e.what(), "rank 0 issued all_reduce(f32, 1, sum), rank 1 issued all_reduce(f32, 1, max)"))
            << e.what();
        ++errors;
      }
      int32_t y = 1;
      try {
        pg.broadcast(&y, 1, pg.rank() == 0 ? DType::i32 : DType::f32, 0)->wait();
      } catch (const CommError& e) {
        EXPECT_TRUE(contains(e.what(), "collective #2 on group [0, 1] mismatch: rank 0 issued broadcast(i32, 1, root=0), rank 1 issued broadcast(f32, 1, root=0)"))
            << e.what();
        ++errors;
      }
    };
    run_ranks(2, body, options);
    EXPECT_EQ(errors.load(), check ? 4 : 0);
  }
}

TEST(Faults, CountMismatchIsAlwaysReported) {
  std::atomic<int> errors{0};
  run_ranks(3, [&](ProcessGroup& pg) {
    std::vector<double> x(10, 1.0);
    try {
      pg.all_reduce(x.data(), pg.rank() == 2 ? 5 : 10, DType::f64, ReduceOp::sum)->wait();
    } catch (const CommError& e) {
      EXPECT_TRUE(contains(e.what(), "rank 0 issued all_reduce(f64, 10, sum), rank 2 issued all_reduce(f64, 5, sum)"))
          << e.what();
      ++errors;
    }
    // The group stays usable after a rejected collective.
    double y = 1;
    pg.all_reduce(&y, 1, DType::f64, ReduceOp::sum)->wait();
    EXPECT_EQ(y, 3.0);
    // all_to_all whose split sizes disagree between sender and receiver.
    std::vector<size_t> send(3, 1), recv(3, 1);
    if (pg.rank() == 0) send[1] = 2;
    std::vector<double> in(4), out(3);
    try {
      pg.all_to_all(in.data(), send, out.data(), recv, DType::f64)->wait();
    } catch (const CommError& e) {
      EXPECT_TRUE(contains(e.what(), "rank 0 sends 2 elements to rank 1, which expects 1")) << e.what();
      ++errors;
    }
  });
  EXPECT_EQ(errors.load(), 6);
}

TEST(Faults, FailureInOtherGroupDoesNotAffectThisGroup) {
  EXPECT_THROW(run_ranks(4, [&](ProcessGroup& world) {
                 if (world.rank() == 3) throw std::runtime_error("rank 3 down");
                 if (world.rank() == 2) return;
                 auto pair = world.new_group({0, 1});
                 int64_t x = 1;
                 pair->all_reduce(&x, 1, DType::i64, ReduceOp::sum)->wait();
                 EXPECT_EQ(x, 2);
               }),
               std::runtime_error);
}

TEST(Faults, WaitWithShortTimeoutLeavesCollectiveInFlight) {
  std::atomic<bool> gave_up{false};
  run_ranks(2, [&](ProcessGroup& pg) {
    float x = 1;
    if (pg.rank() == 0) {
      WorkPtr w = pg.all_reduce(&x, 1, DType::f32, ReduceOp::sum);
      try {
        w->wait(Duration(1));
        ADD_FAILURE() << "wait returned before rank 1 issued";
      } catch (const CommError& e) {
        EXPECT_TRUE(contains(e.what(), "all_reduce #1 on group [0, 1]: wait on rank 0 timed out after 1 ms")) << e.what();
      }
      gave_up = true;
      gave_up.notify_all();
      w->wait();
    } else {
      gave_up.wait(false);
      pg.all_reduce(&x, 1, DType::f32, ReduceOp::sum)->wait();
    }
    EXPECT_EQ(x, 2.0f);
  });
}

TEST(Faults, FlightRecorderDumpParses) {
  auto dir = std::filesystem::temp_directory_path() / ("dtensor_fr_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ::setenv("DTENSOR_FLIGHT_RECORDER_DIR", dir.c_str(), 1);
  EXPECT_THROW(run_ranks(2, [&](ProcessGroup& pg) {
                 std::vector<float> x(64, 1.0f), y(128);
                 pg.all_reduce(x.data(), 64, DType::f32, ReduceOp::sum)->wait();
                 pg.all_gather(x.data(), y.data(), 64, DType::f32)->wait();
                 if (pg.rank() == 1) throw std::runtime_error("die");
                 pg.all_reduce(x.data(), 64, DType::f32, ReduceOp::sum)->wait();
               }),
               std::runtime_error);
  ::unsetenv("DTENSOR_FLIGHT_RECORDER_DIR");
  std::ifstream in(dir / "rank_0.json");
  ASSERT_TRUE(in.good()) << "no dump in " << dir;
  nlohmann::json dump = nlohmann::json::parse(in);
  EXPECT_EQ(dump["rank"], 0);
  ASSERT_EQ(dump["entries"].size(), 3u);
  const auto& e = dump["entries"];
  EXPECT_EQ(e[0]["op"], "all_reduce");
  EXPECT_EQ(e[0]["seq"], 1);
  EXPECT_EQ(e[0]["state"], "completed");
  EXPECT_EQ(e[0]["bytes"], 256);
  EXPECT_EQ(e[0]["group"], nlohmann::json({0, 1}));
  EXPECT_EQ(e[1]["desc"], "all_gather(f32, 64)");
  EXPECT_EQ(e[2]["seq"], 3);
  EXPECT_EQ(e[2]["state"], "failed");
  EXPECT_TRUE(contains(e[2]["error"].get<std::string>(), "rank 1 failed before arriving (die)")) << e[2]["error"];
  EXPECT_GE(e[2]["end_us"].get<int64_t>(), e[2]["issued_us"].get<int64_t>());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dt
