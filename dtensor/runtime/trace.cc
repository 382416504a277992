#include "dtensor/runtime/trace.h"

#include <cstring>
#include <unordered_map>

#include "dtensor/core/atomic_file.h"
#include "dtensor/core/error.h"
#include "dtensor/ir/op_registry.h"

namespace dt::runtime {
namespace {

// Returns every rank's `mine` on every rank (variable-length text: lengths first, then the bytes
// padded to the longest, as i32 words so that no byte is read as another type).
std::vector<std::string> gather_text(const std::string& mine, ProcessGroup& world) {
  const size_t n = size_t(world.size());
  double len = double(mine.size());
  std::vector<double> lens(n);
  world.all_gather(&len, lens.data(), 1, DType::f64)->wait();
  size_t words = 0;
  for (double l : lens) words = std::max(words, (size_t(l) + 3) / 4);
  std::vector<int32_t> send(words, 0), recv(words * n);
  std::memcpy(send.data(), mine.data(), mine.size());
  world.all_gather(send.data(), recv.data(), words, DType::i32)->wait();
  std::vector<std::string> out;
  for (size_t r = 0; r < n; ++r) out.emplace_back(reinterpret_cast<const char*>(recv.data() + r * words), size_t(lens[r]));
  return out;
}

}  // namespace

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

void TraceRecorder::write_gathered(ProcessGroup& world, const std::string& path) const {
  const std::vector<std::string> tracks = gather_text(track_json(world.rank()).dump(), world);
  if (world.rank() != 0) return;
  std::vector<nlohmann::json> parsed;
  for (const std::string& t : tracks) parsed.push_back(nlohmann::json::parse(t));
  write_file_atomically(path, merge_tracks(parsed).dump() + '\n');
}

}  // namespace dt::runtime
