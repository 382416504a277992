// The byte-level collective interface every algorithm and backend is written against.
//
// A ProcessGroup is an ordered set of global ranks; `rank()` is the caller's index inside it (the
// group-local index decides where a rank's data goes: in group [0,2,4,6], global rank 4 is index
// 2 and receives chunk 2 of a reduce_scatter). Buffers are raw bytes described by dtype + element
// count; callers keep them alive until the Work completes. Every call is non-blocking and returns a
// Work; `wait` rethrows a dt::CommError when the collective failed or timed out.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/comm/process_group_fwd.h"
#include "dtensor/comm/reduce_op.h"
#include "dtensor/core/dtype.h"

namespace dt {

// The all_reduce algorithm a caller may request (comm lowering's `algo` attribute). `automatic`
// lets the backend pick (threads: by CommOptions::one_shot_threshold).
enum class AllReduceAlgo : uint8_t { automatic, one_shot, two_shot };
std::string_view all_reduce_algo_name(AllReduceAlgo algo);  // "auto" | "one_shot" | "two_shot"
AllReduceAlgo parse_all_reduce_algo(std::string_view text);  // inverse; ValueError otherwise

using Duration = std::chrono::milliseconds;

struct CommOptions {
  Duration timeout{60000};          // per-collective timeout (default 60 s)
  bool check_collectives = false;   // debug: compare op, dtype, count, seq across ranks first
  size_t one_shot_threshold = 256 * 1024;  // all_reduce bytes at or under: one-shot, else two-shot
};

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective completes; throws dt::CommError on failure or after `timeout`
  // (the group's configured timeout when not given).
  virtual void wait() = 0;
  virtual void wait(Duration timeout) = 0;
  virtual bool is_completed() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;  // index of the caller inside this group
  virtual int size() const = 0;
  virtual const std::vector<int>& global_ranks() const = 0;
  virtual std::string backend_name() const = 0;
  virtual const CommOptions& options() const = 0;

  // In place: buf holds `count` elements on every rank and ends with the reduction.
  virtual WorkPtr all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) = 0;
  // all_reduce with a requested algorithm; every rank must request the same one. This default
  // ignores the hint, for backends that have no choice to make (or choose themselves, like mpi).
  virtual WorkPtr all_reduce_with_algo(void* buf, size_t count, DType dtype, ReduceOp op, AllReduceAlgo algo) {
    (void)algo;
    return all_reduce(buf, count, dtype, op);
  }
  // out[i*count ..] = rank i's in[0..count).
  virtual WorkPtr all_gather(const void* in, void* out, size_t count, DType dtype) = 0;
  // all_gather along a later dim: in is `rows` rows of count/rows elements (rows divides count),
  // out is rows x size() x count/rows and rank i's row r lands at out[(r*size() + i)*count/rows ..].
  // rows == 1 is all_gather. Saves the copy that turns stacked blocks into the gathered layout.
  virtual WorkPtr all_gather_rows(const void* in, void* out, size_t count, size_t rows, DType dtype) = 0;
  // in holds size()*count elements; out[0..count) = reduction over ranks of in[rank*count ..].
  virtual WorkPtr reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op) = 0;
  // Rank r sends in[send_offset(j) .. +send_counts[j]) to rank j, which stores it at
  // out[recv_offset(r) .. +recv_counts[r]); offsets are prefix sums of the counts.
  virtual WorkPtr all_to_all(const void* in, const std::vector<size_t>& send_counts, void* out,
                             const std::vector<size_t>& recv_counts, DType dtype) = 0;
  virtual WorkPtr broadcast(void* buf, size_t count, DType dtype, int root) = 0;
  virtual WorkPtr send(const void* buf, size_t count, DType dtype, int dst) = 0;
  virtual WorkPtr recv(void* buf, size_t count, DType dtype, int src) = 0;
  virtual WorkPtr barrier() = 0;

  // Returns the subgroup of the given global ranks (any order, e.g. {0,2,4,6}); called by the
  // members of the new group. Throws ValueError for duplicates, unknown ranks, or a caller that is
  // not a member.
  virtual std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& global_ranks) = 0;
};
using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

}  // namespace dt
