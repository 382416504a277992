// A redistribution plan: the ordered steps that move a tensor from one placement list to another
// on the same mesh, each acting on one mesh dim.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "dtensor/core/dtype.h"
#include "dtensor/core/shape.h"
#include "dtensor/layout/placement.h"
#include "dtensor/redistribute/cost_model.h"

namespace dt {

// What one step does on its mesh dim (group size n, local size s):
//   all_gather      S(d) -> R     pad to the chunk size, gather, unpad      (n-1)·c bytes
//   all_reduce      P(op) -> R                                              2(n-1)/n·s
//   reduce_scatter  P(op) -> S(d) pad to n·c, reduce-scatter, unpad         (n-1)·c
//   all_to_all      S(d) -> S(e)  exact split sizes, no padding             ≈ (n-1)/n·s
//   chunk           R -> S(d)     local slice                                0
//   zero            R -> P(sum|prod): group index 0 keeps the value, the others hold 0 (1);
//                   S(d) -> P(sum|max|min): the own chunk in a buffer of the unsharded extent
//                   filled with the op's identity (0, lowest, highest, 1)     0
//   keep            a relabel with identical data: R -> P(avg|max|min), or any change on a mesh
//                   dim of size 1                                             0
//
// A flattened step acts on several mesh dims at once through the group spanning them (their
// members ordered by mesh coordinate, the lowest mesh dim slowest: the order in which nested
// shards split a tensor dim), with the same src and dst on each of them. The planner takes one
// where the cost model says it is cheaper than a step per mesh dim (one latency, fewer bytes), on
// meshes with at most DeviceMesh::kMaxFlatDims dims of size > 1:
//   all_reduce  P(op) on every dim -> R on every dim            2(N-1)/N·s   (N: the group's size)
//   all_gather  S(t) on every dim -> R on every dim, when those dims are the innermost splits of t,
//               t is split by plain shards only and the extent they split divides by N:
//               the pieces arrive in the nested split order                 (N-1)·c
//   reduce_scatter  P(op) on every dim -> S(t) on every dim, when they become the innermost plain
//               splits of t and the extent divides by N: half a flattened all_reduce (N-1)·c
enum class StepKind : uint8_t { all_gather, all_reduce, reduce_scatter, all_to_all, chunk, zero, keep };
inline constexpr int kNumStepKinds = 7;

std::string_view step_kind_name(StepKind kind);
bool is_collective(StepKind kind);
// The cost model's time of a step of `kind` moving `bytes` per rank over the mesh dims of
// `mesh_dims_mask` (bit m: mesh dim m) of a mesh laid out row-major over the ranks: 0 for a
// local step; a collective is priced for its kind, its group's size and whether it spans hosts.
double step_time_us(const CostModel& model, const Shape& mesh_shape, uint32_t mesh_dims_mask, StepKind kind,
                    int64_t bytes);

struct RedistributeStep {
  int64_t mesh_dim = 0;  // the step's mesh dim; for a flattened step the lowest of its dims
  StepKind kind = StepKind::keep;
  Placement src, dst;   // the placement of this mesh dim before and after the step
  int64_t bytes = 0;    // bytes sent by one rank (the largest over ranks for uneven shards)
  double time_us = 0;   // estimated time under the planner's cost model
  uint32_t flat_dims = 0;  // a flattened step: bit m set for each of its mesh dims; 0 otherwise

  bool flattened() const { return flat_dims != 0; }
  // Returns the step's mesh dims in increasing order ({mesh_dim} unless flattened).
  std::vector<int64_t> mesh_dims() const;
  // Returns "1", or "0+1" for a flattened step.
  std::string mesh_dims_str() const;
  bool operator==(const RedistributeStep& o) const {
    return mesh_dim == o.mesh_dim && kind == o.kind && src == o.src && dst == o.dst && bytes == o.bytes &&
           time_us == o.time_us && flat_dims == o.flat_dims;
  }
};

// Returns the mesh dims whose bits are set in `mask`, in increasing order.
std::vector<int64_t> mesh_dims_of(uint32_t mask);

struct RedistributePlan {
  Shape mesh_shape;
  Placements src, dst;
  Shape shape;
  DType dtype = DType::f32;
  std::vector<RedistributeStep> steps;
  int64_t total_bytes = 0;   // sum of the steps' bytes per rank
  double total_time_us = 0;  // sum of the steps' estimated times

  int num_collectives() const;
  // Returns the number of collectives per kind name ({"all_to_all": 1}).
  std::map<std::string, int> collective_counts() const;
  // Returns a printable table: one line per step, then the totals.
  std::string table() const;
  // Returns a plan with no steps yet whose src/dst are normalised against the mesh and tensor
  // ranks (shared by the planner and the PyTorch-greedy baseline).
  static RedistributePlan empty_for(const Shape& mesh_shape, const Placements& src, const Placements& dst,
                                    const Shape& shape, DType dtype);
  bool operator==(const RedistributePlan& o) const {
    return mesh_shape == o.mesh_shape && src == o.src && dst == o.dst && shape == o.shape && dtype == o.dtype &&
           steps == o.steps && total_bytes == o.total_bytes && total_time_us == o.total_time_us;
  }
};

}  // namespace dt
