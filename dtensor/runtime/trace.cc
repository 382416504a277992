#include "dtensor/runtime/trace.h"

#include <unordered_map>

#include "dtensor/core/atomic_file.h"
#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"

namespace dt::runtime {

TraceRecorder::TraceRecorder(int world_size) : origin_(Clock::now()), events_(size_t(world_size)) {}

NodeHook TraceRecorder::hook(int rank) {
  DT_CHECK(rank >= 0 && size_t(rank) < events_.size()) << rank;
  auto issued = std::make_shared<std::unordered_map<const ir::Value*, int64_t>>();
  auto next_id = std::make_shared<int64_t>(0);
  return [this, rank, issued, next_id](const ir::Node& node, size_t, Clock::time_point start, Clock::time_point end) {
    auto us = [&](Clock::time_point t) { return std::chrono::duration<double, std::micro>(t - origin_).count(); };
    std::vector<Event>& ev = events_[size_t(rank)];
    const bool collective = ir::op_def(node.op).needs_wait;
    // Communicating ops (the blocking one_shot_all_reduce too) and waits are the comm lane.
    const bool comm = ir::op_def(node.op).is_collective() || node.op == ir::OpKind::wait_tensor;
    std::string label = std::string(ir::op_name(node.op)) + " %" + (node.results.empty() ? "" : node.result()->name);
    ev.push_back({label, comm ? "comm" : "compute", us(start), us(end) - us(start), 'X', 0});
    if (collective) {
      const int64_t id = int64_t(rank) << 32 | ++*next_id;
      (*issued)[node.result()] = id;
      ev.push_back({label, "collective", us(start), 0, 'b', id});
    } else if (node.op == ir::OpKind::wait_tensor) {
      auto it = issued->find(node.operands[0]);
      if (it != issued->end()) {
        const std::string name = std::string(ir::op_name(node.operands[0]->producer->op)) + " %" + node.operands[0]->name;
        ev.push_back({name, "collective", us(end), 0, 'e', it->second});
        issued->erase(it);
      }
    }
  };
}

nlohmann::json TraceRecorder::track_json(int rank) const {
  DT_CHECK(rank >= 0 && size_t(rank) < events_.size()) << rank;
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", 0}, {"tid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
  for (const Event& e : events_[size_t(rank)]) {
    nlohmann::json j = {{"name", e.name}, {"cat", e.cat}, {"ph", std::string(1, e.ph)}, {"ts", e.ts_us}, {"pid", 0}, {"tid", rank}};
    if (e.ph == 'X') j["dur"] = e.dur_us;
    if (e.ph == 'b' || e.ph == 'e') j["id"] = e.id;
    events.push_back(std::move(j));
  }
  return events;
}

nlohmann::json TraceRecorder::merge_tracks(const std::vector<nlohmann::json>& tracks) {
  nlohmann::json events = nlohmann::json::array();
  for (const nlohmann::json& t : tracks)
    for (const nlohmann::json& e : t) events.push_back(e);
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

nlohmann::json TraceRecorder::to_json() const {
  std::vector<nlohmann::json> tracks;
  for (size_t r = 0; r < events_.size(); ++r) tracks.push_back(track_json(int(r)));
  return merge_tracks(tracks);
}

void TraceRecorder::write(const std::string& path) const {
  write_file_atomically(path, to_json().dump() + '\n');
}

}  // namespace dt::runtime
