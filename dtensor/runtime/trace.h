// Chrome trace (Perfetto-compatible JSON) of a run: one track per rank (a single-device run has
// one track; under mpirun each process records its own rank's track and rank 0 merges them).
//
// Recorded through the interpreter's node hook: every node is a complete event ("ph": "X") on
// its rank's thread track, with its op as category (compute ops "compute", collectives and waits
// "comm"); every collective also gets an async slice ("ph": "b" / "e", category "collective")
// from its issue to the end of its wait_tensor, which is when this rank knows it completed. A
// wait that takes long is communication that compute did not hide.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtensor/comm/process_group.h"
#include "dtensor/runtime/interpreter.h"

namespace dt::runtime {

class TraceRecorder {
 public:
  explicit TraceRecorder(int world_size);

  // Returns a node hook recording into `rank`'s track; each rank's hook must be used by one
  // thread at a time (ranks record concurrently into separate tracks).
  NodeHook hook(int rank);
  // Returns the trace as Chrome trace JSON ({"traceEvents": [...]}).
  nlohmann::json to_json() const;
  // Writes to_json() to `path` (IoError when it cannot be written).
  void write(const std::string& path) const;
  // Returns `rank`'s track: a JSON array of its events, its thread-name record first.
  nlohmann::json track_json(int rank) const;
  // Returns the Chrome trace JSON of tracks made by track_json (possibly in other processes,
  // whose recorders were created at the same moment, e.g. right after a barrier).
  static nlohmann::json merge_tracks(const std::vector<nlohmann::json>& tracks);
  // Under mpi, where every process recorded its own rank's track (recorders made right after a
  // barrier): gathers every track to rank 0, which writes the merged trace to `path`. Every rank
  // of `world` must call it.
  void write_gathered(ProcessGroup& world, const std::string& path) const;

 private:
  struct Event {
    std::string name, cat;
    double ts_us = 0, dur_us = 0;
    char ph = 'X';
    int64_t id = 0;
  };
  Clock::time_point origin_;
  std::vector<std::vector<Event>> events_;  // per rank
};

}  // namespace dt::runtime
