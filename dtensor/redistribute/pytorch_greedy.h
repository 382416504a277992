// PyTorch's greedy redistribution order (seeds/001, redistribute_local_tensor), as a baseline
// the planner is compared against in tests and `dtensor bench plan`.
//
// PyTorch decomposes every S(i) -> S(j) (and every misaligned repeated shard) into
// S(i) -> R -> S(j), then sorts the per-mesh-dim moves: shard-to-replicate/partial from the
// innermost mesh dim outwards first, then the rest, then replicate/partial-to-shard from the
// outermost mesh dim inwards. It refuses S -> P.
#pragma once

#include <optional>

#include "dtensor/redistribute/cost_model.h"
#include "dtensor/redistribute/redistribute_plan.h"

namespace dt {

// Returns PyTorch's greedy plan costed with this library's transition rules and cost model, or
// nullopt when PyTorch refuses the pair (S -> P, P(a) -> P(b)) or its order passes through a
// state that TransitionRules reject (then the two are not comparable).
std::optional<RedistributePlan> pytorch_greedy_plan(const Shape& mesh_shape, const Placements& src,
                                                    const Placements& dst, const Shape& shape, DType dtype,
                                                    const CostModel& model = {});

}  // namespace dt
