// Plans the comm buffers of a per-rank program inside a symmetric arena (comm/symmetric_arena.h).
//
// Comm buffers are the flat inputs the bucketing and lowering passes create for collectives
// (bucket_copy_in, chunk_cat, clone results read by a collective) and every collective's output.
// A buffer is live from its producer to the last reader of anything aliasing it (its wait, and
// views of the wait: flat_view, view, reshape). Buffers are placed largest first (ties: earlier
// definition first) at the lowest 64-byte-aligned offset that overlaps no placed buffer live at
// the same time. The plan depends only on the program, so every rank running the same program
// gets the same offsets, in every iteration.
#pragma once

#include <cstddef>
#include <vector>

#include "dtensor/ir/graph.h"

namespace dt::passes {

struct CommBuffer {
  const ir::Value* value = nullptr;
  size_t offset = 0;
  size_t bytes = 0;
  size_t first = 0, last = 0;  // node positions of the live range
};

struct CommBufferPlan {
  std::vector<CommBuffer> buffers;  // in definition order
  size_t total_bytes = 0;           // arena bytes per rank
  // Returns the buffer of value v, or null.
  const CommBuffer* find(const ir::Value* v) const;
};

CommBufferPlan plan_comm_buffers(const ir::Graph& graph);

}  // namespace dt::passes
