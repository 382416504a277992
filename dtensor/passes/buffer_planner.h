// Plans the comm buffers of a per-rank program inside a symmetric arena (comm/symmetric_arena.h)
// and records the plan in the program as `arena_offset` attributes (the plan-comm-buffers pass).
//
// Comm buffers are the results of ops that can write into a preallocated output
// (OpDef::writes_preallocated_out: bucket_copy_in, chunk_cat, clone and the functional
// collectives) when a collective reads or produces them. A buffer is live from its producer to
// the last reader of anything aliasing it (OpDef::result_aliases_operand: waits, views, in-place
// collectives); a buffer a collective reads stays live until that collective's wait, because the
// collective reads it while in flight. Buffers that alias a graph output are not planned: the
// arena is reused by the next iteration, so what a run returns must not live there.
// Buffers are placed largest first (ties: earlier definition first) at the lowest 64-byte-aligned
// offset that overlaps no placed buffer live at the same time. The plan depends only on the
// program, so every rank running the same program gets the same offsets, in every iteration.
#pragma once

#include <cstddef>
#include <optional>
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

// Plans the program's comm buffers (ignores any arena_offset already set).
CommBufferPlan plan_comm_buffers(const ir::Graph& graph);

// Plans the comm buffers of the per-rank programs of one job together and sets their
// arena_offset attributes: buffer k of every program gets the same offset, sized for the largest
// of them (uneven shards make ranks' buffers differ in size), never sharing bytes with a buffer
// that is live at the same time in any program. Returns the arena bytes per rank, or nullopt
// (programs unchanged) when the programs' comm buffers do not correspond one to one (different
// counts or producing ops: ranks of different groups may issue different collectives, e.g. a
// rowwise bias gathered on one tp rank only); then each program keeps its own plan and
// same_arena_layout() is false.
std::optional<size_t> plan_symmetric_comm_buffers(const std::vector<ir::Graph*>& programs);

// Returns whether every program places the same sequence of arena offsets (in node order), so
// that one SymmetricArena can hold them all with identical offsets on every rank.
bool same_arena_layout(const std::vector<const ir::Graph*>& programs);

// Sets the arena_offset attribute of every planned buffer's producer (and -1 on all others).
void apply_comm_buffer_plan(ir::Graph& graph, const CommBufferPlan& plan);

// Reads the arena_offset attributes back and checks them: no two buffers live at the same time
// share bytes, and no buffer aliases a graph output. Returns the arena bytes the program needs
// (0 when nothing is placed). Throws ValueError naming the two values (or the output) otherwise,
// so a hand-written or stale plan fails before it corrupts data.
size_t check_comm_buffer_plan(const ir::Graph& graph);

}  // namespace dt::passes
