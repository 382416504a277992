// Moving a tensor from one (sub-)mesh to another: the transfer between pipeline stages.
//
// The source layout `from` (a mesh, placements A) and the destination layout `to` (another mesh,
// placements B, the same global shape and dtype) each give every rank a box of the global tensor:
// per tensor dim, the interval shard_extent assigns to the rank's coordinate (uneven and empty
// shards included). The plan sends each destination rank exactly the intersections of its box
// with the source boxes, point to point: no rank receives an element it does not hold afterwards,
// and no element reaches a rank twice, so the bytes a destination rank receives are its box's
// bytes minus what it already holds as a source rank too. Replicated source dims hold the same box
// on several ranks; each receiver takes a piece from one of them, chosen round-robin by the
// receiver's position so that replicas share the sending.
//
// Worked example: 10 rows, from mesh [0, 1] with S(0) (rows [0,5) [5,10)) to mesh [2, 3, 4] with
// S(0) (chunk 4: rows [0,4) [4,8) [8,10)): pieces 0->2 rows [0,4), 0->3 rows [4,5), 1->3 rows
// [5,8), 1->4 rows [8,10); 10 rows move in all, none twice.
//
// Partial placements (a pending reduction) and blocked shards (a rank holds several runs) are
// refused with a ValueError: reduce or regroup on the source mesh first.
//
// Order: pieces are sorted by (source, destination, box). Every rank issues its sends and receives
// in that one global order, which cannot deadlock even where a group's transfers complete one at a
// time in issue order (the threads backend): the first unfinished piece is at the head of both its
// ranks' queues.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/comm/process_group.h"
#include "dtensor/core/tensor.h"
#include "dtensor/layout/dtensor_spec.h"

namespace dt {

// One box of the global tensor moving from one global rank to another.
struct CrossMeshPiece {
  int src = -1;  // global ranks
  int dst = -1;
  std::vector<int64_t> begin;  // global box [begin, end) per tensor dim
  std::vector<int64_t> end;
  int64_t numel() const;
};

struct CrossMeshPlan {
  DTensorSpec from, to;
  std::vector<CrossMeshPiece> pieces;  // src != dst, sorted (see the file comment)
  std::vector<CrossMeshPiece> local;   // src == dst: copied without communication

  // Returns the bytes all pieces move between ranks.
  int64_t bytes() const;
  // Returns "S(0),R on 2x2 -> S(1) on 4: 6 pieces, 1536 bytes (0->4 [0:2, 0:8], ...)".
  std::string str() const;
};

// Plans the move of a tensor laid out as `from` to the layout `to`. Throws ValueError when the
// shapes or dtypes differ or a layout is partial or blocked.
CrossMeshPlan plan_cross_mesh(const DTensorSpec& from, const DTensorSpec& to);

// What one rank did in a cross-mesh move.
struct CrossMeshResult {
  Tensor local;            // this rank's block of `to` (undefined when not in to's mesh)
  int64_t bytes_sent = 0;  // bytes this rank sent
  int64_t bytes_received = 0;
};

// Runs `plan` on the caller's rank of `world` (a group whose index i is global rank i, as
// run_ranks' world): `local` is this rank's block of `from` (ignored when the rank is not in
// from's mesh; ShapeError when its shape is not the block's). Every rank that sends or receives
// a piece must call it with the same plan.
CrossMeshResult execute_cross_mesh(const CrossMeshPlan& plan, const Tensor& local, ProcessGroup& world);

}  // namespace dt
