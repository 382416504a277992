// The redistribution planner: the cheapest sequence of one-mesh-dim steps from a placement list
// to another, under an α–β cost model, with a plan cache.
//
// State: one placement per mesh dim (the layout of the tensor after the steps so far). The
// legal moves and their costs are TransitionRules (transition_rules.h): nested shards of one
// tensor dim are split in mesh-dim order, so only the innermost split can be undone and a new
// split must be innermost.
//
// Search: Dijkstra over the states of the mesh dims of size > 1, ordered by (estimated time,
// bytes, number of steps). Each such mesh dim ranges over R, S(0..rank-1) and P(op) for op in
// {sum} ∪ the partial ops of the source and target (any other op is never useful: a detour through
// P(sum) costs the same and commutes with more). Every state reaches every valid target through
// the all-Replicate state (gather innermost first, then chunk outermost first), so a plan always
// exists unless refused up front.
//
// Step order: first a `keep` on every mesh dim of size 1 whose placement changes to a
// non-partial one (its data is the same in every placement), then the searched steps, then a
// `keep` on every mesh dim of size 1 that becomes partial (last; a mesh dim of size 1 reduces
// nothing, so its partial op never constrains the order of mixed partials).
//
// Invariants: every intermediate state is valid (a DTensorSpec would accept it); the last state
// equals the target (DT_CHECKed); the plan depends only on (mesh shape, source, target, global
// shape, dtype, cost model), never on the rank, so every rank issues the same collectives.
//
// Mixed partial ops (S(0),P(sum),P(min)) are reduced in their fixed order, the last mesh dim first
// (dtensor_spec.h, transition_rules.h); flattened steps reduce several mesh dims of one op at once
// (all_reduce, reduce_scatter) or gather them (redistribute_plan.h).
//
// Refused with ValueError: P(a) -> P(b) with a != b on a mesh dim (not a redistribution),
// specs on different meshes (cross-mesh moves are not supported), different global shapes or
// dtypes, and invalid placement lists (DTensorSpec's errors).
//
// Because PyTorch's greedy order (replicate inner to outer, then shard outer to inner) is one
// path of this graph whenever its states are legal, the plan is never more expensive; it is
// strictly cheaper where PyTorch gathers then chunks (S(i) -> S(j) uses one all_to_all).
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>

#include "dtensor/layout/dtensor_spec.h"
#include "dtensor/redistribute/cost_model.h"
#include "dtensor/redistribute/redistribute_plan.h"
#include "dtensor/redistribute/transition_rules.h"

namespace dt {

class RedistributePlanner {
 public:
  explicit RedistributePlanner(CostModel model = {}) : model_(model) {}

  // Returns the cached plan, planning it on a miss. Thread-safe. Placements may use negative
  // shard dims.
  std::shared_ptr<const RedistributePlan> plan(const Shape& mesh_shape, const Placements& src,
                                               const Placements& dst, const Shape& shape, DType dtype);
  // Same, from two specs; refuses different meshes, shapes or dtypes.
  std::shared_ptr<const RedistributePlan> plan(const DTensorSpec& src, const DTensorSpec& dst);
  // Plans without touching the cache. `fixed_dims`: tensor dims (bit t) no step may shard.
  RedistributePlan plan_uncached(const Shape& mesh_shape, const Placements& src, const Placements& dst,
                                 const Shape& shape, DType dtype, uint32_t fixed_dims = 0) const;

  const CostModel& cost_model() const { return model_; }
  size_t cache_size() const;
  void clear_cache();

  // The cache key: sizes and placement codes in fixed arrays, hashed without building strings.
  struct Key {
    uint8_t mesh_ndim = 0, rank = 0, dtype = 0;
    std::array<uint8_t, kMaxPlanMeshDims> src{}, dst{};
    std::array<int64_t, kMaxPlanMeshDims> mesh{};
    std::array<int64_t, kMaxPlanTensorRank> shape{};
    bool operator==(const Key& o) const;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };

 private:
  // A plan between placement lists holding blocked shards (a fused projection's layout, never
  // moved): the same blocked shard on both sides and the other mesh dims' steps around it, e.g.
  // FSDP's all_gather over dp of S(1),S(0,blocks=3) -> R,S(0,blocks=3). ValueError otherwise.
  RedistributePlan plan_around_blocks(const Shape& mesh_shape, const Placements& src, const Placements& dst,
                                      const Shape& shape, DType dtype) const;

  CostModel model_;
  mutable std::mutex mu_;
  std::unordered_map<Key, std::shared_ptr<const RedistributePlan>, KeyHash> cache_;
};

// Returns the process-wide planner (default cost model) used by DTensor::redistribute.
RedistributePlanner& default_planner();

}  // namespace dt
