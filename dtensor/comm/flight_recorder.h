// A per-rank ring of the last collectives, for post-mortems of hangs and failures.
//
// Every backend records each collective when it is issued and updates it when it starts moving
// data, completes or fails. The recorder keeps the last `capacity` (64) entries and dumps them as
// JSON; when a collective fails, backends call `dump_to_env_dir`, which writes
// $DTENSOR_FLIGHT_RECORDER_DIR/rank_<r>.json if the variable is set. Times are microseconds since
// the Unix epoch so dumps from several processes line up. Thread-safe: the issuing thread and the
// backend's progress thread both write.
//
// Dump format:
//   {"rank": 0, "capacity": 64, "entries": [
//     {"id": 7, "seq": 3, "op": "all_reduce", "desc": "all_reduce(f32, 1000, sum)",
//      "group": [0, 2], "bytes": 4000, "state": "failed", "issued_us": ..., "started_us": ...,
//      "end_us": ..., "error": "..."}]}
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dt {

enum class FlightState : uint8_t { issued, started, completed, failed };
std::string_view flight_state_name(FlightState s);

struct FlightRecord {
  uint64_t id = 0;  // recorder-local, increasing
  int64_t seq = 0;  // the collective's sequence number in its group
  std::string op;
  std::string desc;
  std::vector<int> group;  // global ranks
  size_t bytes = 0;
  FlightState state = FlightState::issued;
  int64_t issued_us = 0, started_us = 0, end_us = 0;
  std::string error;
};

class FlightRecorder {
 public:
  explicit FlightRecorder(int rank, size_t capacity = 64) : rank_(rank), capacity_(capacity) {}

  // Records a newly issued collective and returns its id for the updates below.
  uint64_t record_issued(std::string op, std::string desc, std::vector<int> group, int64_t seq, size_t bytes);
  void record_started(uint64_t id);
  void record_completed(uint64_t id);
  void record_failed(uint64_t id, const std::string& error);

  int rank() const { return rank_; }
  // Returns a copy of the retained entries, oldest first.
  std::vector<FlightRecord> entries() const;
  nlohmann::json to_json() const;
  // Writes to_json() to `path`; throws IoError when the file cannot be written.
  void dump(const std::string& path) const;
  // Dumps to $DTENSOR_FLIGHT_RECORDER_DIR/rank_<r>.json (creating the directory) when the variable
  // is set; returns the path written, or "" when unset or the write failed (never throws: it runs
  // while another error is being reported).
  std::string dump_to_env_dir() const;

 private:
  FlightRecord* find(uint64_t id);  // requires mu_

  int rank_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::deque<FlightRecord> ring_;
  uint64_t next_id_ = 1;
};

}  // namespace dt
