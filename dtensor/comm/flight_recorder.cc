#include "dtensor/comm/flight_recorder.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "dtensor/core/atomic_file.h"
#include "dtensor/core/error.h"

namespace dt {

namespace {

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string_view flight_state_name(FlightState s) {
  switch (s) {
    case FlightState::issued: return "issued";
    case FlightState::started: return "started";
    case FlightState::completed: return "completed";
    case FlightState::failed: return "failed";
  }
  return "?";
}

uint64_t FlightRecorder::record_issued(std::string op, std::string desc, std::vector<int> group,
                                       int64_t seq, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  FlightRecord r;
  r.id = next_id_++;
  r.seq = seq;
  r.op = std::move(op);
  r.desc = std::move(desc);
  r.group = std::move(group);
  r.bytes = bytes;
  r.issued_us = now_us();
  ring_.push_back(std::move(r));
  while (ring_.size() > capacity_) ring_.pop_front();
  return ring_.back().id;
}

FlightRecord* FlightRecorder::find(uint64_t id) {
  // Ids increase along the ring, so the entry (if still retained) is at a computable position.
  if (ring_.empty() || id < ring_.front().id || id > ring_.back().id) return nullptr;
  return &ring_[id - ring_.front().id];
}

void FlightRecorder::record_started(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (FlightRecord* r = find(id)) {
    r->state = FlightState::started;
    r->started_us = now_us();
  }
}

void FlightRecorder::record_completed(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (FlightRecord* r = find(id)) {
    r->state = FlightState::completed;
    r->end_us = now_us();
  }
}

void FlightRecorder::record_failed(uint64_t id, const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (FlightRecord* r = find(id)) {
    r->state = FlightState::failed;
    r->end_us = now_us();
    r->error = error;
  }
}

std::vector<FlightRecord> FlightRecorder::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {ring_.begin(), ring_.end()};
}

nlohmann::json FlightRecorder::to_json() const {
  nlohmann::json entries = nlohmann::json::array();
  for (const FlightRecord& r : this->entries()) {
    entries.push_back({{"id", r.id},
                       {"seq", r.seq},
                       {"op", r.op},
                       {"desc", r.desc},
                       {"group", r.group},
                       {"bytes", r.bytes},
                       {"state", flight_state_name(r.state)},
                       {"issued_us", r.issued_us},
                       {"started_us", r.started_us},
                       {"end_us", r.end_us},
                       {"error", r.error}});
  }
  return {{"rank", rank_}, {"capacity", capacity_}, {"entries", std::move(entries)}};
}

void FlightRecorder::dump(const std::string& path) const {
  write_file_atomically(path, to_json().dump(2) + "\n");
}

std::string FlightRecorder::dump_to_env_dir() const {
  const char* dir = std::getenv("DTENSOR_FLIGHT_RECORDER_DIR");
  if (dir == nullptr || *dir == '\0') return "";
  try {
    std::filesystem::create_directories(dir);
    std::string path = (std::filesystem::path(dir) / ("rank_" + std::to_string(rank_) + ".json")).string();
    dump(path);
    return path;
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace dt
