// Runs a redistribution plan on one rank: collectives on the rank's per-mesh-dim groups (and
// on MeshGroups' flattened groups for flattened steps), local pad / unpad / chunk / concatenate
// around them.
//
// Collectives work on contiguous dim-0 buffers, so a step on tensor dim t moves t to the front
// (one strided copy into the send buffer, padded with zeros to the chunk size where needed) and
// back after. Worked example, all_gather of S(0) -> R for 10 rows over 4 ranks: chunk c = 3,
// rank 3 holds 1 row and sends [row, 0, 0]; the gathered 12 rows are cut back to 10. Steps that
// need no padding on dim 0 pass the tensor itself (no copy). all_to_all uses exact split sizes
// and never pads.
#pragma once

#include "dtensor/core/tensor.h"
#include "dtensor/layout/mesh_groups.h"
#include "dtensor/redistribute/redistribute_plan.h"

namespace dt {

// Returns this rank's local tensor after the plan's steps. `local` must have the plan source's
// local shape for this rank (ShapeError otherwise) and is never modified; the result does not
// share its storage unless the plan is empty. Every rank of the mesh must call this with the
// same plan.
Tensor execute_plan(const RedistributePlan& plan, const Tensor& local, const MeshGroups& groups);

}  // namespace dt
