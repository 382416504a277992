// What one rank asked a collective to do, in a form every backend can compare across ranks.
//
// A CollectiveDesc is the per-rank "signature" of one collective call: op, dtype, element count,
// reduce op, root/peer and (all_to_all) the split counts. Backends publish it next to the buffers
// (threads) or exchange it before the collective (mpi) and call `find_collective_mismatch`, so the
// debug mode (CommOptions::check_collectives) reports
//   collective #3 on group [0, 1] mismatch: rank 0 issued all_reduce(f32, 1000, sum),
//   rank 1 issued all_gather(f32, 1000)
// instead of corrupting data. Two levels exist because some mismatches are memory-unsafe (a peer
// would read past a buffer or algorithms would disagree on phases: different op kind, count or
// element width) and are always checked, while others only corrupt values (dtype of the same
// width, reduce op, root) and are checked in debug mode.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/comm/process_group.h"

namespace dt {

enum class CollectiveOp : uint8_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  all_to_all,
  broadcast,
  send,
  recv,
  barrier,
};
std::string_view collective_op_name(CollectiveOp op);

struct CollectiveDesc {
  CollectiveOp op = CollectiveOp::barrier;
  DType dtype = DType::f32;
  size_t count = 0;  // elements per rank block (see ProcessGroup); unused for all_to_all
  ReduceOp reduce_op = ReduceOp::sum;  // all_reduce, reduce_scatter
  // all_reduce only: the algorithm the backend resolved (a mismatch is memory-unsafe: the
  // algorithms run different phases).
  AllReduceAlgo algo = AllReduceAlgo::automatic;
  // all_gather only: each rank block is `rows` rows of count/rows elements, and out holds them
  // row-interleaved (out row r = every rank's row r, in group order: a gather along a later dim).
  // 1: the blocks are stacked. A mismatch would leave garbage, not overrun a buffer, but it is
  // checked with the counts.
  size_t rows = 1;
  int root = -1;                   // broadcast root, send dst or recv src (group-local index)
  std::vector<size_t> send_counts;  // all_to_all only
  std::vector<size_t> recv_counts;  // all_to_all only

  // Returns the text form used in errors and the flight recorder: "all_reduce(f32, 1000, sum)",
  // "broadcast(f32, 10, root=2)", "all_to_all(f32, send=[1, 2], recv=[1, 1])", "barrier()".
  std::string str() const;
  // Returns the bytes of one rank block (all_to_all: the bytes this rank sends).
  size_t bytes() const;
};

enum class MatchLevel : uint8_t {
  memory_safety,  // op kind, element counts and element width: what keeps peers' reads in bounds
  full,           // also dtype, reduce op and root (debug mode)
};

// Returns "" when the descriptors of one collective agree, else the error text naming the first
// rank that disagrees with group index 0 (or, for all_to_all, the first sender/receiver pair whose
// counts disagree). descs[i] belongs to group index i, whose global rank is global_ranks[i].
std::string find_collective_mismatch(const std::vector<const CollectiveDesc*>& descs,
                                     const std::vector<int>& global_ranks, int64_t seq,
                                     MatchLevel level);

// Returns "[0, 2, 4, 6]".
std::string ranks_str(const std::vector<int>& ranks);

}  // namespace dt
