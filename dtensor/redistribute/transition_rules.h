// The legal one-mesh-dim transitions of a placement state and what each costs.
//
// A state is one placement per mesh dim. When several mesh dims shard the same tensor dim t they
// split it in mesh-dim order, so only the innermost (highest) mesh dim sharding t may stop sharding
// it, and a mesh dim may start sharding t only if it is higher than every mesh dim already
// sharding it. Example on mesh 2x4 with (S(0),S(0)): mesh dim 1 can all_gather (its group holds
// consecutive pieces of one mesh-dim-0 chunk), but mesh dim 0 cannot — its group's pieces are
// interleaved with mesh dim 1's. Mesh dims of size 1 split nothing and are ignored by these rules.
// Strided shards SS(t) split after every plain S(t) (dtensor_spec.h split_key): "innermost" and
// "higher" below are in that split order, so (SS(0),S(0)) lets mesh dim 0 all_gather.
//
// Legal transitions on mesh dim m (group size n > 1):
//   R    -> S(t)   chunk           if m is above every mesh dim sharding t
//   R    -> P(op)  zero (sum, prod: index 0 keeps the value, the others the identity) or keep
//                  (avg, max, min)
//   S(t) -> R      all_gather      if m is the innermost mesh dim sharding t
//   S(t) -> S(u)   all_to_all      if m is innermost for t and above every mesh dim sharding u
//   S(t) <-> SS(t) keep            if no other mesh dim shards t (the same rows)
//   S(t) -> P(op)  zero            if m is innermost for t, op in sum|max|min|prod (avg has no exact fill)
//   P(op)-> R      all_reduce
//   P(op)-> S(t)   reduce_scatter  if m is above every mesh dim sharding t
// Mixed partial ops (dtensor_spec.h): the value reduces the partial mesh dims from the last to the
// first. A move to or from P(op) on mesh dim m (creating it, all_reduce, reduce_scatter) is legal
// only if op commutes with the partial op of every later mesh dim (size > 1): then P(op) may be
// taken as the first reduction. Equal ops commute, and sum with avg; max, min and prod only with
// themselves. So S(0),P(sum),P(min) reduces mesh dim 2 first, and R -> P(sum),P(min) creates mesh
// dim 1's sum before mesh dim 2's min. P(a) -> P(b) is never legal.
// On a mesh dim of size 1 every change is a `keep` (the data is the same).
//
// Costs are taken at mesh coordinate 0, whose shards are the largest (torch.chunk puts the short
// ones last), so `bytes` is what the busiest rank sends.
#pragma once

#include <array>
#include <optional>

#include "dtensor/core/shape.h"
#include "dtensor/layout/placement.h"
#include "dtensor/redistribute/redistribute_plan.h"

namespace dt {

inline constexpr int64_t kMaxPlanMeshDims = 8;
inline constexpr int64_t kMaxPlanTensorRank = 16;

struct Transition {
  StepKind kind;
  int64_t bytes;
};

// Returns true when partial ops a and b can be combined in one state.
inline bool partial_ops_commute(ReduceOp a, ReduceOp b) {
  auto linear = [](ReduceOp op) { return op == ReduceOp::sum || op == ReduceOp::avg; };
  return a == b || (linear(a) && linear(b));
}

class TransitionRules {
 public:
  // `state` holds mesh_shape.size() normalised placements; it must outlive this object (the
  // shapes are copied).
  TransitionRules(const Shape& mesh_shape, const Placement* state, const Shape& shape, size_t itemsize);

  // Returns the step that changes mesh dim m from state[m] to `to`, or nullopt when that is not
  // legal in this state. `to` must differ from state[m].
  std::optional<Transition> step(int64_t m, const Placement& to) const;
  // Returns the flattened step (redistribute_plan.h) that makes every mesh dim of `dims_mask`
  // (at least two, each of size > 1) Replicate, or nullopt when there is none: they must hold
  // the same P(op) (all_reduce), or the same S(t) as the innermost splits of t where only plain
  // shards split t and their sizes divide t's extent (all_gather in the nested split order).
  std::optional<Transition> flat_step(uint32_t dims_mask) const;
  // Returns the flattened reduce_scatter that makes every mesh dim of `dims_mask` (at least two,
  // each of size > 1, all holding the same P(op)) S(t): one reduce_scatter over the group spanning
  // them, half the bytes of a flattened all_reduce (PyTorch's reduce_scatter on a flattened mesh
  // dim), when those dims become the innermost plain splits of t and the extent divides evenly.
  std::optional<Transition> flat_reduce_scatter(uint32_t dims_mask, int64_t t) const;

  // Returns the size of tensor dim t at coordinate 0 before mesh dim m splits it.
  int64_t parent_extent(int64_t t, int64_t m) const;
  int64_t local_extent(int64_t t) const { return loc_[size_t(t)]; }
  int64_t innermost(int64_t t) const { return innermost_[size_t(t)]; }

 private:
  // Returns the product of the local extents of every tensor dim but a and b (-1 for none).
  int64_t rest(int64_t a, int64_t b) const;
  // True when op commutes with the partial op of every mesh dim after m (of size > 1).
  bool partial_allowed(int64_t m, ReduceOp op) const;
  // Returns the product of the sizes of the mesh dims of `dims_mask` when they all hold the
  // placement of the lowest one, 0 otherwise. Walks the mask's bits, no allocation: the planner
  // calls the flattened rules for every mask at every search state.
  int64_t uniform_group(uint32_t dims_mask) const;

  std::array<int64_t, kMaxPlanMeshDims> mesh_{};
  const Placement* state_;
  std::array<int64_t, kMaxPlanTensorRank> shape_{};
  size_t itemsize_;
  int64_t ndim_;
  int64_t rank_;
  std::array<int64_t, kMaxPlanTensorRank> loc_{};        // local extent at coordinate 0
  std::array<int64_t, kMaxPlanTensorRank> innermost_{};  // highest mesh dim (size > 1) sharding t, -1
};

}  // namespace dt
